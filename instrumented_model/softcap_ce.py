"""The trainer's loss: mean cross-entropy over soft-capped logits, cap·tanh(z / cap), in one fused op.

`softcap_cross_entropy(z, targets, cap)` equals `F.cross_entropy(cap * tanh(z.float() / cap), targets)`.
On CUDA (when Triton is installed) it runs two Triton kernels (instrumented_model.softcap_ce_triton):
the forward reads the head output z once and keeps one log-sum-exp per row; the backward recomputes the
soft cap and writes dz once, in z's dtype. The unfused path materializes fp32 softcapped logits and
reads/writes them in several passes: 10.1 ms of the compiled speedrun step on an H200, against 5.6 ms
for the fused kernels and 4.4 ms with the hardware tanh for a 16-bit z (`fast_tanh`;
docs/benchmarks.md). One kernel doing both in the forward (the gradient written while z streams
through, so z is read from memory once) runs 0.98× the pair on an H200, because the second read of each
100 KB row misses L2.

The kernels sit behind torch.library custom ops (forward, backward, and the FP8 head's e5m2 backward,
instrumented_model.fp8_head), so torch.compile keeps them as opaque calls (no graph break); autograd
wires the backward through `register_autograd`.

Invariants:
- The fused and unfused paths agree to fp32 rounding (the kernels compute in fp32 whatever z's dtype);
  rows whose target is `ignore_index` contribute neither loss nor gradient, and the mean is over the
  other rows, as in F.cross_entropy.
- dz has z's dtype and shape and is contiguous; no host synchronisation anywhere (the number of valid
  rows and the upstream gradient stay on the device).
- `use_triton=None` (the default) means the kernels for CUDA tensors when Triton is importable, the
  unfused torch path otherwise; `use_triton=True` also runs them on CPU tensors under TRITON_INTERPRET=1.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from instrumented_model.kernels import transpose_copy
from instrumented_model.triton_jit import HAVE_TRITON, interpret_mode, kernel

IGNORE_INDEX = -100  # F.cross_entropy's default
# Launch configurations. On a GPU each kernel is autotuned once per shape among its candidates
# (triton.autotune times them on the first call's own arguments; every kernel only overwrites its outputs,
# so the repeats are harmless) and `tuned_configs()` says what won; the interpreter runs the default.
ROW_CONFIGS = tuple((block, warps) for block in (1024, 2048, 4096, 8192) for warps in (4, 8, 16))  # (BLOCK, num_warps)
ROW_DEFAULT = (4096, 8)
# |q| ≤ 1 for the normalised gradient q (softcap_ce_triton), so q·2^15 ≤ 32768 fits e5m2
# (max 57344) and its smallest normal, 2^-14, stands for |q| ≈ 2^-29: softmax terms that small do not matter.
FP8_GAIN = 2.0 ** 15
_KERNELS = "instrumented_model.softcap_ce_triton"


def softcap(z: Tensor, cap: float) -> Tensor:
    """cap·tanh(z / cap) in at least fp32 (float64 stays float64: the equivalence tests run in it)."""
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    return cap * torch.tanh(z / cap)


def softcap_cross_entropy(z: Tensor, targets: Tensor, cap: float, *, use_triton: bool | None = None) -> Tensor:
    """Mean cross-entropy of softcap(z) (z: (N, V) head output, targets: (N,) class indices)."""
    if z.dim() != 2 or targets.shape != z.shape[:1]:
        raise ValueError(f"need z (N, V) and targets (N,), got {tuple(z.shape)} and {tuple(targets.shape)}")
    if not _want_triton(z, use_triton):
        return F.cross_entropy(softcap(z, cap), targets, ignore_index=IGNORE_INDEX)
    loss, _lse = torch.ops.commscope.softcap_ce(z.contiguous(), targets.contiguous(), float(cap))
    return loss


def kernels_can_run(t: Tensor) -> bool:
    """Whether the loss kernels can run on `t`'s device: Triton installed, and a CUDA tensor or the
    interpreter (TRITON_INTERPRET=1)."""
    return HAVE_TRITON and (t.is_cuda or interpret_mode())


def fast_tanh(z: Tensor) -> bool:
    """Whether the kernels take the hardware tanh (softcap_ce_triton): on a GPU, for a 16-bit z only."""
    return z.dtype in (torch.bfloat16, torch.float16) and not interpret_mode()


def hw_e5m2_rounding() -> bool:
    """Whether the e5m2 backward rounds with the hardware conversion (softcap_ce_triton): on a GPU."""
    return not interpret_mode()


def _want_triton(z: Tensor, use_triton: bool | None) -> bool:
    if use_triton is None:
        return z.is_cuda and HAVE_TRITON and z.dtype in (torch.bfloat16, torch.float16, torch.float32)
    if use_triton and not HAVE_TRITON:
        raise ValueError("use_triton=True but triton is not installed")
    if use_triton and not kernels_can_run(z):
        raise ValueError("the softcap cross-entropy kernels need a CUDA tensor (or TRITON_INTERPRET=1)")
    return bool(use_triton)


@torch.library.custom_op("commscope::softcap_ce", mutates_args=())
def _softcap_ce(z: Tensor, targets: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """(mean loss, per-row log-sum-exp) of softcap(z)."""
    n, v = z.shape
    lse = torch.empty(n, device=z.device, dtype=torch.float32)
    row_loss = torch.empty(n, device=z.device, dtype=torch.float32)
    if n:
        _launch("softcap_ce_fwd", lambda meta: (n,), z, targets, lse, row_loss, v, z.stride(0), cap, 2.0 / cap,
                IGNORE_INDEX, FAST_TANH=fast_tanh(z))
    valid = (targets != IGNORE_INDEX).sum()
    return row_loss.sum() / valid, lse  # 0/0 = nan with no valid row, as F.cross_entropy


@_softcap_ce.register_fake
def _(z: Tensor, targets: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    return z.new_empty((), dtype=torch.float32), z.new_empty(z.shape[:1], dtype=torch.float32)


@torch.library.custom_op("commscope::softcap_ce_backward", mutates_args=())
def _softcap_ce_backward(z: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor, cap: float) -> Tensor:
    """dz of the mean loss, given its upstream gradient `grad_loss` (a 0-d tensor)."""
    n, v = z.shape
    dz = torch.empty_like(z, memory_format=torch.contiguous_format)
    if n:
        _launch("softcap_ce_bwd", lambda meta: (n,), z, targets, lse, _grad_scale(grad_loss, targets).reshape(1),
                dz, v, z.stride(0), dz.stride(0), cap, 2.0 / cap, IGNORE_INDEX, E5M2=False, FAST_TANH=fast_tanh(z),
                HW_CVT=False)
    return dz


@_softcap_ce_backward.register_fake
def _(z: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor, cap: float) -> Tensor:
    return torch.empty_like(z, memory_format=torch.contiguous_format)


@torch.library.custom_op("commscope::softcap_ce_backward_e5m2", mutates_args=())
def _softcap_ce_backward_e5m2(z: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor,
                              cap: float) -> tuple[Tensor, Tensor, Tensor]:
    """(dz8, dz8t, scale): dz of the mean loss as e5m2, dz ≈ dz8 · scale, in both layouts ((N, V) and
    its transpose (V, N), each contiguous) for the FP8 head's two gradient matmuls.

    Two passes: the row kernel writes dz8 (rounded by the hardware conversion on a GPU, `hw_e5m2_rounding`),
    then the 1-byte tiled transpose (instrumented_model.kernels) writes dz8t. On an H200 that takes 3.3 ms
    for the speedrun step, against 10.1 ms at best for one tiled kernel writing both layouts from
    registers (bench/bench_loss_kernels.py, docs/benchmarks.md)."""
    n, v = z.shape
    dz8 = torch.empty((n, v), device=z.device, dtype=torch.float8_e5m2)
    dz8t = torch.empty((v, n), device=z.device, dtype=torch.float8_e5m2)
    if n:
        gain = torch.full((1,), FP8_GAIN, device=z.device, dtype=torch.float32)
        _launch("softcap_ce_bwd", lambda meta: (n,), z, targets, lse, gain, dz8.view(torch.uint8), v, z.stride(0),
                v, cap, 2.0 / cap, IGNORE_INDEX, E5M2=True, FAST_TANH=fast_tanh(z),
                HW_CVT=hw_e5m2_rounding())
        transpose_copy(dz8t, dz8, use_triton=True)
    return dz8, dz8t, _grad_scale(grad_loss, targets) / FP8_GAIN


@_softcap_ce_backward_e5m2.register_fake
def _(z: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor, cap: float) -> tuple[Tensor, Tensor, Tensor]:
    n, v = z.shape
    return (z.new_empty((n, v), dtype=torch.float8_e5m2), z.new_empty((v, n), dtype=torch.float8_e5m2),
            z.new_empty((), dtype=torch.float32))


_CANDIDATES = {  # kernel → (autotune key, candidate (constexprs, num_warps), the interpreter's default)
    "softcap_ce_fwd": (["V"], [({"BLOCK": b}, w) for b, w in ROW_CONFIGS], ({"BLOCK": ROW_DEFAULT[0]}, ROW_DEFAULT[1])),
    "softcap_ce_bwd": (["V"], [({"BLOCK": b}, w) for b, w in ROW_CONFIGS], ({"BLOCK": ROW_DEFAULT[0]}, ROW_DEFAULT[1])),
}
_autotuned: dict[str, object] = {}


def _launch(name: str, grid, *args, **fixed) -> None:
    """Run kernel `name` on `args` and the constexprs `fixed`: autotuned on a GPU (the tuner also keys on
    the tensors' dtypes, so bf16 and e5m2 outputs are tuned apart), its default configuration in the
    interpreter."""
    key, candidates, (constexprs, warps) = _CANDIDATES[name]
    if interpret_mode():
        kernel(_KERNELS, name)[grid(constexprs)](*args, **constexprs, **fixed, num_warps=warps)
        return
    if name not in _autotuned:
        import triton

        configs = [triton.Config(c, num_warps=w) for c, w in candidates]
        _autotuned[name] = triton.autotune(configs, key=key)(kernel(_KERNELS, name))
    _autotuned[name][grid](*args, **fixed)


def tuned_configs() -> dict[str, str]:
    """The configuration autotuning chose for each kernel run so far on a GPU (for benchmark reports)."""
    return {name: str(tuner.best_config) for name, tuner in _autotuned.items()
            if getattr(tuner, "best_config", None) is not None}


def _grad_scale(grad_loss: Tensor, targets: Tensor) -> Tensor:
    """d(mean loss)/d(row loss) as a 0-d fp32 tensor: the upstream gradient over the valid rows."""
    return (grad_loss.float() / (targets != IGNORE_INDEX).sum()).reshape(())


def _setup_context(ctx, inputs, output) -> None:
    z, targets, cap = inputs
    ctx.save_for_backward(z, targets, output[1])
    ctx.cap = cap


def _backward(ctx, grad_loss: Tensor, _grad_lse: Tensor):
    z, targets, lse = ctx.saved_tensors
    return torch.ops.commscope.softcap_ce_backward(z, targets, lse, grad_loss, ctx.cap), None, None


_softcap_ce.register_autograd(_backward, setup_context=_setup_context)
