"""Fused (Triton) optimizer updates agree with the eager ones: Adam + cautious decay, NorMuon's Nesterov,
normalization and cautious step, and a whole NorMuonAndAdam run with every update fused.

On CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1 via monkeypatch; the kernels are
jitted lazily in the mode of their first call, so this does not leak into other tests). Tolerances are
fp32 rounding: the fused paths do the same operations but never materialize intermediate tensors, and
the normalization takes its norms from per-row sums of squares.
"""
from __future__ import annotations

import pytest
import torch

from instrumented_model import adam, normuon
from instrumented_model.adam import adam_step_
from instrumented_model.normuon import normuon_step_, second_moment_shape
from instrumented_model.optimizer import NorMuonAndAdam
from optim_fakes import backward_step, make_params

pytestmark = pytest.mark.skipif(not adam.HAVE_TRITON, reason="triton not installed")


@pytest.fixture
def device(triton_device):
    return triton_device


def rand(shape, seed, device, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(device)


def close(a, b):
    torch.testing.assert_close(a, b, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("wd,grad_scale", [(0.0, 1.0), (0.3, 0.5)])
def test_fused_adam_matches_eager(device, wd, grad_scale):
    shape = (37, 29)  # not a multiple of the block: the ragged tail is masked
    p = {k: rand(shape, 0, device) for k in ("fused", "eager")}
    m = {k: torch.zeros(shape, device=device) for k in p}
    v = {k: torch.zeros(shape, device=device) for k in p}
    for step in range(1, 4):
        grad = rand(shape, step, device, 0.1)
        for k in p:
            adam_step_(p[k], grad, m[k], v[k], step, (0.8, 0.95), lr=0.05, wd=wd, grad_scale=grad_scale,
                       fused=k == "fused")
    assert not torch.equal(p["eager"], rand(shape, 0, device))  # the update moved the weights
    close(p["fused"], p["eager"])
    close(m["fused"], m["eager"])
    close(v["fused"], v["eager"])
    if wd:  # the cautious mask matters: the same run without decay lands elsewhere
        q = rand(shape, 0, device)
        mq, vq = torch.zeros(shape, device=device), torch.zeros(shape, device=device)
        for step in range(1, 4):
            adam_step_(q, rand(shape, step, device, 0.1), mq, vq, step, (0.8, 0.95), lr=0.05, wd=0.0,
                       grad_scale=grad_scale, fused=True)
        assert (q - p["fused"]).abs().max() > 1e-4


@pytest.mark.parametrize("shape", [(3, 40, 24), (2, 16, 36)])  # tall: per-row scale; wide: per-column
def test_fused_normuon_matches_eager(device, shape, monkeypatch):
    # Polar Express runs in bf16 on CUDA: fp32-rounding differences of its input (fused vs eager Nesterov)
    # flip bf16 roundings that five iterations amplify to ~1e-3 of the weights (seen on an H200). The fused
    # kernels are what is compared here, so the orthogonalization runs in fp32 on every device.
    monkeypatch.setattr(normuon, "polar_dtype", lambda device: torch.float32)
    p = {k: rand(shape, 0, device, 0.05) for k in ("fused", "eager")}
    buf = {k: torch.zeros(shape, device=device) for k in p}
    second = {k: torch.zeros(second_moment_shape(shape), device=device) for k in p}
    for step in range(3):
        grad = rand(shape, step + 1, device)
        for k in p:
            normuon_step_(p[k], grad, buf[k], second[k], momentum=0.9, beta2=0.95, lr=0.02, wd=0.5,
                          grad_scale=0.5, fused=k == "fused")
    assert (p["eager"] - rand(shape, 0, device, 0.05)).abs().max() > 1e-3
    close(p["fused"], p["eager"])
    close(buf["fused"], buf["eager"])
    close(second["fused"], second["eager"])


def test_whole_optimizer_fused_matches_eager(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors (optim_fakes), so the interpreter always

    def train():
        params = make_params("transposed")
        opt = NorMuonAndAdam(params, split_step=2)
        for s in range(3):
            backward_step(opt, params, s, 0, 1, "transposed")
            opt.step(s)
            opt.zero_grad()
        return {k: p.detach().clone() for k, p in params.items()}

    monkeypatch.setattr(adam, "want_fused", lambda fused, *ts: False if fused is None else fused)
    monkeypatch.setattr(normuon, "want_fused", adam.want_fused)
    eager = train()
    monkeypatch.setattr(adam, "want_fused", lambda fused, *ts: True if fused is None else fused)
    monkeypatch.setattr(normuon, "want_fused", adam.want_fused)
    fused = train()
    assert eager.keys() == fused.keys()
    for k in eager:
        close(fused[k], eager[k])


@pytest.mark.parametrize("shape", [(3, 40, 24), (2, 16, 36)])
def test_bf16_direction_is_read_as_its_fp32_upcast(device, shape):
    """The fused NorMuon step keeps Polar Express's bf16 output: the normalization and the cautious step
    must compute exactly what they compute from its fp32 upcast."""
    v16 = rand(shape, 5, device).to(torch.bfloat16)
    bufs = [torch.full(second_moment_shape(shape), 0.5, device=device) for _ in range(2)]
    scales = [normuon.normalization_scale_(v, b, 0.95) for v, b in zip((v16, v16.float()), bufs)]
    assert torch.equal(bufs[0], bufs[1]) and torch.equal(scales[0], scales[1])
    p = [rand(shape, 0, device, 0.05) for _ in range(2)]
    for q, v in zip(p, (v16, v16.float())):
        adam.scaled_cautious_step_(q, v, scales[0], lr=0.02, wd=0.5, fused=True)
    assert torch.equal(p[0], p[1]) and not torch.equal(p[0], rand(shape, 0, device, 0.05))
    # and Polar Express hands back its own dtype when asked, with the values of the fp32 result
    g = rand(shape, 6, device)
    keep = normuon.polar_express(g, torch.bfloat16, out_dtype=None)
    assert keep.dtype == torch.bfloat16 and torch.equal(keep.float(), normuon.polar_express(g, torch.bfloat16))


@pytest.mark.parametrize("shape,dtype", [((3, 40, 24), torch.bfloat16), ((2, 16, 36), torch.float32),
                                         ((5, 33, 31), torch.bfloat16)])  # 33·31 elements: blocks span matrices
def test_divide_per_matrix_is_torch_div_bit_for_bit(device, shape, dtype):
    """Polar Express's normalization kernel: each matrix divided by its own divisor, rounded once into
    `dtype`, exactly as torch.div(x, denom, out=dtype)."""
    x = rand(shape, 9, device)
    denom = 0.5 + rand((shape[0], 1, 1), 10, device).abs()
    fused = normuon.divide_per_matrix(x, denom, dtype, fused=True)
    assert fused.dtype == dtype
    ref = torch.div(x, denom, out=torch.empty(shape, dtype=dtype, device=device))
    if device == "cuda" or dtype == torch.float32:
        assert torch.equal(fused, ref)
    else:  # Triton's CPU interpreter truncates fp32 → bf16 where the GPU rounds to nearest: 1 ulp apart
        torch.testing.assert_close(fused.float(), ref.float(), rtol=2.0 ** -7, atol=0.0)
    assert not torch.equal(fused[0].float(), x[0].to(dtype).float())  # it did divide


@pytest.mark.parametrize("tall", [True, False])
def test_symmetric_gram_is_the_full_product(device, tall):
    """The upper-triangle kernel with mirrored tiles equals XᵀX / XXᵀ (n = 40 with 16-wide tiles: 3 × 3
    tiles, ragged last row and column), with bA + cA² in its epilogue, through strided (tall) reads."""
    x = rand((3, 40, 24) if not tall else (3, 56, 40), 11, device)
    ref = x.mT @ x if tall else x @ x.mT
    got = normuon.symmetric_gram(x, tall, config=(16, 16, 4, 2))
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    # off-diagonal tiles are written twice from one accumulator: mirrored exactly
    assert torch.equal(got[:, :16, 16:], got[:, 16:, :16].mT)
    poly = normuon.symmetric_gram(ref, False, ref, alpha=0.5, beta=-2.0, config=(16, 16, 4, 2))
    torch.testing.assert_close(poly, torch.baddbmm(ref, ref, ref, beta=-2.0, alpha=0.5), rtol=1e-4, atol=1e-3)


def test_polar_express_with_the_symmetric_kernel_matches_cublas_products(device):
    for shape in ((2, 48, 32), (2, 32, 48)):
        g = rand(shape, 12, device)
        sym = normuon.polar_express(g, torch.float32, symmetric=True)
        torch.testing.assert_close(sym, normuon.polar_express(g, torch.float32), rtol=1e-4, atol=1e-4)


def test_normuon_step_with_the_symmetric_kernel_matches(device):
    """The optimizer's option reaches Polar Express: the fused step gives the cuBLAS products' result."""
    shape = (2, 48, 32)
    ps = []
    for symmetric in (False, True):
        p, grad = rand(shape, 13, device, 0.05), rand(shape, 14, device)
        mom, sec = torch.zeros(shape, device=device), torch.zeros(second_moment_shape(shape), device=device)
        normuon.normuon_step_(p, grad, mom, sec, momentum=0.95, beta2=0.95, lr=0.02, wd=0.01, fused=True,
                              symmetric=symmetric)
        ps.append(p)
    assert not torch.equal(ps[0], rand(shape, 13, device, 0.05))
    torch.testing.assert_close(ps[1], ps[0], rtol=1e-4, atol=1e-5)
