"""Layout-mismatch findings: elementwise/copy ops whose tensors are laid out in different orders.

Why: an elementwise kernel cannot hide a layout mismatch. When the destination is contiguous and a source
is a transposed view, PyTorch falls back to the generic, non-vectorized `elementwise_kernel<…>` that walks
one side strided; in the seed record the lm_head gradient accumulation ran ~4× slower than an
equal-sized aligned kernel. This module finds such ops in the loaded `ops` frame (cpu ops with
`Input Dims`/`Input Strides` and their linked kernels), prices them (bytes moved, achieved GB/s, estimated
saving if aligned) and attributes them, phase first, to where they ran. Without shapes it falls back to
kernel evidence (`commscope.analyze.layout_kernels`), marked low-confidence.

Invariants
- Pure functions over the frames of docs/frames.md; nothing here reads files.
- A finding needs two tensor arguments with the same shape whose *fastest-varying* dimension differs
  (dims of size 1 and broadcast dims with stride 0 are ignored): that is what breaks coalescing and
  vectorization. Outer-order permutations keep a contiguous inner run and are not reported.
- Times: `duration_us` is the sum of the op's linked kernels on a GPU trace, the cpu op's own duration on a
  CPU trace. `est_saving_us = max(0, duration − bytes / peak)`; no peak → no saving, never a guess.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from commscope.analyze.layout_attrib import attribute
from commscope.load.frames import dtype_size
from commscope.util.num import largest_numel

FINDING_COLUMNS = [
    "rank", "op", "kernel", "dims", "strides", "dtypes", "numel", "bytes", "duration_us",
    "achieved_gbps", "peak_gbps", "pct_of_peak", "peak_source", "est_saving_us", "where",
    "confidence", "deliberate", "start_ns",
]

# Pointwise ops: each output element depends on the same-index input elements, so the cost is pure memory
# traffic and a layout mismatch shows up directly. Matmuls, reductions and view ops are excluded by name.
POINTWISE_OPS = re.compile(
    r"^aten::(copy_|_to_copy|clone|add_?|sub_?|mul_?|div_?|lerp_?|addcmul_?|addcdiv_?|where|maximum|minimum"
    r"|neg_?|abs_?|sqrt_?|rsqrt_?|exp_?|pow_?|sign_?|clamp_?|clamp_min_?|clamp_max_?|relu_?|sigmoid_?"
    r"|tanh_?|square_?|reciprocal_?|masked_fill_?|threshold_backward)$"
)

# Measured device copy bandwidth (read + write bytes per second), REFERENCE §5: an aligned fp32 add_ of
# (50304, 768) on one H200 ran at 4.2 TB/s, an aligned copy at 4.07 TB/s.
KNOWN_COPY_GBPS = {"H200": 4300.0}

# Kernel names spell the element type in the functor's template argument.
_KERNEL_DTYPE = [("c10::BFloat16", 2), ("c10::Half", 2), ("c10::Float8", 1), ("double", 8), ("float", 4)]


def kernel_elem_size(kernel: str) -> int | None:
    """Element size from a kernel name's template argument (e.g. `CUDAFunctor_add<c10::BFloat16>`), or None."""
    return next((size for token, size in _KERNEL_DTYPE if token in kernel), None)


def _dtype_bytes(name: Any) -> int | None:
    size = dtype_size(name)
    return None if np.isnan(size) else int(size)


def known_copy_gbps(device_name: str | None) -> float | None:
    """Measured copy bandwidth of a device by name, None when this project has not measured it."""
    if not device_name:
        return None
    for key, gbps in KNOWN_COPY_GBPS.items():
        if key.lower() in device_name.lower():
            return gbps
    return None


def fastest_dim(dims: Sequence[int], strides: Sequence[int]) -> int | None:
    """Index of the dimension that varies fastest in memory (smallest nonzero stride, size > 1).

    None for scalars, fully broadcast or single-element tensors, which cannot mismatch anything.
    Ties (possible only for overlapping views) go to the last index, the contiguous convention."""
    best, best_stride = None, None
    for i, (d, s) in enumerate(zip(dims, strides)):
        if d <= 1 or s == 0:
            continue
        if best_stride is None or abs(s) <= best_stride:
            best, best_stride = i, abs(s)
    return best


def layout_mismatch(dims: Sequence[Sequence[int]], strides: Sequence[Sequence[int]]) -> bool:
    """True when two same-shaped tensor arguments have different fastest-varying dimensions."""
    tensors = [(tuple(d), tuple(s)) for d, s in zip(dims or [], strides or [])
               if d and s and len(d) == len(s) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
    by_shape: dict[tuple, set] = {}
    for d, s in tensors:
        f = fastest_dim(d, s)
        if f is not None:
            by_shape.setdefault(d, set()).add(f)
    return any(len(f) > 1 for f in by_shape.values())


def _elem_sizes(dtypes: Any, kernel: str | None, dims: Sequence[Sequence[int]]) -> list[int] | None:
    """Element size of each argument (0 for non-tensor arguments such as `Scalar`): from the recorded
    dtypes, else the kernel's template argument; None when neither says."""
    tensor = [bool(d) for d in dims]
    if isinstance(dtypes, (list, tuple)) and len(dtypes) >= len(dims):
        sizes = [_dtype_bytes(t) if is_t else 0 for t, is_t in zip(dtypes, tensor)]
        if all(s is not None for s in sizes):
            return sizes
    size = kernel_elem_size(kernel) if kernel else None
    return None if size is None else [size if is_t else 0 for is_t in tensor]


def bytes_moved(op: str, dims: Sequence[Sequence[int]], elem_sizes: Sequence[int]) -> int:
    """Bytes a pointwise op must read and write: every same-shaped tensor argument read once, the output
    written once; `copy_` does not read its destination."""
    ref = max((tuple(d) for d in dims if d), key=lambda d: math.prod(d))
    numel = math.prod(ref)
    args = [(i, tuple(d)) for i, d in enumerate(dims) if d]
    read = sum(numel * elem_sizes[i] for i, d in args if math.prod(d) == numel)
    if op == "aten::copy_":
        read -= numel * elem_sizes[0]
    write = numel * elem_sizes[0]
    return int(read + write)


def _as_list(v: Any) -> list:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def _priced(ops: pd.DataFrame, min_numel: int) -> pd.DataFrame:
    """Pointwise ops with shapes, each with numel, bytes, duration and achieved GB/s: the mismatched ones
    of at least `min_numel` elements, and the aligned ones of the same sizes (their peers)."""
    names = ops["name"].tolist()
    keep = [i for i, n in enumerate(names) if isinstance(n, str) and POINTWISE_OPS.match(n)]
    sub = ops.iloc[keep]
    dims_col = [[d if isinstance(d, list) else [] for d in _as_list(x)] for x in sub["dims"].tolist()]
    strides_col = [[s if isinstance(s, list) else [] for s in _as_list(x)] for x in sub["strides"].tolist()]
    numel = [largest_numel(d) for d in dims_col]
    mism = [layout_mismatch(d, s) for d, s in zip(dims_col, strides_col)]
    sizes_wanted = {n for n, m in zip(numel, mism) if m and n >= min_numel}
    cols = {c: sub[c].tolist() if c in sub else [None] * len(sub)
            for c in ("rank", "name", "start_ns", "end_ns", "dtypes", "kernel_names", "kernel_dur_ns")}
    rows = []
    for k, idx in enumerate(sub.index):
        if numel[k] not in sizes_wanted:
            continue
        kernels = [x for x in _as_list(cols["kernel_names"][k]) if isinstance(x, str)]
        kernel = kernels[0] if kernels else None
        durs = [d for d in _as_list(cols["kernel_dur_ns"][k]) if d is not None and not pd.isna(d)]
        on_gpu = bool(durs)
        dur_ns = int(sum(durs)) if on_gpu else int(cols["end_ns"][k] - cols["start_ns"][k])
        dtypes = _as_list(cols["dtypes"][k])
        sizes = _elem_sizes(dtypes, kernel, dims_col[k])
        nbytes = bytes_moved(cols["name"][k], dims_col[k], sizes) if sizes else None
        rows.append({
            "_idx": idx, "rank": int(cols["rank"][k]), "op": cols["name"][k], "kernel": kernel,
            "dims": dims_col[k], "strides": strides_col[k], "dtypes": dtypes or None, "numel": numel[k],
            "bytes": nbytes, "duration_ns": dur_ns, "on_gpu": on_gpu,
            "achieved_gbps": nbytes / dur_ns if nbytes and dur_ns > 0 else None,  # bytes/ns == GB/s
            "mismatch": mism[k], "start_ns": int(cols["start_ns"][k]),
        })
    return pd.DataFrame(rows)


def _peak_for(row: pd.Series, aligned: pd.DataFrame, device_peak: float | None) -> tuple[float | None, str]:
    if device_peak is not None and row["on_gpu"]:
        return device_peak, "device"
    same = aligned[(aligned["numel"] == row["numel"]) & (aligned["on_gpu"] == row["on_gpu"])]
    same = same["achieved_gbps"].dropna()
    if len(same):
        return float(same.max()), "aligned peer"
    return None, "none"


def find_layout_mismatches(
    ops: pd.DataFrame,
    regions: pd.DataFrame | None = None,
    hooks: pd.DataFrame | None = None,
    *,
    device_name: str | None = None,
    peak_gbps: float | None = None,
    param_shapes: dict[str, Iterable[int]] | None = None,
    min_numel: int = 4096,
    step_regions: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Stride-evidence findings (confidence "high"), one row per mismatched op execution, costliest first.

    `peak_gbps` overrides the peak; otherwise the device's measured copy bandwidth (GPU ops only), else
    the best aligned op with the same element count in the same trace."""
    if ops is None or ops.empty:
        return pd.DataFrame(columns=FINDING_COLUMNS)
    priced = _priced(ops, min_numel)
    if priced.empty:
        return pd.DataFrame(columns=FINDING_COLUMNS)
    device_peak = peak_gbps if peak_gbps is not None else known_copy_gbps(device_name)
    aligned = priced[~priced["mismatch"]]
    bad = priced[priced["mismatch"] & (priced["numel"] >= min_numel)]
    out = []
    for _, f in bad.iterrows():
        peak, source = _peak_for(f, aligned, device_peak)
        if peak_gbps is not None:
            source = "given"
        ideal_ns = f["bytes"] / peak if (peak and f["bytes"]) else None
        where, deliberate = attribute(ops.loc[f["_idx"]], ops, regions, hooks, param_shapes, step_regions)
        out.append({
            "rank": f["rank"], "op": f["op"], "kernel": f["kernel"], "dims": f["dims"],
            "strides": f["strides"], "dtypes": f["dtypes"], "numel": f["numel"], "bytes": f["bytes"],
            "duration_us": f["duration_ns"] / 1e3, "achieved_gbps": f["achieved_gbps"],
            "peak_gbps": peak, "pct_of_peak": (100 * f["achieved_gbps"] / peak)
            if (peak and f["achieved_gbps"] is not None) else None,
            "peak_source": source,
            "est_saving_us": max(0.0, (f["duration_ns"] - ideal_ns) / 1e3) if ideal_ns is not None else None,
            "where": where, "confidence": "high", "deliberate": deliberate, "start_ns": f["start_ns"],
        })
    res = pd.DataFrame(out, columns=FINDING_COLUMNS)
    return res.sort_values(["duration_us", "rank", "start_ns"], ascending=[False, True, True],
                           ignore_index=True)
