"""SM contention: collectives slowed down by a compute kernel that fills every SM on another stream.

Why: NCCL kernels need SMs to make progress. A compute kernel whose grid has more blocks than the device
can hold at once (blocks > SMs × resident blocks per SM) keeps every SM busy until its tail; a collective
launched meanwhile on the communication stream waits for SMs and its kernel stretches. PyTorch's generic
transpose kernels (grid 150912 for a (50304, 768) fp32 add) are the seed record's example.

Method, per rank: a collective (GPU-timed, from the `collectives` frame) is *contended* when a
co-schedule-overflowing compute kernel from the `kernels` frame overlaps it on a different stream. An
NCCL kernel's duration also includes waiting for its peers to arrive, so its extra time is charged to the
overlapping kernel only where the evidence separates the two (`separable`, `evidence` says which):
- `same rank alone`: the same collective (op, label, known bytes) ran on this rank with no such kernel
  overlapping it (other steps): baseline = the median of those runs;
- `arrivals known`: every rank of its process group is in the trace with a measured start for this
  (group, seq) (the instance analyze.waiting matches), so the wait for the last peer (`peer_wait_us` =
  last arrival − own arrival) is removed from the duration; baseline = the alone runs of any rank, with
  their peer wait removed likewise.
Peer wait is removed from every duration whose arrivals are known, on both sides of the comparison.
Otherwise the row is `not separable` (`attributable_us` null) with the reason in `evidence`: a trace of
some of the ranks cannot tell a late peer from a slowed kernel unless this rank ran the same collective
alone. A row needs a baseline, a (net) duration longer than *every* alone run of it, the overlap
covering at least `min_overlap_frac` of it, inflation ≥ `min_inflation` and `min(extra, overlap)` ≥
`min_attributable_us` (below ~20 µs a small collective's own jitter dominates); separable rows are
charged `attributable_us = min(extra, overlap)`.

A collective of unknown size (in a Kineto trace: launched before the profiling window, so no op recorded
its arguments) has no like collective to be compared with: collectives of one op and label run from tens
of µs to milliseconds with their size, and the same instance on another rank is slowed with it (a ring
proceeds at its slowest member). `unsized_overlaps` lists those that overlap an SM-filling kernel, so the
report can say they were not judged rather than leave them out unsaid.

Invariants: resident blocks per SM are bounded by threads only (registers and shared memory are not in
the frames), so the capacity is an upper bound and a kernel flagged as overflowing really does overflow.
CPU traces (no GPU timing, no kernels) give an empty frame.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from commscope.load.frames import P2P_MARK

CONTENTION_COLUMNS = [
    "rank", "step", "label", "op", "bytes", "stream", "start_ns", "duration_us", "alone_us", "inflation",
    "extra_us", "overlap_us", "overlap_frac", "attributable_us", "kernel", "kernel_stream", "kernel_blocks", "capacity_blocks",
    "peer_wait_us", "separable", "evidence",
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
    for p in props if isinstance(props, list) else []:
        sms = p.get("numSms") if isinstance(p, dict) else None
        if _count(sms):  # a count the trace got wrong ("x", -1, 1e300) names no device to judge by
            threads = p.get("maxThreadsPerMultiprocessor")
            return DeviceLimits(int(sms), int(threads) if _count(threads) else 2048)
    return None


def _count(v) -> bool:
    """A whole, positive number that fits a device's counts (an SM count, threads per SM)."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v)
            and 0 < v < 2 ** 31)


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
    overlap, partners = _overlapping(comm, big)
    comm["overlap_ns"] = overlap
    comm["peer_wait_ns"] = peer_waits(comm)
    comm["net_ns"] = comm["dur_ns"] - comm["peer_wait_ns"].fillna(0)
    comm["present"] = comm.groupby(["group", "seq"], dropna=False)["rank"].transform("nunique")
    comm["partner"] = pd.Series(partners, index=comm.index, dtype=object)
    comm = comm[comm["bytes"].notna()]  # unknown size: no like collective (module docstring)
    alone = comm[comm["overlap_ns"] == 0]
    stats = lambda g: {k: (float(v.median()), float(v.max())) for k, v in g["net_ns"]}  # noqa: E731
    by_rank = stats(alone.groupby(["rank", "key"]))
    by_key = stats(alone.groupby("key"))
    out = []
    for _, c in comm[comm["overlap_ns"] > 0].iterrows():
        p, n_present = c["partner"], c["present"]
        arrivals = not pd.isna(c["peer_wait_ns"])
        found = by_rank.get((c["rank"], c["key"]))
        if found is not None:
            separable, why = True, "same rank alone" + ("; peer wait removed" if arrivals else "")
        else:
            found = by_key.get(c["key"])
            if found is None:
                continue  # never ran alone anywhere: no baseline to speak of
            separable = arrivals
            why = "arrivals known; alone on other ranks" if arrivals else _not_separable(c, int(n_present))
        base, worst_alone = found
        net = c["net_ns"]
        if pd.isna(base) or base <= 0 or net <= worst_alone:
            continue  # within what this collective took alone: not evidence of contention
        infl = net / base
        frac = c["overlap_ns"] / c["dur_ns"] if c["dur_ns"] > 0 else 0.0
        extra = net - base
        if infl < min_inflation or frac < min_overlap_frac or min(extra, c["overlap_ns"]) < min_attributable_us * 1e3:
            continue
        out.append({
            "rank": int(c["rank"]), "step": c.get("step"), "label": c["label"], "op": c["op"],
            "bytes": c["bytes"], "stream": c["stream"], "start_ns": int(c["start_ns"]),
            "duration_us": c["dur_ns"] / 1e3, "alone_us": base / 1e3, "inflation": infl,
            "extra_us": extra / 1e3, "overlap_us": c["overlap_ns"] / 1e3, "overlap_frac": frac,
            "attributable_us": min(extra, c["overlap_ns"]) / 1e3 if separable else np.nan,
            "kernel": p["name"], "kernel_stream": p["stream"], "kernel_blocks": int(p["blocks"]),
            "capacity_blocks": int(p["capacity"]),
            "peer_wait_us": c["peer_wait_ns"] / 1e3 if arrivals else np.nan, "separable": separable,
            "evidence": why,
        })
    res = pd.DataFrame(out, columns=CONTENTION_COLUMNS)
    if not len(res):
        return res
    res["_sep"] = ~res["separable"].astype(bool)
    res = res.sort_values(["_sep", "attributable_us", "extra_us", "rank"], ascending=[True, False, False, True],
                          ignore_index=True)
    return res.drop(columns="_sep")


def _overlapping(comm: pd.DataFrame, big: pd.DataFrame) -> tuple[list[int], list]:
    """Per collective of `comm`, the ns SM-filling kernels (`big`) on other streams of its rank overlap
    it, and the largest such kernel's row (None where none)."""
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
    return overlap, partners


UNSIZED_COLUMNS = ["rank", "step", "op", "label", "duration_us", "overlap_frac", "kernel", "kernel_blocks"]


def unsized_overlaps(collectives: pd.DataFrame, kernels: pd.DataFrame, limits: DeviceLimits | None, *,
                     min_overlap_frac: float = 0.25) -> pd.DataFrame:
    """Collectives of unknown size that an SM-filling kernel overlaps by at least `min_overlap_frac`:
    what find_sm_contention cannot judge (module docstring), for the report to say so."""
    if limits is None or collectives is None or kernels is None or collectives.empty or kernels.empty:
        return pd.DataFrame(columns=UNSIZED_COLUMNS)
    comm = collectives[collectives["bytes"].isna()].dropna(subset=["start_ns", "end_ns"])
    if comm.empty:
        return pd.DataFrame(columns=UNSIZED_COLUMNS)
    overlap, partners = _overlapping(comm, sm_filling_kernels(kernels, limits))
    dur = (comm["end_ns"] - comm["start_ns"]).to_numpy(np.float64)
    rows = [{"rank": int(c.rank), "step": c.step, "op": c.op, "label": c.label, "duration_us": d / 1e3,
             "overlap_frac": ov / d, "kernel": p["name"], "kernel_blocks": int(p["blocks"])}
            for c, d, ov, p in zip(comm.itertuples(), dur, overlap, partners)
            if p is not None and d > 0 and ov / d >= min_overlap_frac]
    return pd.DataFrame(rows, columns=UNSIZED_COLUMNS)


def peer_waits(comm: pd.DataFrame) -> pd.Series:
    """Per collective, ns from its own arrival (kernel start) to the last arrival of its (group, seq),
    clipped to its duration; NaN unless every rank of the group is present with a start (the complete
    instances analyze.waiting matches, pre-window ones numbered back from the window's first included)."""
    seq = pd.to_numeric(comm["seq"], errors="coerce")
    start = comm["start_ns"].astype("Int64")
    keys = [comm["group"], seq]
    last = start.groupby(keys, dropna=False).transform("max")
    n = comm["rank"].groupby(keys, dropna=False).transform("nunique")
    size = pd.to_numeric(comm["group_size"], errors="coerce")
    ok = seq.notna() & (n >= size) & (size >= 2) & start.notna()
    wait = (last - start).astype("Float64").clip(lower=0).to_numpy(np.float64, na_value=np.nan)
    wait = np.minimum(wait, comm["dur_ns"].to_numpy(np.float64))
    return pd.Series(np.where(ok.to_numpy(bool), wait, np.nan), index=comm.index)


def _not_separable(c: pd.Series, present: int) -> str:
    if P2P_MARK in str(c.get("group")):
        return (f"not separable: a point-to-point op (its peer is not matched), and rank {int(c['rank'])} never ran "
                "it alone")
    size = c.get("group_size")
    who = f"{present} of {int(size)} ranks of its group in the trace" if pd.notna(size) and present < size \
        else "peers' arrivals unknown"
    return f"not separable: {who}, and rank {int(c['rank'])} never ran it alone"
