"""Whether the ranks' clocks agree, read from the collectives themselves.

The members of an all_reduce, all_gather or reduce_scatter finish it together: its last chunk reaches every
rank within microseconds of the others (over the 76 complete instances of the 8×H100 fixture the ends of
one instance lie a median 0.02 ms and at most 0.19 ms apart; each rank's median offset from the others is
under 3 µs). A rank whose clock is offset from its peers' (traces of machines whose clocks were not
synchronized, a trace whose times were shifted) ends every instance that much earlier or later than they
do. Who made whom wait compares arrivals across ranks, so on such clocks it measures the offset, not the
ranks: a rank 50 ms ahead "makes the others wait" 50 ms at every collective.

`end_offsets(collectives)`: per rank, how many complete kernel-timed instances of those ops it took part
in and the median of (its end − the instance's median end), ms; in a group of two the median of two ends
is their mean, so there the offset is from the other member's end (each rank's is then the whole gap, and
which of the two clocks is off cannot be told). `disagreement(collectives)`: the ranks
whose median offset is CLOCK_OFFSET_MS or more, {rank: offset ms}, or None when the clocks agree or there
is too little to tell (fewer than MIN_INSTANCES such instances). `disagreement_text`: the same in words.

Invariant: kernel-timed ends only (the NCCL kernels of a profiler trace, timing `kernel`). A run
directory's CUDA-event end (`cuda_event`) is an event on the caller's stream after its `wait()`, reached
when that rank's stream gets there, later on a rank with more work queued before the wait; a host-timed
end is when that rank's wait returned. Neither is when the collective itself ended.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze.skew import complete_rows
from commscope.util.ranges import int_ranges

SYMMETRIC = ("all_reduce", "all_gather", "reduce_scatter")
# 5× the largest spread of one instance's ends on the 8×H100 fixture, and hundreds of times its ranks'
# median offsets: a clock offset, never a collective's own spread
CLOCK_OFFSET_MS = 1.0
MIN_INSTANCES = 3
_NEEDED = ("rank", "group", "seq", "op", "timing", "end_ns")


def end_offsets(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per rank: `instances` and `median_offset_ms` (module docstring); no rows where nothing qualifies."""
    c = collectives
    if not len(c) or not set(_NEEDED) <= set(c.columns):  # a frame without end times says nothing of clocks
        return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "instances": pd.Series(dtype=np.int64),
                             "median_offset_ms": pd.Series(dtype=np.float64)})
    end = pd.to_numeric(c["end_ns"], errors="coerce").to_numpy(np.float64)
    use = (c["timing"].eq("kernel").to_numpy() & c["op"].isin(SYMMETRIC).to_numpy() & ~np.isnan(end))
    use[use] = complete_rows(c[use])
    if not use.any():
        return end_offsets(c.iloc[:0])
    sub = pd.DataFrame({"rank": c["rank"].to_numpy()[use], "group": c["group"].to_numpy()[use],
                        "seq": c["seq"].to_numpy()[use], "end": end[use]})
    by = sub.groupby(["group", "seq"])["end"]
    sub["offset"] = (sub["end"] - by.transform("median")) * np.where(by.transform("size") == 2, 2.0, 1.0)
    per = sub.groupby("rank")["offset"].agg(["size", "median"]).reset_index()
    return pd.DataFrame({"rank": per["rank"].astype(np.int64), "instances": per["size"].astype(np.int64),
                         "median_offset_ms": per["median"] / 1e6})


def disagreement(collectives: pd.DataFrame) -> dict[int, float] | None:
    """{rank: median end offset ms} of the ranks whose clocks are off by CLOCK_OFFSET_MS or more, else None."""
    off = end_offsets(collectives)
    off = off[off["instances"] >= MIN_INSTANCES]
    bad = off[off["median_offset_ms"].abs() >= CLOCK_OFFSET_MS]
    return {int(r): float(ms) for r, ms in zip(bad["rank"], bad["median_offset_ms"])} or None


def disagreement_text(off: dict[int, float]) -> str:
    """ "the ranks' clocks disagree: … but rank 3's end a median 50.0 ms after its peers', so …" """
    def one(r: int, ms: float) -> str:
        return f"rank {r}'s end a median {abs(ms):,.1f} ms {'after' if ms > 0 else 'before'} its peers'"

    shown = sorted(off.items(), key=lambda kv: -abs(kv[1]))
    ranks = ", ".join(one(r, ms) for r, ms in shown[:4]) + (
        f", and ranks {int_ranges([r for r, _ in shown[4:]], most=8)}' too" if len(shown) > 4 else "")
    return ("the ranks' clocks disagree: all_reduce, all_gather and reduce_scatter end on every member within "
            f"microseconds, but {ranks}, so arrivals compared across ranks would measure the clocks, not the ranks")
