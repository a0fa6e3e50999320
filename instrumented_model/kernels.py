"""Transpose kernels for the tied embedding: `transpose_copy(dst, src)` (dst = srcᵀ) and
`transpose_add(dst, src)` (dst += srcᵀ) on 2-D tensors.

Why: PyTorch runs `dst.copy_(src.T)` / `dst.add_(src.T)` as a generic elementwise kernel that walks one
side strided (2.6–5.1× the time of an aligned add_ on one H200: bench/bench_head_layout.py,
bench/results/h200-2026-12-03.md). The Triton kernel gives
each program one tile (per element size, see TILES): it loads the tile with coalesced reads along src's rows, transposes it in
registers (`tl.trans`) and stores it with coalesced writes along dst's rows.

Invariants:
- Results are bit-identical to torch's `dst.copy_(src.T)` / `dst.add_(src.T)`: the add is done in fp32 and
  rounded once to dst's dtype, as torch does for bf16.
- Offsets are int64 (a (50304, 768)·k tensor overflows int32 indexing quickly), the grid is 1-D (no 65535
  limit on a grid axis) and ragged edges are masked, so any shape works.
- The kernel is jitted lazily (instrumented_model.triton_jit), at the first Triton call, in the mode the
  environment asks for then (`TRITON_INTERPRET=1` → Triton's CPU interpreter), so tests can run the
  Triton path on CPU in the same process as everything else.
- `use_triton=None` (the default) means Triton on CUDA tensors when Triton is importable, torch otherwise;
  CPU tensors never touch CUDA.
"""
from __future__ import annotations

import torch

from instrumented_model.triton_jit import HAVE_TRITON, cdiv, interpret_mode, kernel

# Tile per element size: (src rows per tile = dst columns, src columns per tile = dst rows, num_warps).
# bench/bench_transpose_tiles.py sweeps candidates side by side on a GPU, timing device work only; these are
# its best worst-case tiles on an H200 (fp32 92.6 %, bf16 91.7 % of an aligned copy/add; docs/benchmarks.md).
# The 1-byte tile (copy only: the FP8 head's e5m2 gradient) is bench/bench_loss_kernels.py's best of eight:
# 1.36 ms for (49152, 50304) on an H200, 85 % of the bandwidth of an aligned bf16 copy.
TILES: dict[int, tuple[int, int, int]] = {4: (64, 128, 8), 2: (256, 64, 8), 1: (128, 128, 8)}

TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BYTE_DTYPES = (torch.float8_e5m2, torch.float8_e4m3fn, torch.uint8, torch.int8)  # transpose_copy only


def triton_available() -> bool:
    return HAVE_TRITON


def _want_triton(t: torch.Tensor, use_triton: bool | None, dtypes: tuple[torch.dtype, ...] = TRITON_DTYPES) -> bool:
    if use_triton is None:
        return t.is_cuda and triton_available() and t.dtype in dtypes
    if use_triton:
        if t.dtype not in dtypes:
            raise ValueError(f"the Triton transpose kernels take {dtypes}, not dtype {t.dtype}")
        if not triton_available():
            raise ValueError("use_triton=True but triton is not installed")
        if not (t.is_cuda or interpret_mode()):
            raise ValueError("the Triton transpose kernels need a CUDA tensor (or TRITON_INTERPRET=1)")
    return bool(use_triton)


def _check(dst: torch.Tensor, src: torch.Tensor) -> None:
    if src.dim() != 2 or dst.dim() != 2:
        raise ValueError(f"transpose kernels take 2-D tensors, got {tuple(src.shape)} and {tuple(dst.shape)}")
    if dst.shape != (src.shape[1], src.shape[0]):
        raise ValueError(f"dst shape {tuple(dst.shape)} is not the transpose of src shape {tuple(src.shape)}")
    if dst.dtype != src.dtype or dst.device != src.device:
        raise ValueError("dst and src must share dtype and device")


def tile_config(dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for `dtype` (see TILES)."""
    return TILES[dtype.itemsize]


def _launch(dst: torch.Tensor, src: torch.Tensor, add: bool) -> None:
    m, n = src.shape
    if m == 0 or n == 0:
        return
    block_m, block_n, warps = tile_config(src.dtype)
    if src.dtype.itemsize == 1:  # fp8 as its bytes: the interpreter (numpy) has no fp8 types
        src, dst = src.view(torch.uint8), dst.view(torch.uint8)
    tiles_n = cdiv(n, block_n)
    grid = (cdiv(m, block_m) * tiles_n,)
    transpose_tile = kernel("instrumented_model.transpose_triton", "transpose_tile")
    transpose_tile[grid](src, dst, m, n, tiles_n, src.stride(0), src.stride(1), dst.stride(0), dst.stride(1),
                         ADD=add, DST_BF16=dst.dtype == torch.bfloat16, BLOCK_M=block_m, BLOCK_N=block_n,
                         num_warps=warps)


@torch.no_grad()
def transpose_copy(dst: torch.Tensor, src: torch.Tensor, *, use_triton: bool | None = None) -> torch.Tensor:
    """dst[:] = src.T (dst: (N, M), src: (M, N)); returns dst. Also for 1-byte dtypes (BYTE_DTYPES)."""
    _check(dst, src)
    # Named range: profilers (and `commscope layout`) see this layout change as deliberate.
    with torch.profiler.record_function("transpose_copy"):
        if _want_triton(src, use_triton, TRITON_DTYPES + BYTE_DTYPES):
            _launch(dst, src, add=False)
        else:
            dst.copy_(src.T)
    return dst


@torch.no_grad()
def transpose_add(dst: torch.Tensor, src: torch.Tensor, *, use_triton: bool | None = None) -> torch.Tensor:
    """dst += src.T (dst: (N, M), src: (M, N)); returns dst."""
    _check(dst, src)
    with torch.profiler.record_function("transpose_add"):
        if _want_triton(src, use_triton):
            _launch(dst, src, add=True)
        else:
            dst.add_(src.T)
    return dst
