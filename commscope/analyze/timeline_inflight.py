"""What the timeline draws of a run that did not complete: the collectives left in flight, and the steps a
rank began but recorded no end of.

A hung or crashed run leaves collectives in flight (analyze.left_in_flight: launched, never seen to
complete) and a step with records but no step record (a rank writes that record at the step's end). The
timeline draws both where they happened, so that a reader of the steps before a hang sees which collective
each rank is stuck in, and which rank never launched it (its comm row has no such bar):

- `inflight_bars(trace, window, t0, t_end)`: the in-flight collectives whose step is in the window (any,
  when the window is everything), at most IN_FLIGHT_DRAWN a rank, the oldest launches first (the oldest is
  the one the later ones queue behind), as bars from the launch (`start`) to the rank's last sign of life.
  A watchdog fires minutes after the launch, and a bar that long would squash every step drawn, so the
  bars stop at `edge`, the figure's right edge: IN_FLIGHT_PAD of the span past `t_end` (the right edge of
  what else is drawn), so that they stick out past everything that completed, and as far past the latest
  launch; `in_flight_ns` keeps the whole time for the hover and `cut` says which bars stop at the edge.
  `waited_after_ns`: how long after its launch the rank called wait() on it and blocked there (NaN: it
  never waited on it; a rank blocks on one collective, often queued behind the one its peer never
  launched). `ended`: how the rank ended where its status says (its error, the first ENDED_CHARS
  characters; None without one): a collective aborted by a peer's death is in flight until then, not
  hung. `more` counts, per rank, its in-flight collectives in the window not drawn. A launch time not
  recorded leaves nothing to draw: counted in `more`.
- `unfinished_steps(trace, rank, window)`: the steps >= 0 in the window for which `rank` has records
  (collective and in-flight launches, compute, hook firings) but no step record, each with its earliest
  record's time; `steps_without_end(trace)`: the same over every rank at once, step → how many ranks.

Times are ns since the timeline's `t0`. Invariant: pure functions of the trace's frames.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze.left_in_flight import left_in_flight
from commscope.load.frames import rel

IN_FLIGHT_DRAWN = 8    # in-flight collectives drawn per rank (the rest are counted): each takes a lane of its own
IN_FLIGHT_PAD = 0.04   # how far past everything else drawn a shortened in-flight bar reaches, as a share of the span
INFLIGHT_COLS = ["rank", "label", "op", "group", "seq", "step", "bytes", "start", "end", "in_flight_ns",
                 "waited_after_ns", "watchdog_fired", "ended", "cut"]
ENDED_CHARS = 120  # of a rank's error, in `ended`


def _in_window(steps: pd.Series, window: tuple[int, int] | None) -> np.ndarray:
    if window is None:
        return np.ones(len(steps), dtype=bool)
    s = pd.to_numeric(steps, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return (s >= window[0]) & (s < window[1])


def inflight_bars(trace: Any, window: tuple[int, int] | None, t0: int, t_end: float
                  ) -> tuple[pd.DataFrame, dict[int, int], float]:
    """(the drawn in-flight bars, INFLIGHT_COLS, by rank then launch; per rank, how many are not drawn; the
    figure's right edge, ns since t0: `t_end` where no bar is drawn)."""
    fl = left_in_flight(trace)
    if not len(fl):
        return pd.DataFrame(columns=INFLIGHT_COLS), {}, t_end
    fl = fl[_in_window(fl["step"], window)]
    fl = fl.assign(start=rel(fl["call_ns"], t0), until=rel(fl["until_ns"], t0), wait=rel(fl["wait_ns"], t0))
    ranks = fl["rank"].astype(int)
    # a launch time not recorded leaves nothing to draw: counted with the ones not drawn
    fl = fl[~np.isnan(fl["start"].to_numpy(np.float64))].sort_values(["rank", "start"], kind="stable")
    drawn = fl.groupby("rank", sort=False).head(IN_FLIGHT_DRAWN)
    more = ranks.value_counts().sub(drawn["rank"].astype(int).value_counts(), fill_value=0)
    start = drawn["start"].to_numpy(np.float64)
    until = drawn["until"].to_numpy(np.float64)
    counts = {int(r): int(n) for r, n in sorted(more.items()) if n}
    if not len(drawn):
        return pd.DataFrame(columns=INFLIGHT_COLS), counts, t_end
    edge = max(t_end, float(start.max())) + IN_FLIGHT_PAD * max(t_end, 0.0)
    end = np.minimum(until, edge)
    out = pd.DataFrame({
        "rank": drawn["rank"].astype(int).to_numpy(), "label": drawn["label"].astype(object).to_numpy(),
        "op": drawn["op"].astype(object).to_numpy(), "group": drawn["group"].astype(object).to_numpy(),
        "seq": drawn["seq"].to_numpy(dtype=object), "step": drawn["step"].to_numpy(dtype=object),
        "bytes": drawn["bytes"].to_numpy(dtype=object), "start": start, "end": end,
        "in_flight_ns": until - start, "waited_after_ns": drawn["wait"].to_numpy(np.float64) - start,
        "watchdog_fired": drawn["watchdog_fired"].to_numpy(bool),
        "ended": [_ended(trace, int(r)) for r in drawn["rank"]],
        "cut": end < until})
    return out[INFLIGHT_COLS].reset_index(drop=True), counts, edge


# the frames and time columns whose rows say a rank was inside a step (the in-flight launches are added)
_STEP_RECORDS = (("collectives", "call_ns"), ("compute", "start_ns"), ("hooks", "t_ns"))


def _ended(trace: Any, rank: int) -> str | None:
    """`rank`'s error as its status.json says it (the loader's config["status"], keyed by rank as text)."""
    statuses = (getattr(trace, "config", None) or {}).get("status") or {}
    status = statuses.get(str(rank)) or statuses.get(rank) or {}
    error = status.get("error") if isinstance(status, dict) else None
    if not error:
        return None
    error = " ".join(str(error).split())
    return error if len(error) <= ENDED_CHARS else error[:ENDED_CHARS - 1] + "…"


def _step_record_frames(trace: Any) -> list[tuple[pd.DataFrame, str]]:
    """The frames (with their time column) whose rows say a rank was inside their step."""
    frames = [(getattr(trace, name, None), col) for name, col in _STEP_RECORDS]
    faults = getattr(trace, "faults", None)
    if faults is not None and len(faults.inflight):
        frames.append((faults.inflight, "call_ns"))
    return [(df, col) for df, col in frames if df is not None and len(df) and col in df and "step" in df]


def unfinished_steps(trace: Any, rank: int, window: tuple[int, int] | None) -> pd.DataFrame:
    """step, start_ns (absolute: the earliest record of the step): the steps in `window` that `rank` has
    records of but no step record for, by step (module docstring)."""
    done = trace.steps["step"][trace.steps["rank"] == rank] if len(trace.steps) else pd.Series([], dtype=int)
    parts = []
    for df, col in _step_record_frames(trace):
        mine = df[df["rank"] == rank]
        step = pd.to_numeric(mine["step"], errors="coerce")
        keep = (step >= 0).to_numpy(bool) & _in_window(step, window) & ~step.isin(done).to_numpy(bool)
        t = pd.to_numeric(mine[col], errors="coerce").astype("Int64")
        if keep.any():
            parts.append(pd.DataFrame({"step": step[keep].astype(int).to_numpy(), "start_ns": t[keep].array}))
    if not parts:
        return pd.DataFrame({"step": pd.Series([], dtype=int), "start_ns": pd.Series([], dtype="Int64")})
    out = pd.concat(parts, ignore_index=True).dropna(subset=["start_ns"])
    return out.groupby("step", as_index=False)["start_ns"].min().sort_values("step").reset_index(drop=True)


def steps_without_end(trace: Any) -> dict[int, int]:
    """Step → the number of ranks with records of it (module docstring's) but no step record of it. One
    pass over whole columns: each (rank, step) pair one integer (the rank times the number of distinct
    steps plus the step's code), exact whatever the steps' size."""
    pairs = []
    for df, _ in _step_record_frames(trace):
        step = pd.to_numeric(df["step"], errors="coerce").to_numpy(np.float64)
        rank = pd.to_numeric(df["rank"], errors="coerce").to_numpy(np.float64)
        ok = (step >= 0) & ~np.isnan(rank)
        pairs.append((rank[ok].astype(np.int64), step[ok].astype(np.int64)))
    if not pairs:
        return {}
    done = trace.steps
    rank = np.concatenate([r for r, _ in pairs] + [pd.to_numeric(done["rank"]).to_numpy(np.int64)])
    step = np.concatenate([s for _, s in pairs] + [pd.to_numeric(done["step"]).to_numpy(np.int64)])
    codes, steps = pd.factorize(step)
    key = rank * (len(steps) + 1) + codes
    n_records = sum(len(r) for r, _ in pairs)
    seen = np.unique(key[:n_records])
    seen = seen[~np.isin(seen, key[n_records:])]
    found, counts = np.unique(seen % (len(steps) + 1), return_counts=True)
    return {int(steps[c]): int(n) for c, n in zip(found, counts)}
