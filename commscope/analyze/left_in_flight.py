"""Collectives a hung or failed run left in flight, and how long each of their ranks was seen alive.

A rank whose watchdog fired, or that ended abnormally, leaves the collectives it had launched and never
saw complete in watchdog.json / inflight.json (docs/faults.md; loaded as `trace.faults.inflight`). Such a
collective has a launch but no end; the end it is given is its rank's *last sign of life*
(`last_alive_ns`): the watchdog's firing where it fired, else the latest time the rank recorded anything
(a collective's end, wait or launch, a step's or region's end, a gradient hook, another in-flight
collective's launch or wait).

`last_region(trace, rank)` is where a rank was when its records end inside a step it never finished (and
`cut_by_end`: whether its end, status.json's `ended_ns`, came while that region was open): the
regions open at its last region end (the last to end, and the ones nested in it that a failing step exits
with it, within NESTED_EXIT_NS), outermost first, with the innermost one's step and duration, and that region's median
duration in the rank's other steps: a culprit that never launched a collective spent its last seconds
somewhere, which the doctor says. None where the last region belongs to a step the rank finished (a rank
killed outright records no region it was in: a region's record is made at its end).

`left_in_flight(trace)` is the frame the Perfetto export draws on its `in flight (never completed)` track:
the in-flight rows that never finished, once per (rank, group, seq) however many reports list them, in
the reports' order, with `until_ns` (the rank's last sign of life) and `watchdog_fired` (whether that
is the watchdog's firing). A rank with no sign of life at all has no row: it has nothing to end at.

Pure: reads the trace's frames, modifies none of them.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# the frames and columns whose times say a rank was alive (besides the in-flight reports themselves)
_ALIVE_COLUMNS = (("collectives", ("end_ns", "wait_end_ns", "call_ns")), ("steps", ("end_ns",)),
                  ("regions", ("end_ns",)), ("hooks", ("t_ns",)))


def _latest(df: pd.DataFrame | None, col: str) -> pd.Series:
    """Per rank, the latest value of `col` in `df` (nullable integers: exact for epoch ns)."""
    if df is None or not len(df) or col not in df:
        return pd.Series(dtype="Int64")
    t = pd.to_numeric(df[col], errors="coerce", dtype_backend="numpy_nullable")
    return t.groupby(df["rank"].astype(int).to_numpy()).max().dropna()


def _last_alive(trace: Any, fired: dict[int, bool]) -> dict[int, int | None]:
    """last_alive_ns of each rank of `fired` (rank → whether its watchdog fired), every frame's column read
    once: per-rank filters would read every record once per rank."""
    faults = getattr(trace, "faults", None)
    parts = [_latest(getattr(trace, frame, None), c) for frame, cols in _ALIVE_COLUMNS for c in cols]
    if faults is not None and len(faults.inflight):
        parts += [_latest(faults.inflight, c) for c in ("call_ns", "wait_ns")]
    latest = pd.concat(parts).groupby(level=0).max() if parts else pd.Series(dtype="Int64")
    at = pd.Series(dtype="Int64")
    if faults is not None and any(fired.values()):
        r = faults.reports
        at = _latest(r[r["kind"] == "watchdog"], "fired_ns")
    out = {}
    for rank, f in fired.items():
        t = at.get(rank) if f and rank in at.index else latest.get(rank) if rank in latest.index else None
        out[rank] = None if t is None or pd.isna(t) else int(t)
    return out


def last_alive_ns(trace: Any, rank: int, fired: bool) -> int | None:
    """The last time `rank` is known to have been alive (module docstring): its watchdog's firing when
    `fired` and the report gives the time, else its latest record; None when it recorded nothing."""
    return _last_alive(trace, {rank: fired})[rank]


# A last region at most this many times its median in the other steps ended as it always does (the failure
# came after it); a longer one was cut short by it, or held the rank stuck inside
ENDED_AS_USUAL = 2.0
NESTED_EXIT_NS = 1_000_000  # regions left together by one exception (or one return) end within µs of each other


def last_region(trace: Any, rank: int) -> dict | None:
    """`{"path": "optimizer › opt.phase1", "name", "step", "start_ns", "end_ns", "duration_ms",
    "typical_ms"}` of `rank` (module docstring; `typical_ms` None when no other step has that region), or
    None when it recorded no region or its last one is in a step it finished."""
    r = getattr(trace, "regions", None)
    if r is None or not len(r):
        return None
    mine = r[r["rank"] == rank]
    end = pd.to_numeric(mine["end_ns"], errors="coerce")
    if not end.notna().any():
        return None
    start = pd.to_numeric(mine["start_ns"], errors="coerce")
    # the outermost region open at the end is the last to end (nested ones exit first); the ones inside it
    # that ended with it were open too
    outer = int(np.nanargmax(end.to_numpy(np.float64)))  # a region without an end is none to end last
    o_start, o_end = start.iloc[outer], end.iloc[outer]
    inside = ((start >= o_start) & (end <= o_end) & (end >= o_end - NESTED_EXIT_NS)).to_numpy(bool)
    open_ = mine[inside].assign(_s=start[inside]).sort_values("_s", kind="stable")
    inner = open_.iloc[-1]
    dur = (int(inner["end_ns"]) - int(inner["start_ns"])) / 1e6
    same = mine[(mine["name"] == inner["name"]) & (mine["step"] != inner["step"])]
    others = (pd.to_numeric(same["end_ns"]) - pd.to_numeric(same["start_ns"])) / 1e6
    step = inner["step"]
    finished = trace.steps["step"][trace.steps["rank"] == rank] if len(trace.steps) else []
    if pd.isna(step) or int(step) < 0 or int(step) in set(int(x) for x in finished):
        return None
    # the rank's end (status.json ended_ns: a signal's arrival) came while the region was open: the region's
    # record was made as the end unwound it, so its length is where the rank was cut short, not a region
    # that ended as usual
    status = ((getattr(trace, "config", None) or {}).get("status") or {}).get(str(rank)) or {}
    ended = status.get("ended_ns")
    cut = type(ended) is int and int(inner["start_ns"]) < ended <= int(inner["end_ns"])
    return {"path": " › ".join(str(n) for n in open_["name"]), "name": str(inner["name"]),
            "step": int(step), "start_ns": int(inner["start_ns"]),
            "end_ns": int(inner["end_ns"]), "duration_ms": dur,
            "typical_ms": float(others.median()) if len(others) else None, "cut_by_end": cut,
            "into_ms": (ended - int(inner["start_ns"])) / 1e6 if cut else None}


def last_region_text(rank: int, where: dict | None) -> str:
    """The verdict's clause for `last_region`'s answer: "rank 2 was last in region optimizer › opt.phase1
    (step 3) for 13.8 s, against 0.052 s in its other steps"; for a region no longer than ENDED_AS_USUAL
    times its median, that it ended as usual and the rank stopped after it; "" without one."""
    if where is None:
        return ""
    step = f" (step {where['step']})"
    typical = where["typical_ms"]
    against = "" if typical is None else f", against {_secs(typical)} in its other steps"
    if where.get("cut_by_end"):
        return (f"rank {rank} was in region {where['path']}{step} when its end came (status.json ended_ns), "
                f"{_secs(where['into_ms'])} into it{against}")
    if typical is not None and where["duration_ms"] <= ENDED_AS_USUAL * typical:
        # a region's record is made at its end: one as long as in the other steps ended as it always does,
        # and the rank stopped after it, outside every recorded region, not inside it
        return (f"rank {rank}'s last recorded region, {where['path']}{step}, ended after "
                f"{_secs(where['duration_ms'])} as in its other steps ({_secs(typical)}): the rank stopped after it, "
                "outside every recorded region")
    return f"rank {rank} was last in region {where['path']}{step} for {_secs(where['duration_ms'])}{against}"


def _secs(ms: float) -> str:
    return f"{ms / 1e3:.1f} s" if ms >= 1000 else f"{ms:.3g} ms"


def left_in_flight(trace: Any) -> pd.DataFrame:
    """The in-flight collectives that never finished, with `until_ns` and `watchdog_fired` (module
    docstring); an empty frame when the trace has no fault evidence."""
    faults = getattr(trace, "faults", None)
    if faults is None or not len(faults.inflight):
        return pd.DataFrame(columns=["rank", "group", "seq", "until_ns", "watchdog_fired"])
    fl = faults.inflight
    fl = fl[~fl["finished"].astype(bool)].drop_duplicates(["rank", "group", "seq"])
    watchdog = set(faults.ranks("watchdog"))
    fired = {int(r): int(r) in watchdog for r in pd.unique(fl["rank"])}
    until = _last_alive(trace, fired)
    ranks = fl["rank"].astype(int)
    fl = fl[ranks.map(lambda r: until[r] is not None).to_numpy(bool)].copy()
    fl["until_ns"] = pd.Series([until[int(r)] for r in fl["rank"]], index=fl.index, dtype="int64")
    fl["watchdog_fired"] = pd.Series([fired[int(r)] for r in fl["rank"]], index=fl.index, dtype=bool)
    return fl
