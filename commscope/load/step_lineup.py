"""Lining up the profiling windows of a job's Kineto traces, so that one (group, seq) names one collective
on every rank.

kineto_comms numbers each rank's collectives from the first one launched inside its profiling window, which
lines the ranks up where their windows start at the same step, as one job's shared profiler schedule has
them. Where the ProfilerStep annotations say they do not:

- ranks whose windows hold the step most ranks hold, but start at different steps, are numbered again from
  each group's first collective in the first step all of them hold (seq 0 there on every such rank);
- a rank whose window does not hold that step (another job's trace among this one's, a rank profiled at
  other steps) cannot be lined up with the others: its collectives are left unpaired, each group one of its
  own on that rank (`<group> (unpaired, rank R)`, as loader._pair marks them), so that no cross-rank
  analysis (desync, hang by absence, skew, stragglers, bandwidth) matches them.

Ranks without ProfilerStep annotations give nothing to line up by and keep their numbers. Each change is
said in `problems`, with the steps each rank holds.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from commscope.load.frames import UNPAIRED_MARK
from commscope.util.ranges import int_ranges


def line_up(coll: pd.DataFrame, steps: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """`coll` with its sequence numbers lined up across ranks by the steps each rank's window holds
    (module docstring); `coll` itself where nothing needs it. Never changes the caller's frame."""
    if not len(coll) or not len(steps):
        return coll
    held: dict[int, set[int]] = {}
    for r, s in zip(steps["rank"].to_numpy(), pd.to_numeric(steps["step"], errors="coerce").to_numpy()):
        if s >= 0:
            held.setdefault(int(r), set()).add(int(s))
    if len(held) < 2:
        return coll
    counts = Counter(s for ss in held.values() for s in ss)
    anchor = max(counts, key=lambda s: (counts[s], -s))  # the step the most ranks hold; on a tie the earliest
    apart = sorted(r for r, ss in held.items() if anchor not in ss)
    kept = {r: ss for r, ss in held.items() if anchor in ss}
    starts = {r: min(ss) for r, ss in kept.items()}
    if not apart and len(set(starts.values())) == 1:
        return coll
    coll = coll.copy()
    rank = coll["rank"].to_numpy()
    group = coll["group"].astype(object).to_numpy(copy=True)
    if apart:
        out = np.isin(rank, apart) & pd.notna(group)
        group[out] = [f"{g}{UNPAIRED_MARK}{r})" for g, r in zip(group[out], rank[out])]
        coll["group"] = group
        problems.append(f"rank(s) {int_ranges(apart, sep=', ', most=8)} ({_held_text(held, apart)}) do not hold step "
                        f"{anchor}, which the windows of rank(s) {int_ranges(sorted(kept), sep=', ', most=8)} share: their "
                        f"collectives cannot be lined up with the others' and are left unpaired (traces of another "
                        f"job, or profiled at other steps)")
    if len(set(starts.values())) > 1:
        first = min(set.intersection(*kept.values()))
        seq = coll["seq"].to_numpy(copy=True)
        step = pd.to_numeric(coll["step"], errors="coerce").to_numpy(np.float64)
        moved = _renumber(rank, group, seq, step, list(kept), first)
        coll["seq"] = seq
        if moved:
            problems.append(f"the ranks' profiling windows start at different steps ({_held_text(kept, sorted(kept))}):"
                            f" their collectives are numbered from step {first}, the first step all of them hold")
    return coll


def _renumber(rank: np.ndarray, group: np.ndarray, seq: np.ndarray, step: np.ndarray, ranks: list[int],
              first: int) -> bool:
    """Per rank of `ranks` and group: seq 0 at the group's first collective launched (seq ≥ 0) in step
    `first` or later, in place. Whether any number moved."""
    moved = False
    for r in ranks:
        mine = rank == r
        for g in pd.unique(group[mine]):
            if pd.isna(g):
                continue
            rows = mine & (group == g)
            at = rows & (step >= first) & (seq >= 0)
            if not at.any():
                continue
            shift = int(seq[at].min())
            if shift:
                seq[rows] -= shift
                moved = True
    return moved


def _held_text(held: dict[int, set[int]], ranks: list[int]) -> str:
    """'rank 7: steps 1009; ranks 0-6: steps 10-13', ranks grouped by the steps they hold."""
    alike: dict[tuple[int, ...], list[int]] = {}
    for r in ranks:
        alike.setdefault(tuple(sorted(held[r])), []).append(r)
    return "; ".join(f"rank{'s' if len(rs) > 1 else ''} {int_ranges(rs, sep=', ', most=8)}: "
                     f"step{'s' if len(ss) > 1 else ''} {int_ranges(list(ss), sep=', ', most=8)}"
                     for ss, rs in list(alike.items())[:4]) + ("; …" if len(alike) > 4 else "")
