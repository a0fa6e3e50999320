"""`launch_table`: every collective each rank is known to have launched, finished or not — the table
doctor's desync and hang rules compare across ranks.

Frames in (the loaded `collectives` and the fault evidence's `inflight` rows), one frame out with
LAUNCH_COLUMNS, one row per (rank, group, seq). Invariant: a collective both flushed to events.jsonl and
listed in a report keeps its finished row.
"""
from __future__ import annotations

import pandas as pd

from commscope.load.frames import LAUNCH_COLUMNS


def _counts(b: pd.Series) -> pd.Series:
    """The collectives' byte counts (float64: a Kineto collective without a size is NaN) as nullable
    Int64 like the fault evidence's, so the table and the evidence drawn from it keep integers
    (393216, not 393216.0); a column with a fractional value, which no reader produces, stays float."""
    b = pd.to_numeric(b, errors="coerce")
    return b.astype("Int64") if (b.dropna() % 1 == 0).all() else b.astype(float)


def launch_table(collectives: pd.DataFrame, inflight: pd.DataFrame, source: str = "events") -> pd.DataFrame:
    """One row per (rank, group, seq) launched: from `collectives` (`source` names where they come from:
    "events" for a run directory's records, "trace" for a profiler trace's) and from `inflight` (the
    watchdog/inflight reports, their own source); a finished row wins where both hold the launch."""
    c = collectives
    parts = []
    if len(c):
        parts.append(pd.DataFrame({
            "rank": c["rank"].astype(int), "group": c["group"].astype(str), "group_size": c["group_size"],
            "seq": c["seq"].astype(int),
            "label": c["label"], "op": c["op"], "bytes": _counts(c["bytes"]), "dtype": c["dtype"],
            "step": c["step"], "call_ns": c["call_ns"], "wait_ns": c["wait_ns"], "finished": True,
            "source": source}))
    if len(inflight):
        parts.append(inflight)
    if not parts:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    df = pd.concat(parts, ignore_index=True)
    df = df.sort_values(["rank", "group", "seq", "finished"], ascending=[True, True, True, False], kind="stable")
    return df.drop_duplicates(["rank", "group", "seq"]).reset_index(drop=True)
