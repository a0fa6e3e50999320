"""Which recorded regions a run's compute figures leave out, and could be meant as compute.

A run directory's compute set (hidden %, communication overlap, per-step compute) is made of its
compute regions: `forward`, `backward`, `update:*`, `compute:*`, or any region recorded with
`rec.region(name, compute=True)` (commscope.load.rundir.compute_mask). Other regions are containers —
`optimizer`, `opt.phase1` — that hold communication launches and waits, and are rightly not compute.
`uncounted_leaf_regions(trace)` finds the regions that are neither: not counted, yet enclosing no other
region and no collective launch or wait of their rank. Such a region is host work the figures treat as
idle time (a user's `rec.region("compute_overlap")`, or an `optimizer` region around `opt.step()` only),
which the report names so the user can rename it or pass `compute=True`.

Invariants: a pure function of the trace's frames; empty for traces that are not run directories (their
compute comes from kernels and ops, not regions).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.load.frames import Trace
from commscope.load.rundir import compute_mask


def _within(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per span [start, end]: how many of the sorted `points` lie inside it."""
    return np.searchsorted(points, ends, side="right") - np.searchsorted(points, starts, side="left")


def uncounted_leaf_regions(trace: Trace) -> pd.DataFrame:
    """name, count (over ranks and steps) of the regions not counted as compute that enclose no other
    region and no collective launch or wait of their rank (the ones left in flight included); most frequent
    first."""
    empty = pd.DataFrame({"name": pd.Series(dtype=object), "count": pd.Series(dtype=np.int64)})
    reg = trace.regions
    if trace.source != "run" or not len(reg):
        return empty
    reg = reg[reg["end_ns"].notna()]
    counted = compute_mask(reg)
    # the collectives, and those a hang or crash left in flight (watchdog.json, inflight.json: launched in
    # the last step, never seen to complete, so not among the collectives): a region launching one holds comm
    frames = [trace.collectives] + ([trace.faults.inflight] if trace.faults is not None else [])
    frames = [f for f in frames if len(f)]
    # Regions and communication points sorted by rank once, each rank then a slice of both: no per-rank
    # scan of the whole frames (1024 ranks × 2 M records would be billions of comparisons).
    order = np.argsort(reg["rank"].to_numpy(np.int64), kind="stable")
    r_rank = reg["rank"].to_numpy(np.int64)[order]
    starts, ends = reg["start_ns"].to_numpy(np.int64)[order], reg["end_ns"].to_numpy(np.int64)[order]
    mine_all, name_all = ~counted[order], reg["name"].to_numpy(dtype=object)[order]
    # a launch and a wait both hold comm
    c_rank = np.concatenate([f["rank"].to_numpy(np.int64) for f in frames for _ in (0, 1)] or [np.zeros(0, np.int64)])
    c_t = np.concatenate([pd.to_numeric(f[col], errors="coerce").to_numpy(np.float64, na_value=np.nan)
                          for f in frames for col in ("call_ns", "wait_ns")] or [np.zeros(0)])
    known = ~np.isnan(c_t)
    c_order = np.lexsort((c_t[known], c_rank[known]))
    c_rank, c_t = c_rank[known][c_order], c_t[known][c_order].astype(np.int64)
    names: list[str] = []
    for rank in np.unique(r_rank):
        a, b = np.searchsorted(r_rank, [rank, rank + 1])
        mine = mine_all[a:b]
        if not mine.any():
            continue
        st, en = starts[a:b], ends[a:b]
        ca, cb = np.searchsorted(c_rank, [rank, rank + 1])
        s, e = st[mine], en[mine]
        inner = _within(np.sort(st), s, e) - 1  # itself is among the starts it encloses
        leaf = (inner == 0) & (_within(c_t[ca:cb], s, e) == 0)
        names += name_all[a:b][mine][leaf].tolist()
    if not names:
        return empty
    counts = pd.Series(names, dtype=object).value_counts()
    return pd.DataFrame({"name": counts.index.astype(object), "count": counts.to_numpy(np.int64)})
