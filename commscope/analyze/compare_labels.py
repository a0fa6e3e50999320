"""Per-label exposed communication and step time of commscope run groups, with Welch t confidence intervals.

`run_samples(trace)` takes one loaded run's samples; `compare_labels(groups, names)` compares groups of them
and returns one row per (candidate, label); reports.compare_terminal renders it. The caller loads the runs
(commscope.commands.compare, with commscope.load.load_path): nothing here reads a file.

For every run (collectives scored by commscope.analyze.exposure.collective_table) one sample per step is
taken:
- `step_ms`: the step's duration averaged over ranks;
- `exposed_ms` of a label: the label's attributed exposed communication time in that step (its own
  exposed time plus the waits of later collectives queued behind it: `attributed_exposed_ms`,
  docs/analysis.md), summed over the label's collectives on a rank and averaged over ranks (0 when the
  label has none in that step).
- `boundary_ms` (pseudo-label BOUNDARY_LABEL): the host time at the step's start boundary, the gap
  since the previous step plus the delay to its first compute (commscope.analyze.step_gaps), averaged
  over ranks: where the device idles after a step-end sync, e.g. while the next batch is made.
- placement (pseudo-label `<label> (start − backward end)`, metric `start_vs_backward_end_ms`): where the
  label's collectives start relative to the end of the step's backward pass (commscope.analyze.placement;
  negative: inside it), mean over its collectives in the step, averaged over ranks. Only steps with a
  known end of backward give samples; a run without them gives none (no zeros are made up).
The first step of a run is dropped when there are more (warm-up, allocator, autotuning); it has no
boundary sample anyway. Steps of the profiler window and the one after it (the trace's export,
step_gaps.profiler_steps, the steps the report's headline leaves out) give no sample of any kind: the
profiler's start-up and export are host time of the profiler's (`--profile 2:4` on the tiny preset: step 2
~1,000 ms against ~80 ms, which made a profiled run's (step time) +190 ms against an unprofiled one),
unless they are every step of the run. The frame's `attrs["notes"]` names, per run, the steps left out.

Confidence intervals: the difference of means (candidate − baseline) with Welch's t interval
(scipy.stats.ttest_ind, unequal variances) over runs (each run's mean over its steps: steps within a run
are not independent). A t interval is as wide as a handful of runs warrants; a percentile bootstrap of five
per-run means is narrower than that and called noise a change. The rows of one candidate answer many
questions at once: `(step time)` is the comparison's question and gets a CI_LEVEL interval; the other rows
(the step boundary, every label, every placement) are one family whose intervals are simultaneous at
CI_LEVEL (Bonferroni: each at 1 − (1 − CI_LEVEL)/m for m rows), so that a comparison of two groups of
identical runs reads "unchanged" on every row but one time in twenty, not once per twenty rows. Each row
keeps its level (`ci_level`), and `attrs["ci"]` says it in words. A CI needs at least MIN_RUNS runs on each
side; with fewer it is NaN and the verdict "too few runs" (the means and Δ are still given). A label is
"better" when the whole CI is below 0, "worse" when it is above 0, else "unchanged"; a placement row is
"earlier" / "later" / "unchanged" by the same rule (earlier is not better by itself: the label's exposed_ms
row says whether moving helped).
A label that no run of one side has (added, removed, or renamed, which reads as one of each) shows 0 ms on
that side, as a run idle on a label does, but its difference is no verdict on speed: no CI, the verdict
ONLY_BASE / ONLY_CAND, not one of the m rows, and a note names such labels. A placement row has no 0: one
placed on one side only gets no row, and a note names it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze.compare import MIN_RUNS, quiet_test, undefined_test  # one home for the rules
from commscope.errors import UserError

CI_LEVEL = 0.95
TOO_FEW = "too few runs"
ONLY_BASE, ONLY_CAND = "only in baseline", "only in candidate"  # a label one side never has: no verdict
STEP_LABEL = "(step time)"
BOUNDARY_LABEL = "(step boundary)"
METRICS = {STEP_LABEL: "step_ms", BOUNDARY_LABEL: "boundary_ms"}  # pseudo-labels; the rest are exposed_ms
PLACEMENT_SUFFIX = " (start − backward end)"
PLACEMENT_METRIC = "start_vs_backward_end_ms"


def metric_of(label: str) -> str:
    if label.endswith(PLACEMENT_SUFFIX):
        return PLACEMENT_METRIC
    return METRICS.get(label, "exposed_ms")


def run_samples(trace: Any) -> pd.DataFrame:
    """One loaded run (a commscope.load.Trace) → rows (step, label, ms): per-step exposed ms per label plus
    STEP_LABEL and BOUNDARY_LABEL rows. `attrs`: `left_out` (the profiler's steps, which give no sample)
    and `run` (the run's folder name, by which compare_labels' notes name it)."""
    from commscope.analyze.exposure import collective_table
    from commscope.analyze.placement import placement
    from commscope.analyze.step_gaps import left_out, profiler_steps, step_gaps

    steps = trace.steps
    if steps.empty:
        raise UserError(f"{trace.path}: no step records to compare per label (a run of --trace off records none)")
    prof = left_out(profiler_steps(trace), steps["step"])
    step_ms = ((steps["end_ns"] - steps["start_ns"]) / 1e6).groupby(steps["step"]).mean()
    table = collective_table(trace)
    coll = table[table["step"] >= 0]
    n_ranks = max(len(trace.ranks), 1)
    # attributed: a label's own exposed time plus the waits of later collectives queued behind it, so that a
    # wait is charged to the collective it was spent on (a rank late to `ve0` shows on ve0, not on the label
    # waited on next); per rank the labels still add up to its exposed time (exposure.queue_split)
    attributed = coll["own_exposed_ns"] + coll["queue_charged_ns"].fillna(0.0)
    exposed = (attributed.groupby([coll["step"], coll["label"]]).sum() / 1e6 / n_ranks).rename("ms").reset_index()
    grid = pd.MultiIndex.from_product([step_ms.index, sorted(coll["label"].dropna().unique())],
                                      names=["step", "label"])
    exposed = exposed.set_index(["step", "label"]).reindex(grid, fill_value=0.0).reset_index()
    gaps = step_gaps(trace)
    gaps = gaps[gaps["excluded"].isna()]  # the profiler window's and its export's boundaries are the profiler's
    boundary = ((gaps["gap_ns"] + gaps["start_delay_ns"].fillna(0)) / 1e6).groupby(gaps["step"]).mean()
    place = placement(trace, table).dropna(subset=["start_vs_backward_end_ms"])
    place = (place.groupby(["step", "label", "rank"])["start_vs_backward_end_ms"].mean()
             .groupby(level=["step", "label"]).mean().rename("ms").reset_index())
    place["label"] = place["label"].astype(str) + PLACEMENT_SUFFIX
    out = pd.concat([exposed, pd.DataFrame({"step": step_ms.index, "label": STEP_LABEL, "ms": step_ms.values}),
                     pd.DataFrame({"step": boundary.index, "label": BOUNDARY_LABEL, "ms": boundary.values}), place])
    out = out[~out["step"].astype(int).isin(list(prof))]  # the profiler's time (module docstring)
    if out["step"].nunique() > 1:
        out = out[out["step"] != out["step"].min()]
    out = out.reset_index(drop=True)
    out.attrs["left_out"] = prof
    out.attrs["run"] = Path(str(trace.path)).name
    return out


def _samples(group: list[pd.DataFrame], label: str) -> np.ndarray:
    """One value per run: its mean over steps of the label's ms."""
    per_run = [df.loc[df["label"] == label, "ms"].to_numpy(np.float64) for df in group]
    if metric_of(label) == PLACEMENT_METRIC:  # no collective of the label: no position, not position 0
        per_run = [x for x in per_run if len(x)]
        return np.array([x.mean() for x in per_run])
    # a label a run never used: that run spent 0 exposed ms on it, one value per step
    per_run = [x if len(x) else np.zeros(max(df["step"].nunique(), 1)) for x, df in zip(per_run, group)]
    return np.array([x.mean() for x in per_run])


def _present(group: list[pd.DataFrame], label: str) -> bool:
    return any((df["label"] == label).any() for df in group)


def _ci(cand: np.ndarray, base: np.ndarray, level: float) -> tuple[float, float]:
    if len(cand) < MIN_RUNS or len(base) < MIN_RUNS:
        return float("nan"), float("nan")
    if undefined_test(cand.tolist(), base.tolist()):  # no spread beyond float rounding: the difference is exact
        d = float(cand.mean() - base.mean())
        return d, d
    from scipy import stats  # lazily: see commscope.analyze.compare._stats

    ci = quiet_test(lambda: stats.ttest_ind(cand, base, equal_var=False).confidence_interval(confidence_level=level))
    return float(ci.low), float(ci.high)


def compare_labels(groups: list[list[pd.DataFrame]], names: list[str]) -> pd.DataFrame:
    """Rows per (candidate, label): base/cand means, delta, CI and its level, the unit CIs are over, verdict.
    `groups`: per group (the baseline first, then the candidates, named `names`), its runs' run_samples."""
    from commscope.analyze.step_gaps import profiler_steps_text

    def run_name(name: str, df: pd.DataFrame) -> str:
        run = df.attrs.get("run", "")
        return name if run == name else f"{name}, run {run}"

    notes = [f"{run_name(name, df)}: steps {profiler_steps_text(df.attrs['left_out'])} give no sample (the "
             "profiler's start-up and trace export)"
             for name, dfs in zip(names, groups) for df in dfs if df.attrs.get("left_out")]
    all_labels = {lab for g in groups for df in g for lab in df["label"].unique()} - set(METRICS)
    labels = sorted(lab for lab in all_labels if metric_of(lab) != PLACEMENT_METRIC)
    placed = sorted(lab for lab in all_labels if metric_of(lab) == PLACEMENT_METRIC)
    rows = []
    base = groups[0]
    family = 0
    for name, cand in zip(names[1:], groups[1:]):
        sampled = [(label, _samples(base, label), _samples(cand, label))
                   for label in [STEP_LABEL, BOUNDARY_LABEL, *labels, *placed]]
        # placement on one side only: no row (a position is no 0 ms), but the note below names it
        placed_one_side = [label for label, b, c in sampled if bool(len(b)) != bool(len(c))]
        sampled = [(label, b, c) for label, b, c in sampled if len(b) and len(c)]
        present = {label: (_present(base, label), _present(cand, label)) for label in labels}
        one_side = {label: in_base for label, (in_base, in_cand) in present.items() if in_base != in_cand}
        if one_side:
            said = "; ".join(f"{side}: {', '.join(lab for lab, b in one_side.items() if b == in_base)}"
                             for side, in_base in ((f"only in {names[0]}", True), (f"only in {name}", False))
                             if in_base in one_side.values())
            notes.append(f"{name}: labels one side never has, 0 ms there and no verdict (added or removed; a "
                         f"renamed label reads as one of each): {said}")
        if placed_one_side:
            notes.append(f"{name}: placement rows left out, placed on one side only: {', '.join(placed_one_side)}")
        m = sum(label != STEP_LABEL and label not in one_side for label, _, _ in sampled)
        family = max(family, m)
        for label, b, c in sampled:
            if label in one_side:  # no verdict on speed: no interval
                level, lo, hi = np.nan, np.nan, np.nan
            else:
                level = CI_LEVEL if label == STEP_LABEL else 1 - (1 - CI_LEVEL) / m
                lo, hi = _ci(c, b, level)
            metric = metric_of(label)
            down, up = ("earlier", "later") if metric == PLACEMENT_METRIC else ("better", "worse")
            verdict = ((ONLY_BASE if one_side[label] else ONLY_CAND) if label in one_side else
                       TOO_FEW if np.isnan(lo) else down if hi < 0 else up if lo > 0 else "unchanged")
            rows.append({"candidate": name, "label": label, "metric": metric,
                         "base_ms": float(b.mean()), "cand_ms": float(c.mean()),
                         "delta_ms": float(c.mean() - b.mean()), "ci_low": lo, "ci_high": hi, "ci_level": level,
                         "unit": "runs", "n_base": len(b), "n_cand": len(c),
                         "verdict": verdict})
    out = pd.DataFrame(rows)
    out.attrs["notes"] = notes  # for the renderer to print under the table
    # what the CI column means, for the renderer to print under the table too
    out.attrs["ci"] = (f"CI: Welch's t interval over runs, {CI_LEVEL:.0%} for (step time)" + (
        f"; the other rows of a candidate are {CI_LEVEL:.0%} all together (each row's interval at "
        f"{1 - (1 - CI_LEVEL) / family:.2%} for {family} rows, Bonferroni), so identical groups read unchanged "
        "on every row in 19 comparisons of 20" if family else ""))
    return out
