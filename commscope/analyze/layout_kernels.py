"""Low-confidence layout findings from kernel names alone, for traces recorded without shapes.

PyTorch runs a pointwise op as `vectorized_elementwise_kernel<vec, Functor, …>` when every operand is
contiguous and aligned, and as the generic `elementwise_kernel<threads, items, …Functor…>` otherwise (a
strided or transposed operand, a dtype cast, a broadcast). So a large generic kernel is evidence of a
layout problem when (a) the same functor on the same element count ran vectorized, and faster, elsewhere
in the trace, or (b) its achieved bandwidth is far below the device's copy bandwidth. Neither proves a
transpose (a cast also takes the generic path), hence confidence "low".

Invariants: the element count of a generic kernel is grid.x × threads × items (exact up to one block); a
vectorized kernel's items per thread depend on the PyTorch version, so a peer is accepted only when some
items-per-thread in {2, 4, 8, 16} gives the same count to within one block. Kernels launched by an op that
had shapes recorded are left to the stride-evidence path and skipped here. A finding's place is unknown:
`NO_SHAPES` when the trace recorded no shapes at all, `UNLINKED` when it did but no op with shapes carries the
kernel's External id (its launch was outside the profiled cpu ops, or the trace's ids do not link them).
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from commscope.analyze.layout import FINDING_COLUMNS, kernel_elem_size, known_copy_gbps, severity

_GENERIC = re.compile(r"\bat::native::elementwise_kernel<(\d+), (\d+), (.*)")
_VECTOR = re.compile(r"\bat::native::vectorized_elementwise_kernel<(\d+), (.*)")
_ARITY = re.compile(r"std::array<char\*, (\d+)ul?>")

RATIO_MIN = 1.5   # generic kernel at least this much slower than its vectorized peer
BANDWIDTH_FRACTION = 0.5   # or below this fraction of the device's copy bandwidth
NO_SHAPES = "unknown (no shapes recorded)"
UNLINKED = "unknown (kernel not linked to a cpu op with shapes)"


def functor_key(text: str) -> str:
    """The pointwise functor a kernel applies, e.g. `CUDAFunctor_add<c10::BFloat16>`, `direct_copy_kernel_cuda`."""
    text = re.sub(r"^(at::native::)?gpu_kernel_impl(_nocast)?<", "", text)
    text = re.sub(r"^at::native::(\(anonymous namespace\)::)?", "", text)
    m = re.match(r"[A-Za-z_][\w:]*(<[^()]*?>)?", text)
    return m.group(0) if m else text[:40]


def _parse(kernels: pd.DataFrame) -> pd.DataFrame:
    names = kernels["name"].astype(str)
    k = kernels[names.str.contains("elementwise_kernel<", regex=False)]
    rows = []
    for idx, name, grid, block, rank, ext, start, end in zip(
            k.index, k["name"], k["grid"], k["block"], k["rank"], k["external_id"], k["start_ns"], k["end_ns"]):
        if not isinstance(grid, (list, tuple, np.ndarray)) or not isinstance(block, (list, tuple, np.ndarray)):
            continue
        g, b = _GENERIC.search(name), _VECTOR.search(name)
        blocks, threads = math.prod(grid), math.prod(block)
        if g:
            rest, kind = g.group(3), "generic"
            numel = blocks * int(g.group(1)) * int(g.group(2))
        elif b:
            rest, kind, numel = b.group(2), "vectorized", None
        else:
            continue
        arity = _ARITY.search(name)
        rows.append({"_idx": idx, "rank": rank, "name": name, "kind": kind, "key": functor_key(rest),
                     "elem": kernel_elem_size(name), "numel": numel, "blocks": blocks, "threads": threads,
                     "arity": int(arity.group(1)) if arity else None, "external_id": ext,
                     "dur_ns": int(end - start), "start_ns": int(start)})
    return pd.DataFrame(rows)


def _covers(peers: pd.DataFrame, numel: int) -> np.ndarray:
    """Which vectorized peers' grids cover `numel` elements at 2, 4, 8 or 16 elements per thread."""
    blocks = peers["blocks"].to_numpy(np.float64)[:, None]
    threads = peers["threads"].to_numpy(np.float64)[:, None]
    per_thread = np.array([2, 4, 8, 16], dtype=np.float64)[None, :]
    return (np.abs(blocks * threads * per_thread - numel) < threads * per_thread).any(axis=1)


def kernel_layout_evidence(kernels: pd.DataFrame, ops: pd.DataFrame | None = None, *,
                           device_name: str | None = None, peak_gbps: float | None = None,
                           min_numel: int = 1 << 20) -> pd.DataFrame:
    """Findings (confidence "low") for large generic elementwise kernels not explained by recorded shapes."""
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=FINDING_COLUMNS)
    parsed = _parse(kernels)
    if parsed.empty:
        return pd.DataFrame(columns=FINDING_COLUMNS)
    explained = set()
    if ops is not None and not ops.empty:
        gen = parsed[parsed["kind"] == "generic"]
        cand = ops[ops["external_id"].isin(set(gen["external_id"]))]
        # a boolean mask even when no op qualifies (an empty object Series would select columns)
        has_shape = cand["dims"].map(lambda d: isinstance(d, list) and any(isinstance(x, list) and x for x in d))
        shaped = cand[has_shape.to_numpy(dtype=bool)]
        explained = set(zip(shaped["rank"], shaped["external_id"]))
    device_peak = peak_gbps if peak_gbps is not None else known_copy_gbps(device_name)
    vec = parsed[parsed["kind"] == "vectorized"]
    out = []
    for _, k in parsed[(parsed["kind"] == "generic")].iterrows():
        # a kernel the trace gives no duration (dur 0) is neither slow nor a yardstick
        if k["numel"] < min_numel or (k["rank"], k["external_id"]) in explained or not k["dur_ns"] > 0:
            continue
        peers = vec[(vec["key"] == k["key"]) & (vec["elem"] == k["elem"]) & (vec["dur_ns"] > 0)]
        peers = peers[_covers(peers, k["numel"])] if len(peers) else peers
        own = peers[peers["rank"] == k["rank"]]  # its own GPU's vectorized kernel, where it ran one
        peers = own if len(own) else peers
        if pd.notna(k["arity"]):
            arity = int(k["arity"])
        elif len(peers) and peers["arity"].notna().any():
            arity = int(peers["arity"].dropna().iloc[0])
        else:
            arity = 2 if "copy" in k["key"] else 3   # copy: read + write; binary op: two reads + write
        nbytes = int(k["numel"] * k["elem"] * arity) if pd.notna(k["elem"]) else None
        gbps = nbytes / k["dur_ns"] if nbytes and k["dur_ns"] > 0 else None
        ratio = k["dur_ns"] / peers["dur_ns"].median() if len(peers) else None
        peer_gbps = (nbytes / peers["dur_ns"].min()) if (len(peers) and nbytes) else None
        peak, source = ((device_peak, "given" if peak_gbps is not None else "device") if device_peak
                        else (peer_gbps, "aligned peer") if peer_gbps else (None, "none"))
        if ratio is not None:
            source += f"; {ratio:.1f}× its vectorized peer"
        slow_vs_peer = ratio is not None and ratio >= RATIO_MIN
        slow_vs_peak = peak is not None and gbps is not None and gbps < BANDWIDTH_FRACTION * peak
        if not (slow_vs_peer or slow_vs_peak):
            continue
        ideal = nbytes / peak if (peak and nbytes) else None
        # against its vectorized twin where there is one, else the reference bandwidth
        slowdown = ratio if ratio is not None else (peak / gbps if (peak and gbps) else None)
        out.append({
            "rank": int(k["rank"]), "op": k["key"], "kernel": k["name"], "dims": [[int(k["numel"])]],
            "strides": None, "dtypes": None, "numel": int(k["numel"]), "bytes": nbytes,
            "duration_us": k["dur_ns"] / 1e3, "achieved_gbps": gbps, "peak_gbps": peak,
            "pct_of_peak": 100 * gbps / peak if (peak and gbps) else None, "peak_source": source,
            "est_saving_us": max(0.0, (k["dur_ns"] - ideal) / 1e3) if ideal is not None else None,
            "where": NO_SHAPES if ops is None or ops.empty else UNLINKED,
            "confidence": "low", "deliberate": False, "start_ns": int(k["start_ns"]), "kind": "kernel evidence",
            "slowdown": slowdown, "severity": severity(slowdown),
        })
    res = pd.DataFrame(out, columns=FINDING_COLUMNS)
    return res.sort_values(["duration_us", "rank"], ascending=[False, True], ignore_index=True)
