"""Collectives a hung or failed run left in flight, and how long each of their ranks was seen alive.

A rank whose watchdog fired, or that ended abnormally, leaves the collectives it had launched and never
saw complete in watchdog.json / inflight.json (docs/faults.md; loaded as `trace.faults.inflight`). Such a
collective has a launch but no end; the end it is given is its rank's *last sign of life*
(`last_alive_ns`): the watchdog's firing where it fired, else the latest time the rank recorded anything
(a collective's end, wait or launch, a step's or region's end, a gradient hook, another in-flight
collective's launch or wait).

`left_in_flight(trace)` is the frame the Perfetto export draws on its `in flight (never completed)` track:
the in-flight rows that never finished, once per (rank, group, seq) however many reports list them, in
the reports' order, with `until_ns` (the rank's last sign of life) and `watchdog_fired` (whether that
is the watchdog's firing). A rank with no sign of life at all has no row: it has nothing to end at.

Pure: reads the trace's frames, modifies none of them.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

# the frames and columns whose times say a rank was alive (besides the in-flight reports themselves)
_ALIVE_COLUMNS = (("collectives", ("end_ns", "wait_end_ns", "call_ns")), ("steps", ("end_ns",)),
                  ("regions", ("end_ns",)), ("hooks", ("t_ns",)))


def _rank_rows(df: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return pd.DataFrame()
    return df[df["rank"] == rank]


def last_alive_ns(trace: Any, rank: int, fired: bool) -> int | None:
    """The last time `rank` is known to have been alive (module docstring): its watchdog's firing when
    `fired` and the report gives the time, else its latest record; None when it recorded nothing."""
    faults = getattr(trace, "faults", None)
    if fired:
        r = faults.reports
        # nullable integers: a report without fired_ns would make the column float64, 256 ns steps
        at = pd.to_numeric(r.loc[(r["rank"] == rank) & (r["kind"] == "watchdog"), "fired_ns"], errors="coerce",
                           dtype_backend="numpy_nullable")
        if at.notna().any():
            return int(at.max())
    times = []
    for frame, cols in _ALIVE_COLUMNS:
        df = _rank_rows(getattr(trace, frame, None), rank)
        times += [pd.to_numeric(df[c], errors="coerce").max() for c in cols if len(df) and c in df]
    if faults is not None and len(faults.inflight):
        mine = faults.inflight[faults.inflight["rank"] == rank]
        times += [pd.to_numeric(mine[c], errors="coerce").max() for c in ("call_ns", "wait_ns") if len(mine)]
    times = [t for t in times if not pd.isna(t)]
    return int(max(times)) if times else None


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
    until = {r: last_alive_ns(trace, r, f) for r, f in fired.items()}
    ranks = fl["rank"].astype(int)
    fl = fl[ranks.map(lambda r: until[r] is not None).to_numpy(bool)].copy()
    fl["until_ns"] = pd.Series([until[int(r)] for r in fl["rank"]], index=fl.index, dtype="int64")
    fl["watchdog_fired"] = pd.Series([fired[int(r)] for r in fl["rank"]], index=fl.index, dtype=bool)
    return fl
