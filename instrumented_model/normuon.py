"""NorMuon update direction for a shard of a parameter bank: Nesterov momentum, Polar Express
orthogonalization, neuron-wise normalization (as the 2026-01-18 modded-nanogpt record).

Everything here works on a stack of whole matrices (k, rows, cols) — the rank's shard of a bank's matrix
view — so a matrix is never split across ranks and the result does not depend on the world size.

Precision: momentum and second-moment buffers are fp32. Polar Express runs in bf16 on CUDA (the record's
choice: tensor cores, and the iteration is stable in bf16) and in fp32 on CPU, where bf16 matmuls have no
hardware support and run several times slower than fp32, which would make CPU tests and runs slow for no
numerical benefit.

`normuon_step_` (direction + cautious step) is what the optimizer calls. On CUDA its elementwise parts
are fused (adam.want_fused decides; `fused=True` forces it, e.g. on CPU under TRITON_INTERPRET=1):
Nesterov is one Triton pass, and the normalization never materializes v², v·rsqrt or the rescaled
direction: one reduction pass over v gives each row's (column's) sum of squares, from which the norm
before (Σ of them), the second-moment update and the norm after (Σ sumsq·s², s = rsqrt of the second
moment) follow on (k, rows, 1)-sized tensors; the direction v·s·(before/after) is then formed inside
the cautious-step kernel. Elsewhere the eager functions below run unchanged.

Invariants: functions ending in `_` update their buffer arguments in place; returned directions are fp32
tensors of the input's shape (the fused path keeps Polar Express's bf16 output and upcasts it as it reads:
the same values without a bf16→fp32 copy of each bank, and half the bytes for both readers); nothing here communicates.
Fused and eager agree to fp32 rounding.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from instrumented_model.adam import BLOCK, cautious_step_, fused_kernel, grid, scaled_cautious_step_, want_fused
from instrumented_model.triton_jit import cdiv

# Polar Express coefficients (a, b, c) for X ← aX + (bA + cA²)X, A = XXᵀ; one triple per iteration.
POLAR_EXPRESS_COEFFS: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
# Safety margin on the Frobenius norm so the spectral norm of the normalized input is surely below 1.
NORM_MARGIN = 1.02
NORM_EPS = 1e-6


def polar_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA (as the record), fp32 elsewhere (CPU bf16 matmul is slow, see module docstring)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def polar_express(g: Tensor, dtype: torch.dtype | None = None, out_dtype: torch.dtype | None = torch.float32,
                  symmetric: bool = False) -> Tensor:
    """Approximate the orthogonal polar factor U Vᵀ of each matrix in `g` (..., rows, cols), iterating in
    `dtype` (polar_dtype by default). Returns `out_dtype` (None: the iteration's dtype, no copy).
    `symmetric`: the Gram matrix and bA + cA² come from the Triton `symmetric_gram` kernel (upper-triangle
    tiles only, bA added in its epilogue instead of baddbmm's copy of A): 1.32 → 1.20 ms (attn) and
    2.09 → 1.90 ms (mlp) on an H200, bench_polar_express.py. Off here, where any device may call;
    normuon_step_'s fused (CUDA) path turns it on.

    The Gram matrix is always the smaller one: wide X iterates X ← aX + (bA + cA²)X with A = XXᵀ; tall X
    iterates the transposed identity X ← aX + X(bB + cB²) with B = XᵀX. The tall form gives exactly the
    transpose of the wide iteration on Xᵀ, without ever materializing a transpose: transposing tall matrices in and out would take two strided
    copies of the mlp bank, about 0.35 ms each on an H200 (`commscope layout` flags them as "optimizer: mlp
    update"). The normalization divides in
    fp32 and writes the iteration's dtype in the same pass (divide_per_matrix)."""
    dtype = dtype or polar_dtype(g.device)
    lead, (rows, cols) = g.shape[:-2], g.shape[-2:]
    x = g.reshape(-1, rows, cols).float()
    tall = rows > cols
    denom = x.norm(dim=(-2, -1), keepdim=True) * NORM_MARGIN + NORM_EPS
    x = divide_per_matrix(x, denom, dtype)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        if symmetric:
            gram = symmetric_gram(x, tall)
            poly = symmetric_gram(gram, False, gram, alpha=c, beta=b)  # bA + cA², A symmetric: A² = AAᵀ
        else:
            gram = x.mT @ x if tall else x @ x.mT
            poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # bA + cA² (B for tall X)
        if tall:
            x = torch.baddbmm(x, x, poly, beta=a, alpha=1.0)  # aX + X(bB + cB²)
        else:
            x = torch.baddbmm(x, poly, x, beta=a, alpha=1.0)  # aX + (bA + cA²)X
    x = x if out_dtype is None else x.to(out_dtype)
    return x.reshape(*lead, rows, cols)


# symmetric_gram's launch: (BLOCK, BLOCK_K, num_warps, num_stages). 768 = 6 tiles of 128, 21 of 36 computed.
# Picked from bench_polar_express.py's sweep of GRAM_CONFIGS on an H200: 4 warps are 4% faster
# on the mlp bank's XᵀX (K = 3072) and within 1% of 8 warps on the attn bank's.
GRAM_CONFIG = (128, 64, 4, 3)
GRAM_CONFIGS = ((128, 64, 8, 3), (128, 64, 4, 3), (128, 32, 4, 4), (64, 64, 4, 3), (128, 128, 8, 2),
                (64, 128, 4, 3))
_tile_pairs: dict[tuple[int, str], Tensor] = {}


def symmetric_gram(x: Tensor, tall: bool, c: Tensor | None = None, alpha: float = 1.0, beta: float = 0.0, *,
                   config: tuple[int, int, int, int] | None = None) -> Tensor:
    """alpha·XᵀX (tall) or alpha·XXᵀ of each matrix in x (k, rows, cols), plus beta·c (c symmetric, the
    result's shape), in x's dtype: the Triton kernel optim_triton.symmetric_gram, which computes only the
    upper triangle's tiles and mirrors them (the product is symmetric: ~58% of the tiles at n = 768)."""
    block, block_k, num_warps, num_stages = config or GRAM_CONFIG
    k, rows, cols = x.shape
    n, kdim = (cols, rows) if tall else (rows, cols)
    sxn, sxk = (x.stride(2), x.stride(1)) if tall else (x.stride(1), x.stride(2))
    out = torch.empty((k, n, n), dtype=x.dtype, device=x.device)
    tiles = cdiv(n, block)
    key = (tiles, str(x.device))
    if key not in _tile_pairs:
        pairs = [(i, j) for i in range(tiles) for j in range(i, tiles)]
        _tile_pairs[key] = torch.tensor(pairs, dtype=torch.int32, device=x.device).flatten()
    pairs = _tile_pairs[key]
    cin = out if c is None else c
    if k and n:
        fused_kernel("symmetric_gram")[(pairs.numel() // 2, k)](
            x, pairs, cin, out, n, x.stride(0), sxn, sxk, cin.stride(0), cin.stride(1), cin.stride(2),
            out.stride(0), out.stride(1), out.stride(2), float(alpha), float(beta), kdim=kdim,
            HAS_C=c is not None, IEEE=x.dtype == torch.float32, BLOCK=block, BLOCK_K=block_k,
            num_warps=num_warps, num_stages=num_stages)
    return out


def divide_per_matrix(x: Tensor, denom: Tensor, dtype: torch.dtype, fused: bool | None = None) -> Tensor:
    """x / denom in `dtype`, one pass; x: (k, rows, cols) fp32, denom: (k, 1, 1) fp32. On CUDA a Triton
    kernel: torch.div with a broadcast divisor runs ATen's non-vectorized elementwise kernel, which moves
    the banks at ~1.2 TB/s (0.41 ms per step on an H200)."""
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    if not want_fused(fused, x, denom, out):
        return torch.div(x, denom, out=out)
    n = x.numel()
    if n:
        fused_kernel("divide_per_matrix")[grid(n)](x, denom, out, n, x.shape[-2] * x.shape[-1], BLOCK=BLOCK)
    return out


def nesterov_(grad: Tensor, momentum_buf: Tensor, momentum: float) -> Tensor:
    """Update the fp32 momentum buffer with `grad` and return the Nesterov look-ahead blend."""
    momentum_buf.lerp_(grad, 1.0 - momentum)
    return grad.lerp(momentum_buf, momentum)


def second_moment_shape(shard_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of the neuron-wise second-moment buffer: one value per row, or per column if wide."""
    k, rows, cols = shard_shape
    return (k, rows, 1) if rows >= cols else (k, 1, cols)


def normalize_neurons_(v: Tensor, second_buf: Tensor, beta2: float) -> Tensor:
    """Scale each row (each column for wide matrices) by the inverse square root of an EMA of its mean
    square, then rescale each matrix back to its Frobenius norm before the scaling."""
    reduce_dim = -1 if second_buf.shape[-1] == 1 else -2
    sq = v.square()
    norm_before = sq.sum(dim=(-2, -1), keepdim=True).sqrt()
    second_buf.lerp_(sq.mean(dim=reduce_dim, keepdim=True), 1.0 - beta2)
    v = v * second_buf.clamp_min(1e-10).rsqrt()
    norm_after = v.norm(dim=(-2, -1), keepdim=True)
    return v * (norm_before / norm_after.clamp_min(1e-10))


def shape_lr_mul(rows: int, cols: int) -> float:
    """√max(1, rows/cols): tall matrices get a larger step so per-element update size stays comparable."""
    return math.sqrt(max(1.0, rows / cols))


def normuon_direction_(grad: Tensor, momentum_buf: Tensor, second_buf: Tensor, *,
                       momentum: float, beta2: float) -> Tensor:
    """The NorMuon update direction (fp32, grad's shape (k, rows, cols)); updates both buffers."""
    v = polar_express(nesterov_(grad.float(), momentum_buf, momentum))
    return normalize_neurons_(v, second_buf, beta2)


def nesterov_fused_(grad: Tensor, momentum_buf: Tensor, momentum: float, grad_scale: float = 1.0) -> Tensor:
    """nesterov_(grad·grad_scale, momentum_buf, momentum) as one Triton pass (contiguous tensors)."""
    out = torch.empty(momentum_buf.shape, dtype=torch.float32, device=momentum_buf.device)
    n = out.numel()
    if n:
        fused_kernel("nesterov")[grid(n)](grad, momentum_buf, out, n, float(grad_scale), momentum,
                                          BLOCK=BLOCK)
    return out


def normalization_scale_(v: Tensor, second_buf: Tensor, beta2: float) -> Tensor:
    """The per-row (per-column if wide) factor s·(‖v‖/‖v·s‖) with which normalize_neurons_ scales v, updating
    second_buf the same way; computed from one reduction pass over v (see the module docstring), in fp32
    whatever v's dtype."""
    reduce_dim = -1 if second_buf.shape[-1] == 1 else -2
    line_sumsq = torch.linalg.vector_norm(v, dim=reduce_dim, keepdim=True, dtype=torch.float32).square()
    norm_before = line_sumsq.sum(dim=(-2, -1), keepdim=True).sqrt()
    second_buf.lerp_(line_sumsq / v.shape[reduce_dim], 1.0 - beta2)
    s = second_buf.clamp_min(1e-10).rsqrt()
    norm_after = (line_sumsq * s.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return s * (norm_before / norm_after.clamp_min(1e-10))


def normuon_step_(p: Tensor, grad: Tensor, momentum_buf: Tensor, second_buf: Tensor, *, momentum: float,
                  beta2: float, lr: float, wd: float, grad_scale: float = 1.0, fused: bool | None = None,
                  symmetric: bool = True) -> None:
    """cautious_step_(p, normuon_direction_(grad·grad_scale, ...), lr, wd); p, grad: (k, rows, cols).
    `symmetric`: polar_express's symmetric-Gram kernel (fused path only)."""
    if not want_fused(fused, p, grad, momentum_buf):
        g = grad.float() if grad_scale == 1.0 else grad.float() * grad_scale
        direction = normuon_direction_(g, momentum_buf, second_buf, momentum=momentum, beta2=beta2)
        cautious_step_(p, direction, lr, wd)
        return
    # v stays in Polar Express's dtype (bf16 on CUDA): both readers below upcast it exactly as they load
    v = polar_express(nesterov_fused_(grad, momentum_buf, momentum, grad_scale), out_dtype=None,
                      symmetric=symmetric).contiguous()
    scaled_cautious_step_(p, v, normalization_scale_(v, second_buf, beta2), lr, wd, fused=True)
