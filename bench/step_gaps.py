"""Host gaps between a traced run's steps, and (with --stacks) where the host's main thread was in them.

Why: a traced run synchronizes at every step end, so whatever the host does between the end of step s
and the first launch of step s+1 leaves the GPU idle; this prints, per run directory, the median step
period (progress.jsonl, steps ≥ 1), the gaps between consecutive step records of rank 0 and, given the
stack samples of bench/host_probe, the most frequent stacks inside the longest gaps.

Run: python bench/step_gaps.py RUN [RUN ...] [--stacks PROBE_OUT] [--top 5]
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import statistics


def load(run: str) -> tuple[list[float], dict[int, dict]]:
    prog = [json.loads(line) for line in open(os.path.join(run, "progress.jsonl"))]
    periods = [r["step_ms"] for r in prog if r.get("event") == "step" and r["step"] >= 1]
    events = os.path.join(run, "rank0", "events.jsonl")
    steps = {}
    if os.path.exists(events):
        for line in open(events):
            r = json.loads(line)
            if r["kind"] == "step":
                steps[r["step"]] = r
    return periods, steps


def gaps(steps: dict[int, dict]) -> dict[int, float]:
    """ms between step s-1's end and step s's start (steps ≥ 2: step 0 → 1 includes compilation)."""
    return {s: (steps[s]["start_ns"] - steps[s - 1]["end_ns"]) / 1e6 for s in sorted(steps) if s >= 2 and s - 1 in steps}


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
        periods, steps = load(run)
        g = gaps(steps)
        line = f"{run}: step period median {statistics.median(periods):.1f} ms, mean {statistics.mean(periods):.1f}, max {max(periods):.1f}"
        if g:
            line += f"; gaps between steps median {statistics.median(g.values()):.2f} ms, max {max(g.values()):.2f}"
        print(line)
        for s in sorted(g, key=g.get, reverse=True)[:a.top if samples else 0]:
            lo, hi = steps[s - 1]["end_ns"], steps[s]["start_ns"]
            where = collections.Counter(st.split(" < ")[0] for t, st in samples if lo <= t <= hi)
            print(f"  gap before step {s}: {g[s]:.1f} ms; main thread: {where.most_common(3)}")


if __name__ == "__main__":
    main()
