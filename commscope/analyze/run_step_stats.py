"""The step-time figures `commscope run` prints under its summary table, from the run's summary.json.

`step_stats(summary, profile)`: the mean step over rank 0's steps (summary.json's `step_times_ms`) less
step 0 (the warm-up) and the profiler's steps of `profile` (--profile: its window and the step after it,
the trace's export: step_gaps.window_steps, the same steps the report's headline leaves out), left out
only while others remain (step_gaps.left_out, the report's rule); the tokens/s at that pace;
`profiler_steps`, the steps left out with why; and, from three steps on, the median step and the
throughput at its pace (a few slow steps, a GPU clock dip or a checkpoint, move the mean; the median says
what a step takes).

Invariant: a pure function of the summary document and the --profile text; an unparsable --profile
leaves nothing out (the launcher refuses one before a job starts).
"""
from __future__ import annotations

import statistics

from commscope.analyze.step_gaps import left_out, window_steps
from commscope.errors import UserError
from commscope.util.step_range import parse_step_range


def step_stats(summary: dict, profile: str | None = None) -> dict:
    """The figures the module docstring lists; {} when the run has no step."""
    times, tps = summary["step_times_ms"], summary["tokens_per_s"]
    if not times:
        return {}
    steps = list(range(len(times)))[1:] or [0]  # progress records hold steps 0, 1, ... in order
    try:
        prof = window_steps(parse_step_range(profile, "--profile", closed=True))
    except UserError:  # the launcher checked --profile already; an odd one leaves nothing out
        prof = {}
    left = left_out(prof, steps)  # none where every step is the profiler's: nothing would be left to average
    steps = [s for s in steps if s not in left]
    kept = [times[s] for s in steps]
    stats = {"mean_ms": sum(kept) / len(kept), "excludes_step0": len(times) > 1, "profiler_steps": left}
    if tps:
        # summary.json's tokens_per_s is over every step but step 0 (RunProgress.tokens_per_s): the tokens
        # of one step, then the pace of the steps kept here
        tail = times[1:] or times
        tokens = tps * sum(tail) / len(tail) / 1e3
        stats["tokens_per_s"] = tokens / (stats["mean_ms"] / 1e3)
        if len(times) > 2:
            stats.update(median_ms=statistics.median(kept),
                         median_tokens_per_s=tokens / (statistics.median(kept) / 1e3))
    return stats
