"""Host gaps between a traced run's steps, and (with --stacks) where the host's main thread was in them.

Why: a traced run synchronizes at every step end, so whatever the host does between the end of step s
and the first launch of step s+1 leaves the GPU idle; this prints, per run directory, the median step
period (progress.jsonl, steps ≥ 1), the gaps between consecutive step records of rank 0 and, given the
stack samples of bench/host_probe, the most frequent stacks inside the longest gaps. The gaps are
commscope.analyze.step_gaps's (the report's step_boundaries), from step 2 on.

Run: python bench/step_gaps.py RUN [RUN ...] [--stacks PROBE_OUT] [--top 5]
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import statistics

import benchlib  # noqa: F401  (puts the repo on sys.path)
import pandas as pd

from commscope.analyze.step_gaps import step_gaps
from commscope.load import load_path
from commscope.rundir.schema import EVENTS, PROGRESS, rank_dir_name


def periods_ms(run: str) -> list[float]:
    """The trainer's own step periods (progress.jsonl, steps >= 1)."""
    prog = [json.loads(line) for line in open(os.path.join(run, PROGRESS))]
    return [r["step_ms"] for r in prog if r.get("event") == "step" and r["step"] >= 1]


def rank0_gaps(run: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rank 0's steps, its commscope.analyze.step_gaps rows from step 2 on: the gap before step 1 follows
    the compiling step 0), or two empty frames for an untraced run."""
    if not os.path.exists(os.path.join(run, rank_dir_name(0), EVENTS)):
        return pd.DataFrame(), pd.DataFrame(columns=["step", "gap_ns"])
    trace = load_path(run)
    g = step_gaps(trace)
    steps = trace.steps[trace.steps["rank"] == 0].set_index("step")
    return steps, g[(g["rank"] == 0) & (g["step"] >= 2)].set_index("step")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--stacks", help="bench/host_probe's PROBE_OUT folder")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args(argv)
    samples = []
    for path in glob.glob(os.path.join(a.stacks, "stacks_*.txt")) if a.stacks else []:
        samples += [(int(t), s) for t, s in (line.rstrip("\n").split(" ", 1) for line in open(path))]
    for run in a.runs:
        periods = periods_ms(run)
        steps, g = rank0_gaps(run)
        gap_ms = g["gap_ns"] / 1e6
        line = f"{run}: step period median {statistics.median(periods):.1f} ms, mean {statistics.mean(periods):.1f}, max {max(periods):.1f}"
        if len(g):
            line += f"; gaps between steps median {gap_ms.median():.2f} ms, max {gap_ms.max():.2f}"
        print(line)
        for s in gap_ms.sort_values(ascending=False, kind="stable").index[:a.top if samples else 0]:
            lo, hi = int(steps.loc[s - 1, "end_ns"]), int(steps.loc[s, "start_ns"])
            where = collections.Counter(st.split(" < ")[0] for t, st in samples if lo <= t <= hi)
            print(f"  gap before step {s}: {gap_ms[s]:.1f} ms; main thread: {where.most_common(3)}")


if __name__ == "__main__":
    main()
