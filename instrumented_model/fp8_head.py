"""The FP8 LM head, as the record runs it: the head's forward, dx and dW matmuls in FP8, fused with the
soft-capped cross-entropy (`fp8_head_loss`, opt-in: `GPT(fp8_head=True)`, `--fp8-head`).

Why: the head is a third of the step's matmul FLOPs in the speedrun step. Hopper runs FP8
matmuls at twice the bf16 rate, and the soft cap squashes whatever precision the logits lose.

How (torch._scaled_mm, tensor-wise scales, no host sync anywhere):
- forward: z = x8 @ w8 with x8 = x / x_s in e4m3, where x_s = √D / 448. The head's input is RMS-normed, so
  |x| ≤ √D and x8 cannot overflow (clamped anyway: bf16 rounding may pass √D by an ulp). The weight's
  scale comes from its amax (a 38.6M-element reduction on the device). Then the fused loss op
  (instrumented_model.softcap_ce) on z, a bf16 tensor.
- backward: the loss kernel writes dz as e5m2 at a known scale (|q| ≤ 1 there, so no amax pass), and a
  1-byte tiled transpose gives its (V, N) copy: cuBLAS FP8 takes only the TN layout, and dx = dz8 @ w8ᵀ
  and dW = x8ᵀ @ dz8 contract over different dimensions of dz. Both matmuls run in FP8; dW comes out fp32.

Invariants: dW has the layout of the bf16 heads (instrumented_model.heads): (D, V) contiguous for the
transposed head, the transpose view of a (D, V) tensor for the standard one, so the layout study holds
with FP8 too; gradients come back in the inputs' dtypes. The loss and gradients equal the fp32 head's within FP8
rounding (tests/gpu/test_fp8_head.py bounds them). Activations are saved as e4m3 (x8), not bf16.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from instrumented_model.heads import check_layout
from instrumented_model.softcap_ce import kernels_can_run

E4M3_MAX = 448.0


def _to_e4m3(t: Tensor, scale: Tensor | float) -> Tensor:
    return (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


class FP8HeadLoss(torch.autograd.Function):
    """loss = softcap-CE(x @ W) with x: (N, D), W: (D, V) transposed head or (V, D) standard head."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, targets: Tensor, cap: float, layout: str) -> Tensor:
        w_dv = weight if layout == "transposed" else weight.T  # the weight as (D, V), a view
        x_scale = x.new_tensor(math.sqrt(x.shape[1]) / E4M3_MAX, dtype=torch.float32)
        w_scale = (w_dv.detach().abs().amax().float() / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny)
        x8 = _to_e4m3(x, x_scale)
        w8_dv = _to_e4m3(w_dv, w_scale).contiguous()  # (D, V) row-major: dx's right operand
        # _scaled_mm wants its right operand column-major: (V, D) row-major, seen transposed
        z = torch._scaled_mm(x8, w8_dv.T.contiguous().T, scale_a=x_scale, scale_b=w_scale,
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        loss, lse = torch.ops.commscope.softcap_ce(z, targets, cap)
        ctx.save_for_backward(x8, x_scale, w8_dv, w_scale, z, targets, lse)
        ctx.cap, ctx.layout, ctx.weight_dtype, ctx.x_dtype = cap, layout, weight.dtype, x.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        x8, x_scale, w8_dv, w_scale, z, targets, lse = ctx.saved_tensors
        dz8, dz8t, dz_scale = torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, ctx.cap)
        # _scaled_mm(A row-major, B column-major): w8_dv.T and dz8t.T are column-major views
        dx = torch._scaled_mm(dz8, w8_dv.T, scale_a=dz_scale, scale_b=w_scale, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(x8.T.contiguous(), dz8t.T, scale_a=x_scale, scale_b=dz_scale,
                              out_dtype=torch.float32)  # (D, V) contiguous
        dw = dw.to(ctx.weight_dtype)
        return dx.to(ctx.x_dtype), dw if ctx.layout == "transposed" else dw.T, None, None, None


def fp8_head_loss(x: Tensor, weight: Tensor, targets: Tensor, cap: float, layout: str) -> Tensor:
    """Mean soft-capped cross-entropy of the FP8 head's logits. x: (..., D), targets: (...)."""
    check_layout(layout)
    if not kernels_can_run(x):
        raise ValueError("the FP8 head runs on CUDA (its loss kernels need Triton; CPU only under TRITON_INTERPRET=1)")
    return FP8HeadLoss.apply(x.reshape(-1, x.shape[-1]), weight, targets.reshape(-1), float(cap), layout)

