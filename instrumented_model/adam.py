"""Adam update direction and the cautious weight-decay step shared by both update rules.

`adam_direction_` is bias-corrected Adam written to match torch.optim.Adam's arithmetic (eps added to
the bias-corrected √v), so it can be checked against it. `cautious_step_` applies any update direction
with decoupled weight decay gated to the elements where update and weight agree in sign (decay only
pushes a weight toward zero where the update already does).

`adam_step_` (moments + direction + cautious step) and `scaled_cautious_step_` (NorMuon's last step) are
what the optimizer calls: on CUDA they run one fused Triton kernel each (instrumented_model.optim_triton;
eager PyTorch runs ~15 full passes over the tensor, the kernel reads each input once and writes each
output once), elsewhere the eager functions above, unchanged. `fused=None` picks the kernel for
contiguous fp32/bf16 CUDA tensors when Triton is installed; `fused=True` forces it (tests run it on CPU
under TRITON_INTERPRET=1). Kernels are jitted lazily (instrumented_model.triton_jit), so importing
this module never imports Triton.

Invariants: moments are fp32 and updated in place; directions are fp32; `cautious_step_` writes the
parameter slice in place in its own dtype (a view into the parameter, so a following all-gather can send
it straight from there). Fused and eager paths agree to fp32 rounding (same operations, same order,
except that the fused paths never materialize the direction).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from instrumented_model.triton_jit import HAVE_TRITON, cdiv, kernel

ADAM_EPS = 1e-10


def adam_direction_(grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int,
                    betas: tuple[float, float], eps: float = ADAM_EPS) -> Tensor:
    """Update the moments with `grad` (step counts from 1) and return m̂ / (√v̂ + eps)."""
    beta1, beta2 = betas
    g = grad.float()
    exp_avg.lerp_(g, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1.0 - beta2 ** step)).add_(eps)
    return exp_avg / denom / (1.0 - beta1 ** step)


def cautious_step_(p: Tensor, direction: Tensor, lr: float, wd: float) -> None:
    """p ← p − lr·direction − lr·wd·p·[direction·p > 0], computed in fp32, written in place."""
    p32 = p.float()
    decay_mask = (direction * p32) > 0
    new = p32 - lr * direction
    if wd:
        new = new - (lr * wd) * p32 * decay_mask
    p.copy_(new)


# ----- fused (Triton) paths -----

FUSED_DTYPES = (torch.float32, torch.bfloat16)
BLOCK = 1024


def fused_kernel(name: str):
    """The Triton kernel `name` of instrumented_model.optim_triton, jitted in the current interpret mode."""
    return kernel("instrumented_model.optim_triton", name)


def want_fused(fused: bool | None, *tensors: Tensor) -> bool:
    """Whether to run the fused kernel: forced by `fused`, else for contiguous CUDA fp32/bf16 tensors."""
    if fused is not None:
        if fused and not HAVE_TRITON:
            raise ValueError("fused=True but triton is not installed")
        if fused and not all(t.is_contiguous() for t in tensors):
            raise ValueError("the fused optimizer kernels index flat memory: tensors must be contiguous")
        return fused
    return HAVE_TRITON and all(t.is_cuda and t.is_contiguous() and t.dtype in FUSED_DTYPES for t in tensors)


def grid(n: int) -> tuple[int]:
    return (cdiv(n, BLOCK),)


def adam_step_(p: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int,
               betas: tuple[float, float], lr: float, wd: float, eps: float = ADAM_EPS,
               grad_scale: float = 1.0, *, fused: bool | None = None) -> None:
    """cautious_step_(p, adam_direction_(grad·grad_scale, ...), lr, wd) in one pass when fused."""
    if not want_fused(fused, p, grad, exp_avg, exp_avg_sq):
        g = grad.float() if grad_scale == 1.0 else grad.float() * grad_scale
        cautious_step_(p, adam_direction_(g, exp_avg, exp_avg_sq, step, betas, eps), lr, wd)
        return
    beta1, beta2 = betas
    n = p.numel()
    if n:
        fused_kernel("adam_cautious")[grid(n)](
            p, grad, exp_avg, exp_avg_sq, n, float(grad_scale), beta1, beta2, 1.0 - beta1 ** step,
            math.sqrt(1.0 - beta2 ** step), eps, lr, lr * wd, BLOCK=BLOCK)


def scaled_cautious_step_(p: Tensor, v: Tensor, scale: Tensor, lr: float, wd: float, *,
                          fused: bool | None = None) -> None:
    """cautious_step_(p, v * scale, lr, wd) for v, p (k, rows, cols) and scale (k, rows, 1) or (k, 1, cols)
    (fp32), in one pass when fused."""
    if not want_fused(fused, p, v):
        cautious_step_(p, v * scale, lr, wd)
        return
    k, rows, cols = v.shape
    per_row = tuple(scale.shape) == (k, rows, 1)
    if not per_row and tuple(scale.shape) != (k, 1, cols):
        raise ValueError(f"scale {tuple(scale.shape)} is neither per row nor per column of {tuple(v.shape)}")
    n = v.numel()
    if n:
        fused_kernel("scaled_cautious")[grid(n)](p, v, scale.contiguous(), n, rows, cols, lr, lr * wd,
                                                 PER_ROW=per_row, BLOCK=BLOCK)
