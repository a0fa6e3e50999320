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
- A finding needs two tensor arguments (the output is one: `add_`'s self, `copy_`'s destination, an `out=`)
  with broadcast-compatible shapes whose *stride order* differs: the order of their dimensions from
  largest to smallest stride, over the dimensions both really have (size > 1, stride ≠ 0; shapes aligned
  from the right as broadcasting does). Any difference counts, not only the innermost dimension:
  PyTorch takes the vectorized contiguous kernel only when every operand is laid out alike, and on an
  H200 a bf16 add whose operands differ only in the order of outer dimensions ran ~2.4× slower than its
  aligned twin (docs/layout.md, the case table).
- A broadcast read is a finding too (kind "broadcast"): a tensor argument that the op reads broadcast (a
  dimension of size 1, stride 0 or missing where another argument has size > 1; a 0-dim tensor, which
  Kineto's `Input type` tells from a Python number, spread over a larger one), when the op's kernel is
  PyTorch's generic CUDA `elementwise_kernel` rather than its vectorized one. Such a read rules out the
  vectorized path: on an H200 a bf16 add of a broadcast row, an expanded row or an expanded column ran
  ~1.9× slower than the same add of two contiguous tensors, though it moves fewer bytes, and an add of a
  0-dim device tensor 1.7× slower (the case table). The kernel name is the evidence, so CPU ops
  (vectorized broadcast loops) and ops without a linked kernel are never broadcast findings, nor are ops
  under BROADCAST_MIN_NUMEL elements (launch-bound). `kind` says
  which rule a finding met ("stride order" first when both do; "kernel evidence" for layout_kernels'
  low-confidence findings).
- Severity (`slowdown`, `severity`): achieved bandwidth against the reference of `peak_source`, in this
  order: the *aligned twin* (the same op on the same element count and dtypes, laid out alike, in the
  same trace), else the device's measured copy bandwidth (GPU ops), else the best aligned op of the same
  element count (`aligned peer`). `slowdown = reference GB/s ÷ achieved GB/s`; severe ≥ 2, moderate
  ≥ 1.3 (SLOWDOWN_FLAG), else minor.
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
from commscope.util.num import is_tensor_shape, largest_numel

FINDING_COLUMNS = [
    "rank", "op", "kernel", "dims", "strides", "dtypes", "numel", "bytes", "duration_us",
    "achieved_gbps", "peak_gbps", "pct_of_peak", "peak_source", "est_saving_us", "where",
    "confidence", "deliberate", "start_ns", "slowdown", "severity", "kind",
]
SLOWDOWN_FLAG = 1.3   # a case this much slower than its aligned twin must be flagged (docs/layout.md)
SLOWDOWN_SEVERE = 2.0
# A broadcast read counts from this many elements: a smaller elementwise kernel is bound by its launch, not
# by the path it takes through memory (an H200 moves 2**20 bf16 elements of an add in ~1.5 µs), and the
# model's many small broadcasts (a scale per row, a norm per matrix) would bury the findings that matter.
BROADCAST_MIN_NUMEL = 1 << 20


def severity(slowdown: float | None) -> str | None:
    if slowdown is None or not np.isfinite(slowdown):
        return None
    return "severe" if slowdown >= SLOWDOWN_SEVERE else "moderate" if slowdown >= SLOWDOWN_FLAG else "minor"

# Pointwise ops: each output element depends on the same-index input elements, so the cost is pure memory
# traffic and a layout mismatch shows up directly. Matmuls, reductions and view ops are excluded by name.
POINTWISE_OPS = re.compile(
    r"^aten::(copy_|_to_copy|clone|add_?|sub_?|mul_?|div_?|lerp_?|addcmul_?|addcdiv_?|where|maximum|minimum"
    r"|neg_?|abs_?|sqrt_?|rsqrt_?|exp_?|pow_?|sign_?|clamp_?|clamp_min_?|clamp_max_?|relu_?|sigmoid_?"
    r"|tanh_?|square_?|reciprocal_?|masked_fill_?|threshold_backward)$"
)

# Device copy bandwidth (read + write bytes per second): on one H200 an aligned fp32 add_ of (50304, 768)
# ran at 4.2 TB/s and an aligned copy at 4.07 TB/s (bench/bench_head_layout.py, 2026-12-03); the reference
# is a little above both, so a kernel at the measured best reads as at most ~98 % of it, never over.
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
    order = stride_order(dims, strides)
    return order[-1] if order else None


def stride_order(dims: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """The dimensions that are really there (size > 1, stride ≠ 0), from largest to smallest stride:
    (0, 1) for a contiguous matrix, (1, 0) for its transpose. Ties (overlapping views only) keep index
    order, the contiguous convention."""
    real = [i for i, (d, st) in enumerate(zip(dims, strides)) if d > 1 and st != 0]
    return tuple(sorted(real, key=lambda i: (-abs(strides[i]), i)))


def _aligned_right(d: tuple, s: tuple, n: int) -> tuple[tuple, tuple]:
    return (1,) * (n - len(d)) + d, (0,) * (n - len(s)) + s


def orders_differ(a: tuple[tuple, tuple], b: tuple[tuple, tuple]) -> bool:
    """Whether two (dims, strides) tensors that broadcast together lay out their common dimensions in a
    different order; False when their shapes do not broadcast (not operands of one elementwise op)."""
    n = max(len(a[0]), len(b[0]))
    (da, sa), (db, sb) = _aligned_right(*a, n), _aligned_right(*b, n)
    if any(x != y and x != 1 and y != 1 for x, y in zip(da, db)):
        return False
    oa, ob = stride_order(da, sa), stride_order(db, sb)
    common = set(oa) & set(ob)
    return [i for i in oa if i in common] != [i for i in ob if i in common]


def layout_mismatch(dims: Sequence[Sequence[int]], strides: Sequence[Sequence[int]]) -> bool:
    """True when two tensor arguments lay out the dimensions they share in a different stride order."""
    tensors = [(tuple(d), tuple(s)) for d, s in zip(dims or [], strides or [])
               if d and s and len(d) == len(s) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
    return any(orders_differ(tensors[i], tensors[j]) for i in range(len(tensors)) for j in range(i + 1, len(tensors)))


# PyTorch's generic (non-vectorized) CUDA elementwise kernels; `vectorized_elementwise_kernel` is the
# contiguous fast path and does not match.
GENERIC_KERNEL = re.compile(r"native::(unrolled_)?elementwise_kernel\b")


def _zero_dim_tensor(dims: Sequence[Sequence[int]], dtypes: Sequence[Any] | None) -> bool:
    """Whether an argument is a 0-dim tensor: no dimensions and a tensor dtype (Kineto's `Input type`
    names a Python number "Scalar", a 0-dim tensor by its dtype)."""
    return any(not d and i < len(dtypes) and isinstance(dtypes[i], str) and dtypes[i] != "Scalar"
               and not np.isnan(dtype_size(dtypes[i])) for i, d in enumerate(dims or [])) if dtypes else False


def broadcast_read(dims: Sequence[Sequence[int]], strides: Sequence[Sequence[int]],
                   dtypes: Sequence[Any] | None = None) -> bool:
    """True when a tensor argument is read broadcast: right-aligned against the arguments' common shape, it
    has size 1, stride 0 or no dimension where that shape has size > 1. A 0-dim tensor (known from
    `dtypes`) spread over a larger one counts; a Python number ("Scalar") does not."""
    tensors = [(tuple(d), tuple(s)) for d, s in zip(dims or [], strides or [])
               if d and s and len(d) == len(s) and all(isinstance(x, int) for x in d)]
    if tensors and _zero_dim_tensor(dims, dtypes) and max(math.prod(d) for d, _ in tensors) > 1:
        return True
    if len(tensors) < 2:
        return False
    n = max(len(d) for d, _ in tensors)
    aligned = [_aligned_right(d, s, n) for d, s in tensors]
    full = [max(d[i] for d, _ in aligned) for i in range(n)]
    if any(d[i] not in (1, full[i]) for d, _ in aligned for i in range(n)):
        return False  # shapes that do not broadcast: not operands of one elementwise op
    return any(full[i] > 1 and (d[i] == 1 or s[i] == 0) for d, s in aligned for i in range(n))


def mismatch_kind(dims: Sequence[Sequence[int]], strides: Sequence[Sequence[int]],
                  kernel: str | None = None, dtypes: Sequence[Any] | None = None) -> str | None:
    """Which layout rule an elementwise op meets (module docstring): "stride order", "broadcast" (only
    with a generic CUDA kernel named), or None. `dtypes` (the trace's `Input type`) tells a 0-dim tensor
    from a Python number."""
    if layout_mismatch(dims, strides):
        return "stride order"
    if kernel and GENERIC_KERNEL.search(kernel) and broadcast_read(dims, strides, dtypes):
        return "broadcast"
    return None


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


def bytes_moved(op: str, dims: Sequence[Sequence[int]], elem_sizes: Sequence[int],
                strides: Sequence[Sequence[int]] | None = None) -> int:
    """Bytes a pointwise op must read and write: the output (the largest argument's element count) written
    once and every tensor argument read once (`copy_` does not read its destination). An in-place op
    (`add_`, `copy_`) writes its first argument's dtype; an out-of-place one (`mul`, `add`) a new tensor of
    the promoted dtype, the widest of its tensor arguments (fp32 for a bf16 × fp32 product), whatever its
    first argument is (a 0-dim tensor or a Scalar moves nothing). With `strides`, an argument is read for
    its distinct elements (a stride-0 dimension holds one), so a broadcast row, an expanded row and an
    expanded column all count what memory holds; without, only the arguments of the output's element
    count are read, each whole."""
    ref = max((tuple(d) for d in dims if d), key=lambda d: math.prod(d))
    numel = math.prod(ref)
    read = 0
    for i, d in enumerate(dims):
        if not d:
            continue
        st = strides[i] if strides is not None and i < len(strides) else None
        if st is not None and len(st) == len(d):
            read += math.prod(x for x, s in zip(d, st) if s != 0) * elem_sizes[i]
        elif math.prod(d) == numel:
            read += numel * elem_sizes[i]
    if op == "aten::copy_":
        read -= numel * elem_sizes[0]
    in_place = op.endswith("_")
    out_size = elem_sizes[0] if in_place else max(s for d, s in zip(dims, elem_sizes) if d)
    return int(read + numel * out_size)


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
    # only tensors' shapes (lists of integers; a tensor list or a malformed entry is no tensor of the op)
    dims_col = [[d if is_tensor_shape(d) else [] for d in _as_list(x)] for x in sub["dims"].tolist()]
    strides_col = [[s if is_tensor_shape(s) else [] for s in _as_list(x)] for x in sub["strides"].tolist()]
    numel = [largest_numel(d) for d in dims_col]
    cols = {c: sub[c].tolist() if c in sub else [None] * len(sub)
            for c in ("rank", "name", "start_ns", "end_ns", "dtypes", "kernel_names", "kernel_dur_ns")}
    first_kernel = [next((x for x in _as_list(ks) if isinstance(x, str)), None) for ks in cols["kernel_names"]]
    kinds = [mismatch_kind(d, s, kn, _as_list(dt)) for d, s, kn, dt in zip(dims_col, strides_col, first_kernel,
                                                                          cols["dtypes"])]
    kinds = [None if k == "broadcast" and n < BROADCAST_MIN_NUMEL else k for k, n in zip(kinds, numel)]
    sizes_wanted = {n for n, m in zip(numel, kinds) if m and n >= min_numel}
    rows = []
    for k, idx in enumerate(sub.index):
        if numel[k] not in sizes_wanted:
            continue
        kernel = first_kernel[k]
        durs = [d for d in _as_list(cols["kernel_dur_ns"][k]) if d is not None and not pd.isna(d)]
        on_gpu = bool(durs)
        dur_ns = int(sum(durs)) if on_gpu else int(cols["end_ns"][k] - cols["start_ns"][k])
        dtypes = _as_list(cols["dtypes"][k])
        sizes = _elem_sizes(dtypes, kernel, dims_col[k])
        nbytes = bytes_moved(cols["name"][k], dims_col[k], sizes, strides_col[k]) if sizes else None
        rows.append({
            "_idx": idx, "rank": int(cols["rank"][k]), "op": cols["name"][k], "kernel": kernel,
            "dims": dims_col[k], "strides": strides_col[k], "dtypes": dtypes or None, "numel": numel[k],
            "bytes": nbytes, "duration_ns": dur_ns, "on_gpu": on_gpu,
            "achieved_gbps": nbytes / dur_ns if nbytes and dur_ns > 0 else None,  # bytes/ns == GB/s
            "mismatch": kinds[k] is not None, "kind": kinds[k], "start_ns": int(cols["start_ns"][k]),
        })
    return pd.DataFrame(rows)


def _peak_for(row: pd.Series, aligned: pd.DataFrame, device_peak: float | None) -> tuple[float | None, str]:
    """The reference bandwidth of a finding and its source (module docstring: twin, device, peer). A
    reference measured on the finding's own rank (its own GPU) is preferred to another rank's."""
    same = aligned[(aligned["numel"] == row["numel"]) & (aligned["on_gpu"] == row["on_gpu"])]
    twins = same[(same["op"] == row["op"]) & (same["dtypes"].map(str) == str(row["dtypes"]))]
    twin = _own_rank_first(twins, row["rank"])
    if len(twin):
        return float(twin.max()), "aligned twin"
    if device_peak is not None and row["on_gpu"]:
        return device_peak, "device"
    peer = _own_rank_first(same, row["rank"])
    if len(peer):
        return float(peer.max()), "aligned peer"
    return None, "none"


def _own_rank_first(candidates: pd.DataFrame, rank: int) -> pd.Series:
    """The candidates' achieved GB/s on `rank`, else on every rank where `rank` has none."""
    gbps = candidates["achieved_gbps"].dropna()
    own = gbps[candidates.loc[gbps.index, "rank"] == rank]
    return own if len(own) else gbps


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

    `peak_gbps` overrides the reference; otherwise the aligned twin, the device's measured copy bandwidth
    (GPU ops only), the best aligned op with the same element count (module docstring)."""
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
        peak, source = (peak_gbps, "given") if peak_gbps is not None else _peak_for(f, aligned, device_peak)
        slow = peak / f["achieved_gbps"] if (peak and f["achieved_gbps"]) else None
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
            "slowdown": slow, "severity": severity(slow), "kind": f["kind"],
        })
    res = pd.DataFrame(out, columns=FINDING_COLUMNS)
    return res.sort_values(["duration_us", "rank", "start_ns"], ascending=[False, True, True],
                           ignore_index=True)
