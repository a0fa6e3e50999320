"""The two LM-head layouts whose gradient-accumulation cost the record changed.

- "transposed" (the record's CastedLinearT): the weight is stored (D, V); logits = x @ W and the weight
  gradient xᵀ @ g comes out (D, V) contiguous, the same layout as the weight, so AccumulateGrad can take
  it as is (or add it with an aligned, vectorized kernel under gradient accumulation).
- "standard" (the record's old head): the weight is stored (V, D); logits = x @ Wᵀ, but the backward
  (like the old custom matmul op) still computes the weight gradient as a (D, V) contiguous tensor and
  returns its transpose VIEW. AccumulateGrad then meets a gradient whose strides do not match the weight:
  it copies it (first micro-step) or adds it with a strided elementwise kernel (later micro-steps).

Both compute the same numbers; only the layout of the weight gradient differs. On CUDA under autocast
the matmuls run in bf16 (inputs cast on entry); autograd casts the bf16 weight gradient back to the fp32
weight's dtype with a stride-preserving copy, so the layout mismatch survives mixed precision.
"""
from __future__ import annotations

import torch
from torch.amp import custom_bwd, custom_fwd

HEAD_LAYOUTS = ("transposed", "standard")


def _grad_input_and_weight(x: torch.Tensor, weight_dv: torch.Tensor, grad_logits: torch.Tensor):
    """x: (N, D), weight_dv: the weight as a (D, V) tensor, grad_logits: (N, V) → (dx (N, D), dW (D, V))."""
    grad_x = grad_logits @ weight_dv.T
    grad_w = x.T @ grad_logits  # (D, V) contiguous: rows of the gradient follow the model dim
    return grad_x, grad_w


class TransposedHeadMatmul(torch.autograd.Function):
    """logits = x @ W with W stored (D, V); returns dW in W's own (D, V) contiguous layout."""

    @staticmethod
    @custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return x @ weight

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, grad_logits: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x, grad_w = _grad_input_and_weight(x, weight, grad_logits.contiguous())
        return grad_x, grad_w


class StandardHeadMatmul(torch.autograd.Function):
    """logits = x @ Wᵀ with W stored (V, D); returns dW as the transpose view of a (D, V) tensor."""

    @staticmethod
    @custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return x @ weight.T

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, grad_logits: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x, grad_w = _grad_input_and_weight(x, weight.T, grad_logits.contiguous())
        return grad_x, grad_w.T  # (V, D) shape, strides (1, V): the layout mismatch, on purpose


def head_weight_shape(layout: str, model_dim: int, vocab_size: int) -> tuple[int, int]:
    check_layout(layout)
    return (model_dim, vocab_size) if layout == "transposed" else (vocab_size, model_dim)


def head_weight_from_embed(layout: str, embed: torch.Tensor) -> torch.Tensor:
    """The head weight tied to `embed` (V, D): embedᵀ for the transposed layout, a copy for the standard one."""
    check_layout(layout)
    return embed.T.contiguous() if layout == "transposed" else embed.clone()


def lm_head_logits(x: torch.Tensor, weight: torch.Tensor, layout: str) -> torch.Tensor:
    """x: (..., D) → logits (..., V) through the head of `layout`."""
    fn = TransposedHeadMatmul if layout == "transposed" else StandardHeadMatmul
    flat = x.reshape(-1, x.shape[-1])
    return fn.apply(flat, weight).view(*x.shape[:-1], -1)


def check_layout(layout: str) -> None:
    if layout not in HEAD_LAYOUTS:
        raise ValueError(f"head_layout must be one of {HEAD_LAYOUTS}, got {layout!r}")
