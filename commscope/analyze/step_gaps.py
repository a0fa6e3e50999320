"""Time outside the steps and before each step's first compute, per rank: host work the device may wait for.

`step_gaps(trace)`: one row per (rank, step) that has a previous step on the same rank:
- `gap_ns`: end of step s-1 → start of step s, time in no step at all, which step_breakdown never sees;
- `start_delay_ns`: start of step s → its first compute interval (NaN if the step has none): host work
  before the step's first launch, such as making or copying the batch;
- `period_ns`: end of step s-1 → end of step s (the step's share of the run's wall time), and `host_pct`
  = 100 · (gap + start delay) / period;
- `excluded`: why the step is left out of `gap_summary` (None: it counts): "profiler window" (the
  profiler starting, recording and stopping: seconds of host time in the window's first step) or
  "profiler export" (the step after the window, whose gap holds the trace being written), the
  doctor's reasons for the same steps (waiting.noise_steps).
`gap_summary(gaps)`: per rank, over its steps not `excluded`: `steps`, `gap_median_ms`, `gap_max_ms`,
`start_delay_median_ms`, and `host_pct`, total gap + start delay over total period (NaN where no step
is left); `excluded_steps`, how many were left out.

Why: a recorder resolves its CUDA events at every step end (commscope's trainer also reads the loss
there), so from then until the next launch the device has nothing queued: whatever the host does in
between, be it making the next batch, logging or checkpointing, is device idle time. On an H200 the
reference trainer making its next batch there costs a 3.2-3.6 ms median gap per 87 ms step and 14 ms
in a third of the steps (docs/benchmarks.md), so it makes the batch while the step runs.

On a GPU profiler trace the steps are device windows (load.device_steps: from the first to the last
device work a ProfilerStep launched), and between two of them the device may run nothing: the host had not
launched the next step's first kernel yet (a loss read, the data loader, Python between steps). There
`gap_ns` is that idle time, the part of the interval between the windows that no kernel, memcpy or memset
covers (windows of two steps may overlap across streams: then 0), measured only between two device
windows; `start_delay_ns` is NaN (a window starts with the step's first device work, by definition) and
`host_pct` is the gap's share of the period. The host's `ProfilerStep` ranges follow each other without a
gap, so a CPU-only trace has no rows.

Invariants: step times are the steps frame's (the host's records on run directories, device windows on
GPU traces); compute is exposure.compute_sets (compute regions minus blocked waits) and device activity the
kernels frame, on the same common axis; a rank's first step has no row (nothing before it to measure
from), and on GPU traces nor has a step whose previous one the rank did not record.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze import exposure
from commscope.analyze import intervals as iv
from commscope.analyze.waiting import profiler_window
from commscope.util.ranges import int_ranges
from commscope.load.frames import Trace, origin_ns, rel

GAP_COLS = ["rank", "step", "gap_ns", "start_delay_ns", "period_ns", "host_pct", "excluded"]
SUMMARY_COLS = ["rank", "steps", "gap_median_ms", "gap_max_ms", "start_delay_median_ms", "host_pct",
                "excluded_steps"]
PROFILER_WINDOW, PROFILER_EXPORT = "profiler window", "profiler export"


def profiler_steps(trace: Trace) -> dict[int, str]:
    """The steps whose time is the profiler's (module docstring, `excluded`), with why: the one definition
    the step boundaries, the report's headline aggregates (summary `profiler_steps`) and compare's
    per-step samples leave out."""
    return window_steps(profiler_window(trace))


def window_steps(win: tuple[int, int] | None) -> dict[int, str]:
    """The profiler's steps of a --profile window [first, stop): the window's own and the step after it
    (the trace's export), with why; none without a window. `commscope run`'s summary leaves out the same
    steps, from its --profile."""
    if win is None:
        return {}
    first, stop = win
    return {**{s: PROFILER_WINDOW for s in range(first, stop)}, stop: PROFILER_EXPORT}


def left_out(prof: dict[int, str], present) -> dict[int, str]:
    """The profiler's steps (`prof`, profiler_steps) among the `present` ones that aggregates leave out,
    with why; none when they are every present step (nothing would be left to average)."""
    present = {int(s) for s in present}
    if not present or present <= set(prof):
        return {}
    return {s: why for s, why in sorted(prof.items()) if s in present}


def step_list(steps) -> str:
    """Steps as runs of consecutive numbers, as the page writes them: [2, 3, 4, 7] → "2–4, 7"."""
    return int_ranges({int(v) for v in steps}, sep=", ", dash="–")


def profiler_steps_text(excluded: dict[int, str]) -> str:
    """profiler_steps() in words: "2–3 (profiler window) and 4 (profiler export)"."""
    parts = []
    for why in (PROFILER_WINDOW, PROFILER_EXPORT):
        steps = [s for s, w in excluded.items() if w == why]
        if steps:
            parts.append(f"{step_list(steps)} ({why})")
    return " and ".join(parts)


def _first_compute(qs: np.ndarray, qe: np.ndarray, comp: iv.Intervals) -> np.ndarray:
    """For each window [qs, qe), the first time in it covered by `comp` (normalized), NaN if none."""
    s, e = comp
    out = np.full(len(qs), np.nan)
    if not len(s):
        return out
    i = np.searchsorted(e, qs, side="right")  # the first interval ending after the window starts
    ok = i < len(s)
    first = np.where(ok, np.maximum(s[np.minimum(i, len(s) - 1)], qs), np.nan)
    return np.where(ok & (first < qe), first, out)


def step_gaps(trace: Trace, comp: dict[int, iv.Intervals] | None = None) -> pd.DataFrame:
    """`comp`: exposure.compute_sets(trace) if already computed. On profiler traces, the device idle
    between device windows (module docstring)."""
    if trace.source != "run":
        return _device_gaps(trace)
    o = origin_ns(trace)
    comp = exposure._compute_sets_rel(trace, o) if comp is None else exposure.to_rel(comp, o)
    st = trace.steps.sort_values(["rank", "step"], kind="stable")
    s_rank, s_step = st["rank"].to_numpy(), st["step"].to_numpy()
    s_start, s_end = rel(st["start_ns"], o), rel(st["end_ns"], o)
    noise = profiler_steps(trace)
    parts = []
    step_rows = iv.rows_by_rank(s_rank)
    for rank in trace.ranks:
        m = step_rows.get(rank, iv.NO_ROWS)
        if len(m) < 2:
            continue
        qs, qe, steps = s_start[m], s_end[m], s_step[m]
        first = _first_compute(qs, qe, comp.get(rank, iv.empty()))
        gap, period = qs[1:] - qe[:-1], qe[1:] - qe[:-1]
        delay = first[1:] - qs[1:]
        with np.errstate(invalid="ignore", divide="ignore"):
            host = 100.0 * (gap + np.nan_to_num(delay)) / period
        parts.append(pd.DataFrame({"rank": rank, "step": steps[1:], "gap_ns": gap, "start_delay_ns": delay,
                                   "period_ns": period, "host_pct": host,
                                   "excluded": pd.Series([noise.get(int(x)) for x in steps[1:]], dtype=object)}))
    if not parts:
        return pd.DataFrame(columns=GAP_COLS)
    return pd.concat(parts, ignore_index=True)[GAP_COLS]


def _device_gaps(trace: Trace) -> pd.DataFrame:
    """step_gaps' rows of a profiler trace: between consecutive steps of a rank that both have a device
    window, the time between them that no device activity of the rank covers."""
    st = trace.steps
    if "basis" not in st:  # a frame built without the column: host step ranges (frames' default)
        return pd.DataFrame(columns=GAP_COLS)
    st = st[(st["basis"] != "host").to_numpy(bool)].sort_values(["rank", "step"], kind="stable")
    if len(st) < 2:
        return pd.DataFrame(columns=GAP_COLS)
    o = origin_ns(trace)
    k = trace.kernels
    busy = iv.merge_by_rank(k["rank"].to_numpy(), rel(k["start_ns"], o), rel(k["end_ns"], o), trace.ranks)
    s_rank, s_step = st["rank"].to_numpy(), st["step"].to_numpy(np.int64)
    s_start, s_end = rel(st["start_ns"], o), rel(st["end_ns"], o)
    parts = []
    for rank, m in iv.rows_by_rank(s_rank).items():
        if len(m) < 2:
            continue
        nxt = np.flatnonzero(np.diff(s_step[m]) == 1)  # consecutive steps only: a missing one is no gap
        if not len(nxt):
            continue
        lo, hi = s_end[m][nxt], s_start[m][nxt + 1]
        span = np.maximum(hi - lo, 0.0)
        idle = span - iv.covered(lo, np.maximum(hi, lo), busy.get(rank, iv.empty()))
        period = s_end[m][nxt + 1] - s_end[m][nxt]
        with np.errstate(invalid="ignore", divide="ignore"):
            host = np.where(period > 0, 100.0 * idle / period, np.nan)
        parts.append(pd.DataFrame({"rank": rank, "step": s_step[m][nxt + 1], "gap_ns": idle,
                                   "start_delay_ns": np.nan, "period_ns": period, "host_pct": host,
                                   "excluded": pd.Series([None] * len(nxt), dtype=object)}))
    if not parts:
        return pd.DataFrame(columns=GAP_COLS)
    return pd.concat(parts, ignore_index=True)[GAP_COLS]


def gap_summary(gaps: pd.DataFrame) -> pd.DataFrame:
    if not len(gaps):
        return pd.DataFrame(columns=SUMMARY_COLS)
    rows = []
    for rank, every in gaps.groupby("rank", sort=True):
        g = every[every["excluded"].isna()] if "excluded" in every else every
        host = g["gap_ns"].sum() + g["start_delay_ns"].fillna(0).sum()
        period = g["period_ns"].sum()
        rows.append({"rank": int(rank), "steps": len(g), "gap_median_ms": float(g["gap_ns"].median()) / 1e6,
                     "gap_max_ms": float(g["gap_ns"].max()) / 1e6,
                     "start_delay_median_ms": float(g["start_delay_ns"].median()) / 1e6,
                     "host_pct": 100.0 * host / period if period > 0 else np.nan,
                     "excluded_steps": len(every) - len(g)})
    return pd.DataFrame(rows, columns=SUMMARY_COLS)
