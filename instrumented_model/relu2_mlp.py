"""The MLP block, y = relu(x @ upᵀ)² @ down, with the relu² fused into the up projection's matmul
(`relu2_mlp`, opt-in: `GPT(fused_mlp=True)`, `--fused-mlp`; CUDA, or Triton's interpreter).

Why: with cuBLAS matmuls, the (N, 4D) hidden activation crosses memory six times per layer and step
outside the matmuls: the forward writes pre, reads it and writes post; the backward writes d(post), then
reads it and pre and writes d(pre). The Triton matmul (instrumented_model.relu2_mlp_triton) applies the
activation in its epilogue: the forward writes post only, the backward reads post and writes d(pre)
(docs/benchmarks.md, session 15, has what it saves on an H200). The other three matmuls stay cuBLAS.

    forward:   post = relu(x @ upᵀ)²    (Triton)      y = post @ down
    backward:  d_pre = (dy @ downᵀ) · 2·sqrt(post)   (Triton)
               d_down = postᵀ @ dy,   d_up = d_preᵀ @ x,   dx = d_pre @ up

Invariants: the inputs are 2-D, of one dtype (bf16 under the trainer's autocast; fp32 in tests), and
gradients come back in it; up and down are (4D, D) as the mlp bank stores them. The kernels sit behind
torch.library custom ops, so torch.compile keeps them as opaque calls (no graph break).
"""
from __future__ import annotations

import torch
from torch import Tensor

from instrumented_model.triton_jit import HAVE_TRITON, cdiv, interpret_mode, kernel

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), autotuned per shape on a GPU
MATMUL_CONFIGS = ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                  (128, 256, 64, 8, 4), (128, 128, 128, 8, 3), (64, 256, 64, 4, 4))
INTERPRETER_CONFIG = (32, 32, 32, 4, 1)
GROUP_M = 8
TMA_DEFAULT = True
_KERNELS = "instrumented_model.relu2_mlp_triton"
_autotuned: dict[str, object] = {}


def fused_mlp_can_run(x: Tensor) -> bool:
    return HAVE_TRITON and (x.is_cuda or interpret_mode())


def relu2_mlp(x: Tensor, up: Tensor, down: Tensor) -> Tensor:
    """relu(x @ upᵀ)² @ down for x (N, D), up and down (4D, D), all of one dtype."""
    if x.dim() != 2 or up.shape != down.shape or up.shape[1] != x.shape[1]:
        raise ValueError(f"need x (N, D) and up, down (4D, D), got {tuple(x.shape)}, {tuple(up.shape)}, "
                         f"{tuple(down.shape)}")
    if not (x.dtype == up.dtype == down.dtype):
        raise ValueError(f"x, up and down must share a dtype, got {x.dtype}, {up.dtype}, {down.dtype}")
    if not fused_mlp_can_run(x):
        raise ValueError("the fused MLP runs on CUDA (its kernel needs Triton; CPU only under TRITON_INTERPRET=1)")
    return torch.ops.commscope.relu2_mlp(x, up, down)[0]


def _matmul(a: Tensor, b_t: Tensor, aux: Tensor | None, tma: bool | None = None) -> Tensor:
    """relu(a @ b_tᵀ)², or with aux (a @ b_tᵀ) · 2·sqrt(aux); b_t is (N, K) row-major, read as B = b_tᵀ.
    tma: the tensor-descriptor kernel (default: `use_tma(a)`), else the pointer one."""
    m, k = a.shape
    n = b_t.shape[0]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    if m == 0:
        return c
    backward = aux is not None
    aux = aux if backward else c
    tma = use_tma(a) if tma is None else tma
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        # block shapes are set per configuration by _set_blocks (placeholders until then)
        args = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (a, b_t, c, aux)] + [m, n, k]
        name = "relu2_matmul_tma"
    else:
        args = [a, b_t, c, aux, m, n, k, a.stride(0), a.stride(1), b_t.stride(1), b_t.stride(0), c.stride(0),
                c.stride(1)]
        name = "relu2_matmul"
    fixed = {"GROUP_M": GROUP_M, "BACKWARD": backward}
    if not tma:  # full fp32 products for fp32 inputs (not TF32), and always in the interpreter
        fixed["DOT_FP32"] = interpret_mode() or a.dtype == torch.float32
    if interpret_mode():
        bm, bn, bk, warps, stages = INTERPRETER_CONFIG
        blocks = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
        if tma:
            _set_blocks({**dict(zip(("a_desc", "b_desc", "c_desc", "aux_desc"), args)), **blocks})
        kernel(_KERNELS, name)[(cdiv(m, bm) * cdiv(n, bn),)](*args, **blocks, **fixed, num_warps=warps,
                                                              num_stages=stages)
        return c
    role = f"{name}[{'bwd' if backward else 'fwd'}]"  # the tuner also keys on dtypes
    if role not in _autotuned:
        import triton

        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s,
                                 pre_hook=_set_blocks if tma else None)
                   for bm, bn, bk, w, s in MATMUL_CONFIGS]
        _autotuned[role] = triton.autotune(configs, key=["M", "N", "K"])(kernel(_KERNELS, name))
    _autotuned[role][lambda meta: (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]),)](*args, **fixed)
    return c


def use_tma(a: Tensor) -> bool:
    """Whether `_matmul` takes the tensor-descriptor kernel by default: on a GPU, for 16-bit inputs
    (TMA_DEFAULT; bench/bench_mlp_kernels.py times both kernels)."""
    return TMA_DEFAULT and a.dtype in (torch.bfloat16, torch.float16) and not interpret_mode()


def _set_blocks(nargs: dict) -> None:
    """The descriptors' tile shapes for the configuration about to run (an autotuner pre_hook)."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = nargs["aux_desc"].block_shape = [bm, bn]


def tuned_configs() -> dict[str, str]:
    """The configuration autotuning chose for each pass run so far on a GPU (for benchmark reports)."""
    return {role: str(tuner.best_config) for role, tuner in _autotuned.items()
            if getattr(tuner, "best_config", None) is not None}


@torch.library.custom_op("commscope::relu2_mlp", mutates_args=())
def _relu2_mlp(x: Tensor, up: Tensor, down: Tensor) -> tuple[Tensor, Tensor]:
    """(y, post): the block's output and the hidden activation the backward keeps."""
    post = _matmul(x.contiguous(), up.contiguous(), None)
    return post @ down, post


@_relu2_mlp.register_fake
def _(x: Tensor, up: Tensor, down: Tensor) -> tuple[Tensor, Tensor]:
    return x.new_empty((x.shape[0], down.shape[1])), x.new_empty((x.shape[0], up.shape[0]))


@torch.library.custom_op("commscope::relu2_mlp_grad_pre", mutates_args=())
def _relu2_mlp_grad_pre(dy: Tensor, down: Tensor, post: Tensor) -> Tensor:
    """d(pre) = (dy @ downᵀ) · 2·sqrt(post)."""
    return _matmul(dy.contiguous(), down.contiguous(), post.contiguous())


@_relu2_mlp_grad_pre.register_fake
def _(dy: Tensor, down: Tensor, post: Tensor) -> Tensor:
    return dy.new_empty((dy.shape[0], down.shape[0]))


def _setup_context(ctx, inputs, output) -> None:
    x, up, down = inputs
    ctx.save_for_backward(x, up, down, output[1])


def _backward(ctx, dy: Tensor, _d_post: Tensor):
    x, up, down, post = ctx.saved_tensors
    dy = dy.to(x.dtype)
    d_pre = torch.ops.commscope.relu2_mlp_grad_pre(dy, down, post)
    return d_pre @ up, d_pre.T @ x, post.T @ dy


_relu2_mlp.register_autograd(_backward, setup_context=_setup_context)
