"""SM contention: collectives slowed down by a compute kernel that fills every SM on another stream.

Why: NCCL kernels need SMs to make progress. A compute kernel whose grid has more blocks than the device
can hold at once (blocks > SMs × resident blocks per SM) keeps every SM busy until its tail; a collective
launched meanwhile on the communication stream waits for SMs and its kernel stretches. PyTorch's generic
transpose kernels (grid 150912 for a (50304, 768) fp32 add) are the seed record's example.

Method, per rank: a collective (GPU-timed, from the `collectives` frame) is *contended* when a
co-schedule-overflowing compute kernel from the `kernels` frame overlaps it on a different stream. Its
baseline is the median duration of the same collective (same op, label and bytes) on the same rank when it
overlapped no such kernel ("ran alone", other steps); all ranks' alone runs are the fallback. Inflation =
duration / baseline. An NCCL kernel's duration also includes waiting for its peers, so only the part
of the extra time that the overlap can explain is attributed (`attributable_us = min(extra, overlap)`),
and a collective is reported only when the overlap covers at least `min_overlap_frac` of it, its
inflation is at least `min_inflation`, and it has a baseline.

Invariants: resident blocks per SM are bounded by threads only (registers and shared memory are not in
the frames), so the capacity is an upper bound and a kernel flagged as overflowing really does overflow.
CPU traces (no GPU timing, no kernels) give an empty frame.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

CONTENTION_COLUMNS = [
    "rank", "step", "label", "op", "bytes", "stream", "start_ns", "duration_us", "alone_us", "inflation",
    "extra_us", "overlap_us", "overlap_frac", "attributable_us", "kernel", "kernel_stream", "kernel_blocks", "capacity_blocks",
]


@dataclass(frozen=True)
class DeviceLimits:
    num_sms: int
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32   # sm_80 … sm_90

    def capacity(self, threads_per_block: int) -> int:
        """Blocks of this size the whole device can run at once (thread-limited upper bound)."""
        per_sm = min(self.max_blocks_per_sm, self.max_threads_per_sm // max(1, threads_per_block))
        return self.num_sms * max(1, per_sm)


def device_limits(config: dict | None) -> DeviceLimits | None:
    """From Kineto `deviceProperties` (in `Trace.config`); None when the trace names no GPU."""
    props = (config or {}).get("deviceProperties") or []
    if isinstance(props, dict):
        props = [props]
    for p in props:
        if p.get("numSms"):
            return DeviceLimits(int(p["numSms"]), int(p.get("maxThreadsPerMultiprocessor") or 2048))
    return None


def _dims(v) -> int | None:
    if isinstance(v, (list, tuple, np.ndarray)) and len(v):
        return int(math.prod(int(x) for x in v))
    return None


def sm_filling_kernels(kernels: pd.DataFrame, limits: DeviceLimits) -> pd.DataFrame:
    """Compute kernels whose grid exceeds what the device can co-schedule, with blocks and capacity."""
    k = kernels[~kernels["is_comm"].astype(bool)].copy()
    k["blocks"] = k["grid"].map(_dims)
    k["threads"] = k["block"].map(_dims)
    k = k.dropna(subset=["blocks", "threads"])
    k["capacity"] = k["threads"].map(lambda t: limits.capacity(int(t)))
    return k[k["blocks"] > k["capacity"]]


def _overlaps(c: pd.Series, big: pd.DataFrame) -> tuple[int, pd.Series | None]:
    b = big[(big["start_ns"] < c["end_ns"]) & (big["end_ns"] > c["start_ns"]) & (big["stream"] != c["stream"])]
    if b.empty:
        return 0, None
    ov = np.minimum(b["end_ns"], c["end_ns"]) - np.maximum(b["start_ns"], c["start_ns"])
    # Union of intervals would be exact; kernels on one compute stream do not overlap each other, and
    # summing across several compute streams can only overstate by their mutual overlap, so cap it.
    total = int(min(ov.sum(), c["end_ns"] - c["start_ns"]))
    return total, b.loc[ov.idxmax()]


def find_sm_contention(collectives: pd.DataFrame, kernels: pd.DataFrame, limits: DeviceLimits | None, *,
                       min_inflation: float = 1.2, min_overlap_frac: float = 0.25) -> pd.DataFrame:
    """Contended collectives with their partner kernel, overlap and inflation, most attributable first."""
    empty = pd.DataFrame(columns=CONTENTION_COLUMNS)
    if limits is None or collectives is None or kernels is None or collectives.empty or kernels.empty:
        return empty
    comm = collectives.dropna(subset=["start_ns", "end_ns"]).copy()
    if comm.empty:
        return empty
    big = sm_filling_kernels(kernels, limits)
    comm["dur_ns"] = comm["end_ns"] - comm["start_ns"]
    comm["key"] = list(zip(comm["op"], comm["label"], comm["bytes"].fillna(-1)))
    partners, overlap = [], []
    for _, c in comm.iterrows():
        ov, p = _overlaps(c, big[big["rank"] == c["rank"]])
        overlap.append(ov)
        partners.append(p)
    comm["overlap_ns"] = overlap
    alone = comm[comm["overlap_ns"] == 0]
    by_rank = alone.groupby(["rank", "key"])["dur_ns"].median()
    by_key = alone.groupby("key")["dur_ns"].median()
    out = []
    for (i, c), p in zip(comm.iterrows(), partners):
        if c["overlap_ns"] == 0:
            continue
        base = by_rank.get((c["rank"], c["key"]), by_key.get(c["key"]))
        if base is None or pd.isna(base) or base <= 0:
            continue
        infl = c["dur_ns"] / base
        frac = c["overlap_ns"] / c["dur_ns"] if c["dur_ns"] > 0 else 0.0
        if infl < min_inflation or frac < min_overlap_frac:
            continue
        extra = c["dur_ns"] - base
        out.append({
            "rank": int(c["rank"]), "step": c.get("step"), "label": c["label"], "op": c["op"],
            "bytes": c["bytes"], "stream": c["stream"], "start_ns": int(c["start_ns"]),
            "duration_us": c["dur_ns"] / 1e3, "alone_us": base / 1e3, "inflation": infl,
            "extra_us": extra / 1e3, "overlap_us": c["overlap_ns"] / 1e3, "overlap_frac": frac,
            "attributable_us": min(extra, c["overlap_ns"]) / 1e3,
            "kernel": p["name"], "kernel_stream": p["stream"], "kernel_blocks": int(p["blocks"]),
            "capacity_blocks": int(p["capacity"]),
        })
    res = pd.DataFrame(out, columns=CONTENTION_COLUMNS)
    return res.sort_values(["attributable_us", "rank"], ascending=[False, True], ignore_index=True)
