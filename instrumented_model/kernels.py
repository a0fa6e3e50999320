"""Transpose kernels for the tied embedding: `transpose_copy(dst, src)` (dst = srcᵀ) and
`transpose_add(dst, src)` (dst += srcᵀ) on 2-D tensors.

Why: PyTorch runs `dst.copy_(src.T)` / `dst.add_(src.T)` as a generic elementwise kernel that walks one
side strided (3.7–6.7× slower than an aligned copy on an H200, REFERENCE.md §5). The Triton kernels give
each program one tile (see TILES): it loads the tile with coalesced reads along src's rows, transposes it
in registers (`tl.trans`) and stores it with coalesced writes along dst's rows. A 16-bit copy with even
shapes and dense rows moves 32-bit words (two rows of src at once), which runs like the fp32 kernel.

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

# Tile per kernel variant: (src rows per tile = dst columns, src columns per tile = dst rows, num_warps);
# for "b16_pairs" the first two count row pairs and 32-bit words. "b32": fp32 copy and add; "b16": 16-bit
# add and the copies that cannot use pairs; "b16_pairs": other 16-bit copies (see TILE_KEYS).
# bench/bench_transpose_tiles.py sweeps candidates side by side on a GPU (results: docs/benchmarks.md).
TILES: dict[str, tuple[int, int, int]] = {"b32": (64, 128, 8), "b16": (64, 128, 8), "b16_pairs": (64, 64, 8)}

TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
def triton_available() -> bool:
    return HAVE_TRITON


def _want_triton(t: torch.Tensor, use_triton: bool | None) -> bool:
    if use_triton is None:
        return t.is_cuda and triton_available() and t.dtype in TRITON_DTYPES
    if use_triton:
        if t.dtype not in TRITON_DTYPES:
            raise ValueError(f"the Triton transpose kernels take {TRITON_DTYPES}, not dtype {t.dtype}")
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


def tile_key(dst: torch.Tensor, src: torch.Tensor, add: bool) -> str:
    """Which kernel variant (a key of TILES) moves src into dst."""
    if src.element_size() == 4:
        return "b32"
    return "b16" if add or not _pairs_fit(dst, src) else "b16_pairs"


def _pairs_fit(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Both tensors viewable as rows of 32-bit words: even sizes and row strides, unit column stride,
    4-byte aligned storage."""
    return all(t.stride(1) == 1 and t.stride(0) % 2 == 0 and t.shape[1] % 2 == 0 and t.data_ptr() % 4 == 0
               for t in (src, dst))


def _launch(dst: torch.Tensor, src: torch.Tensor, add: bool) -> None:
    m, n = src.shape
    if m == 0 or n == 0:
        return
    key = tile_key(dst, src, add)
    if key == "b16_pairs":
        _launch_pairs(dst, src)
        return
    block_m, block_n, warps = TILES[key]
    tiles_n = cdiv(n, block_n)
    grid = (cdiv(m, block_m) * tiles_n,)
    transpose_tile = kernel("instrumented_model.transpose_triton", "transpose_tile")
    transpose_tile[grid](src, dst, m, n, tiles_n, src.stride(0), src.stride(1), dst.stride(0), dst.stride(1),
                         ADD=add, DST_BF16=dst.dtype == torch.bfloat16, BLOCK_M=block_m, BLOCK_N=block_n,
                         num_warps=warps)


def _launch_pairs(dst: torch.Tensor, src: torch.Tensor) -> None:
    block_k, block_j, warps = TILES["b16_pairs"]
    m, n = src.shape
    src_w, dst_w = src.view(torch.int32), dst.view(torch.int32)  # (M, N/2) and (N, M/2) words
    tiles_j = cdiv(n // 2, block_j)
    grid = (cdiv(m // 2, block_k) * tiles_j,)
    pairs_tile = kernel("instrumented_model.transpose_triton", "transpose_pairs_tile")
    pairs_tile[grid](src_w, dst_w, m // 2, n // 2, tiles_j, src_w.stride(0), dst_w.stride(0),
                     BLOCK_K=block_k, BLOCK_J=block_j, num_warps=warps)


@torch.no_grad()
def transpose_copy(dst: torch.Tensor, src: torch.Tensor, *, use_triton: bool | None = None) -> torch.Tensor:
    """dst[:] = src.T (dst: (N, M), src: (M, N)); returns dst."""
    _check(dst, src)
    # Named range: profilers (and `commscope layout`) see this layout change as deliberate.
    with torch.profiler.record_function("transpose_copy"):
        if _want_triton(src, use_triton):
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
