"""Triton transpose kernels: bit-exact against torch's `copy_(src.T)` / `add_(src.T)`.

On CPU the Triton path runs in Triton's interpreter: the kernel is jitted lazily in the mode the
environment asks for at call time, so setting TRITON_INTERPRET=1 with monkeypatch works in the same
pytest process as every other test (and is undone afterwards).
"""
from __future__ import annotations

import pytest
import torch

from instrumented_model import kernels

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton not installed")

SHAPES = [(67, 133), (1, 5), (5, 1), (130, 257), (64, 128)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def rand(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype).to(device)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Compare bit patterns: exact, and NaN == NaN only when the payloads agree."""
    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_transpose_copy_and_add_are_exact(triton_device, shape, dtype):
    src = rand(shape, dtype, triton_device, 1)
    base = rand(shape[::-1], dtype, triton_device, 2)

    dst = torch.full(shape[::-1], 7.0, dtype=dtype, device=triton_device)
    assert kernels.transpose_copy(dst, src, use_triton=True) is dst
    assert torch.equal(bits(dst), bits(src.T.contiguous()))

    dst = base.clone()
    kernels.transpose_add(dst, src, use_triton=True)
    expected = base.clone()
    expected.add_(src.T)
    assert torch.equal(bits(dst), bits(expected))


@pytest.mark.parametrize("dtype", kernels.BYTE_DTYPES)
@pytest.mark.parametrize("shape", [(130, 257), (1, 300), (257, 129)])  # ragged against the 128×128 byte tile
def test_triton_transpose_copy_of_bytes_is_exact(triton_device, shape, dtype):
    """The FP8 head's e5m2 gradient is transposed by this kernel: every byte lands at its transposed place."""
    src = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(6))
    src = src.to(triton_device).view(dtype)
    dst = torch.zeros(shape[::-1], dtype=dtype, device=triton_device)
    kernels.transpose_copy(dst, src, use_triton=True)
    assert torch.equal(dst.view(torch.uint8), src.view(torch.uint8).T)
    with pytest.raises(ValueError, match="not dtype"):  # adding bytes means nothing: copy only
        kernels.transpose_add(dst, src, use_triton=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy (the interpreter) warns on inf/NaN
def test_bf16_add_rounds_to_nearest_even_like_torch(triton_device):
    # halfway and near-halfway sums, signed zeros, overflow to inf, inf - inf = NaN
    a = torch.tensor([[1.0, 1.0, -1.0, 0.0, 3.0e38, float("inf"), 256.0, -0.0]], dtype=torch.bfloat16)
    b = torch.tensor([[2 ** -8, 3 * 2 ** -8, -(2 ** -8), -0.0, 3.0e38, float("-inf"), 1.0, -0.0]],
                     dtype=torch.bfloat16)
    a, b = a.to(triton_device), b.to(triton_device)
    dst = a.T.contiguous()
    kernels.transpose_add(dst, b, use_triton=True)
    expected = a.T.contiguous()
    expected.add_(b.T)
    assert torch.equal(bits(dst), bits(expected))
    assert torch.isnan(dst[5, 0]) and torch.isinf(dst[4, 0])


def test_triton_handles_strided_operands(triton_device):
    x = rand((40, 70), torch.float32, triton_device, 3)
    dst = torch.zeros(40, 70, device=triton_device)
    kernels.transpose_copy(dst, x.T, use_triton=True)  # src is itself a transposed view
    assert torch.equal(dst, x)
    wide = torch.zeros(70, 80, device=triton_device)
    kernels.transpose_add(wide[:, ::2], x, use_triton=True)  # dst with a column stride of 2
    assert torch.equal(wide[:, ::2], x.T) and torch.count_nonzero(wide[:, 1::2]) == 0


@pytest.mark.parametrize("use_triton", [False, None])
def test_torch_fallback_on_cpu(monkeypatch, use_triton):
    def no_triton(*args, **kwargs):
        raise AssertionError("CPU tensors must not take the Triton path")

    monkeypatch.setattr(kernels, "_launch", no_triton)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    src = rand((67, 133), torch.bfloat16, "cpu", 4)
    dst = rand((133, 67), torch.bfloat16, "cpu", 5)
    expected = dst.clone()
    expected.add_(src.T)
    kernels.transpose_add(dst, src, use_triton=use_triton)
    assert torch.equal(dst, expected)
    kernels.transpose_copy(dst, src, use_triton=use_triton)
    assert torch.equal(dst, src.T)


def test_bad_arguments(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    src = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="transpose"):
        kernels.transpose_copy(torch.zeros(3, 4), src)
    with pytest.raises(ValueError, match="2-D"):
        kernels.transpose_add(torch.zeros(4, 3, 1), src)
    with pytest.raises(ValueError, match="dtype"):
        kernels.transpose_copy(torch.zeros(4, 3, dtype=torch.float64), src)
    with pytest.raises(ValueError, match="CUDA"):
        kernels.transpose_copy(torch.zeros(4, 3), src, use_triton=True)
    with pytest.raises(ValueError, match="dtype"):
        kernels.transpose_copy(torch.zeros(4, 3, dtype=torch.int32), src.int(), use_triton=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_exact_on_record_sized_tensor_cuda(dtype):
    src = torch.randn(768, 50304, device="cuda").to(dtype)
    dst = torch.randn(50304, 768, device="cuda").to(dtype)
    expected = dst.clone()
    expected.add_(src.T)
    kernels.transpose_add(dst, src)  # default on CUDA: Triton
    assert torch.equal(bits(dst), bits(expected))
    kernels.transpose_copy(dst, src)
    assert torch.equal(dst, src.T)


def test_kernels_are_jitted_once_per_interpret_mode():
    from instrumented_model import triton_jit

    a = triton_jit.kernel("instrumented_model.transpose_triton", "transpose_tile")
    assert a is triton_jit.kernel("instrumented_model.transpose_triton", "transpose_tile")
    assert a is not triton_jit.kernel("instrumented_model.optim_triton", "nesterov")
    assert [triton_jit.cdiv(a, 4) for a in (0, 1, 4, 5)] == [0, 1, 1, 2]
