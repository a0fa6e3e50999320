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
and a collective is reported only when it has a baseline, took longer than *every* alone run of it, the
overlap covers at least `min_overlap_frac` of it, its inflation is at least `min_inflation` and at least
`min_attributable_us` of it is attributable (below ~20 µs a small collective's own jitter dominates).

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


def _overlaps(start: int, end: int, stream, big: dict) -> tuple[int, int | None]:
    """(overlap ns, row position in `big` of the largest overlapper) with kernels on other streams."""
    s, e, st = big["start"], big["end"], big["stream"]
    # Kernels are sorted by start: only those starting before `end` can overlap.
    hi = int(np.searchsorted(s, end, side="left"))
    if hi == 0:
        return 0, None
    ov = np.minimum(e[:hi], end) - np.maximum(s[:hi], start)
    ok = (ov > 0) & (st[:hi] != stream)
    if not ok.any():
        return 0, None
    ov = np.where(ok, ov, 0)
    # Kernels of one compute stream do not overlap each other; summing across several compute streams
    # can only overstate by their mutual overlap, so cap at the collective's duration.
    return int(min(ov.sum(), end - start)), int(ov.argmax())


def find_sm_contention(collectives: pd.DataFrame, kernels: pd.DataFrame, limits: DeviceLimits | None, *,
                       min_inflation: float = 1.2, min_overlap_frac: float = 0.25,
                       min_attributable_us: float = 20.0) -> pd.DataFrame:
    """Contended collectives with their partner kernel, overlap and inflation, most attributable first."""
    empty = pd.DataFrame(columns=CONTENTION_COLUMNS)
    if limits is None or collectives is None or kernels is None or collectives.empty or kernels.empty:
        return empty
    comm = collectives.dropna(subset=["start_ns", "end_ns"]).copy()
    if comm.empty:
        return empty
    big = sm_filling_kernels(kernels, limits)
    comm["dur_ns"] = comm["end_ns"] - comm["start_ns"]
    # One string per collective identity: tuples inside a pandas index are taken for multi-keys.
    comm["key"] = [f"{o}|{lab}|{b}" for o, lab, b in zip(comm["op"], comm["label"], comm["bytes"].fillna(-1))]
    by_rank_big = {}
    for rank, g in big.sort_values("start_ns").groupby("rank"):
        by_rank_big[rank] = {"start": g["start_ns"].to_numpy(np.int64), "end": g["end_ns"].to_numpy(np.int64),
                             "stream": g["stream"].to_numpy(), "rows": g}
    partners, overlap = [], []
    for rank, start, end, stream in zip(comm["rank"], comm["start_ns"], comm["end_ns"], comm["stream"]):
        b = by_rank_big.get(rank)
        ov, pos = _overlaps(int(start), int(end), stream, b) if b is not None else (0, None)
        overlap.append(ov)
        partners.append(b["rows"].iloc[pos] if pos is not None else None)
    comm["overlap_ns"] = overlap
    alone = comm[comm["overlap_ns"] == 0]
    stats = lambda g: {k: (float(v.median()), float(v.max())) for k, v in g["dur_ns"]}  # noqa: E731
    by_rank = stats(alone.groupby(["rank", "key"]))
    by_key = stats(alone.groupby("key"))
    out = []
    for (i, c), p in zip(comm.iterrows(), partners):
        if c["overlap_ns"] == 0:
            continue
        found = by_rank.get((c["rank"], c["key"])) or by_key.get(c["key"])
        if found is None:
            continue
        base, worst_alone = found
        if pd.isna(base) or base <= 0 or c["dur_ns"] <= worst_alone:
            continue  # within what this collective took alone: not evidence of contention
        infl = c["dur_ns"] / base
        frac = c["overlap_ns"] / c["dur_ns"] if c["dur_ns"] > 0 else 0.0
        extra = c["dur_ns"] - base
        if infl < min_inflation or frac < min_overlap_frac or min(extra, c["overlap_ns"]) < min_attributable_us * 1e3:
            continue
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
