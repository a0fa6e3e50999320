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
- `steps_begun(trace)`: per rank, the steps >= 0 it has records of (collectives, in-flight launches,
  compute, regions, hook firings) but no step record for, from its earliest record's start to its latest
  record's end;
  `unfinished_steps(trace, rank, window)`: those of one rank in the window; `steps_without_end(trace)`:
  step → how many ranks began it so.

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
NO_END = "no end recorded"  # how the page and the export name a step begun and never ended ("step 3 · no end recorded")


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


# the frames whose rows say a rank was inside a step, with their start and end columns (the in-flight
# launches are added, which have no end)
_STEP_RECORDS = (("collectives", "call_ns", "end_ns"), ("compute", "start_ns", "end_ns"),
                 ("regions", "start_ns", "end_ns"), ("hooks", "t_ns", None))


def _ended(trace: Any, rank: int) -> str | None:
    """`rank`'s error as its status.json says it (the loader's config["status"], keyed by rank as text)."""
    statuses = (getattr(trace, "config", None) or {}).get("status") or {}
    status = statuses.get(str(rank)) or statuses.get(rank) or {}
    error = status.get("error") if isinstance(status, dict) else None
    if not error:
        return None
    error = " ".join(str(error).split())
    return error if len(error) <= ENDED_CHARS else error[:ENDED_CHARS - 1] + "…"


def _step_record_frames(trace: Any) -> list[tuple[pd.DataFrame, str, str | None]]:
    """The frames (with their start and end columns) whose rows say a rank was inside their step."""
    frames = [(getattr(trace, name, None), start, end) for name, start, end in _STEP_RECORDS]
    faults = getattr(trace, "faults", None)
    if faults is not None and len(faults.inflight):
        frames.append((faults.inflight, "call_ns", None))
    return [(df, start, end if end in df else None) for df, start, end in frames
            if df is not None and len(df) and start in df and "step" in df]


def steps_begun(trace: Any) -> pd.DataFrame:
    """rank, step, start_ns, end_ns (absolute, Int64: its earliest record's start, its latest record's end): per rank, the
    steps >= 0 it has records of (module docstring's) but no step record for, by rank then step. One pass
    over whole columns: each (rank, step) pair one integer (the rank times the number of distinct steps
    plus the step's code), exact whatever the steps' size."""
    parts = []
    for df, start_col, end_col in _step_record_frames(trace):
        step = pd.to_numeric(df["step"], errors="coerce").to_numpy(np.float64)
        rank = pd.to_numeric(df["rank"], errors="coerce").to_numpy(np.float64)
        t = pd.to_numeric(df[start_col], errors="coerce").astype("Int64")
        ok = (step >= 0) & ~np.isnan(rank) & ~t.isna().to_numpy(bool)
        t = t.to_numpy(np.int64, na_value=0)
        # a record's end where it has one (a region left 13 s after it began), else its one time
        e = pd.to_numeric(df[end_col], errors="coerce").astype("Int64") if end_col else None
        e = t if e is None else np.maximum(t, e.to_numpy(np.int64, na_value=np.iinfo(np.int64).min))
        parts.append((rank[ok].astype(np.int64), step[ok].astype(np.int64), t[ok], e[ok]))
    empty = pd.DataFrame({"rank": pd.Series([], dtype=np.int64), "step": pd.Series([], dtype=np.int64),
                          "start_ns": pd.Series([], dtype="Int64"), "end_ns": pd.Series([], dtype="Int64")})
    if not parts:
        return empty
    done = trace.steps
    rank = np.concatenate([p[0] for p in parts])
    step = np.concatenate([p[1] for p in parts])
    t = np.concatenate([p[2] for p in parts])
    te = np.concatenate([p[3] for p in parts])
    d_rank, d_step = pd.to_numeric(done["rank"]).to_numpy(np.int64), pd.to_numeric(done["step"]).to_numpy(np.int64)
    codes, steps = pd.factorize(np.concatenate([step, d_step]))
    key = np.concatenate([rank, d_rank]) * (len(steps) + 1) + codes
    begun = ~np.isin(key[:len(rank)], key[len(rank):])
    if not begun.any():
        return empty
    g = pd.DataFrame({"rank": rank[begun], "step": step[begun], "t": t[begun], "te": te[begun]}
                     ).groupby(["rank", "step"])
    out = pd.concat([g["t"].min().rename("start_ns"), g["te"].max().rename("end_ns")], axis=1).reset_index()
    return out.astype({"start_ns": "Int64", "end_ns": "Int64"}).sort_values(["rank", "step"]).reset_index(drop=True)


def unfinished_steps(trace: Any, rank: int, window: tuple[int, int] | None,
                     begun: pd.DataFrame | None = None) -> pd.DataFrame:
    """step, start_ns (absolute: the earliest record of the step): the steps in `window` that `rank` has
    records of but no step record for, by step (module docstring); `begun`: steps_begun(trace) if known."""
    b = steps_begun(trace) if begun is None else begun
    b = b[(b["rank"] == rank).to_numpy(bool) & _in_window(b["step"], window)]
    return b[["step", "start_ns"]].reset_index(drop=True)


def steps_without_end(trace: Any, begun: pd.DataFrame | None = None) -> dict[int, int]:
    """Step → the number of ranks with records of it but no step record of it (`begun`: steps_begun(trace)
    if known)."""
    b = steps_begun(trace) if begun is None else begun
    return {int(k): int(n) for k, n in b.groupby("step")["rank"].nunique().items()}
