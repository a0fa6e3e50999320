"""Which ranks' Kineto traces can be lined up, so that one (group, seq) names one collective on every rank.

kineto_comms numbers each rank's collectives from the first one launched inside its profiling window, which
lines the ranks up where their windows start at the same step, as one job's shared profiler schedule has
them. The ProfilerStep annotations say where they do not, and such a rank's collectives are left unpaired,
each group one of its own on that rank (`<group> (unpaired, rank R)`, as loader._pair marks them), so that
no cross-rank analysis (desync, hang by absence, skew, stragglers, bandwidth) matches them:
- a rank whose window does not hold the step most ranks hold (another job's trace among this one's, a rank
  profiled at other steps);
- a rank whose window starts at another step than most ranks' do. Numbering it from the first step all
  hold would rest on that step's first launch, which a window's first step often misses (its collectives
  launched before the profiler started show only as kernels): a rank numbered a few places off reads as a
  desync. What cannot be lined up is said, not guessed.

Ranks without ProfilerStep annotations give nothing to line up by and keep their numbers. Each rank left
unpaired is said in `problems`, with the steps each rank holds.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from commscope.load.frames import UNPAIRED_MARK
from commscope.util.ranges import int_ranges


def line_up(coll: pd.DataFrame, steps: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """`coll` with the collectives of every rank whose window cannot be lined up with the others' left
    unpaired (module docstring); `coll` itself where every window lines up. Never changes the caller's
    frame."""
    if not len(coll) or not len(steps):
        return coll
    held: dict[int, set[int]] = {}
    for r, s in zip(steps["rank"].to_numpy(), pd.to_numeric(steps["step"], errors="coerce").to_numpy()):
        if s >= 0:
            held.setdefault(int(r), set()).add(int(s))
    if len(held) < 2:
        return coll
    counts = Counter(s for ss in held.values() for s in ss)
    anchor = _most(counts)  # the step the most ranks hold
    apart = sorted(r for r, ss in held.items() if anchor not in ss)
    kept = {r: ss for r, ss in held.items() if anchor in ss}
    starts = {r: min(ss) for r, ss in kept.items()}
    start = _most(Counter(starts.values()))  # where most windows start
    late = sorted(r for r, first in starts.items() if first != start)
    if not apart and not late:
        return coll
    coll = coll.copy()
    rank = coll["rank"].to_numpy()
    group = coll["group"].astype(object).to_numpy(copy=True)
    out = np.isin(rank, apart + late) & pd.notna(group)
    group[out] = [f"{g}{UNPAIRED_MARK}{r})" for g, r in zip(group[out], rank[out])]
    coll["group"] = group
    lined = sorted(r for r in kept if r not in late)
    if apart:
        problems.append(f"rank(s) {int_ranges(apart, sep=', ', most=8)} ({_held_text(held, apart)}) do not hold step "
                        f"{anchor}, which the windows of rank(s) {int_ranges(sorted(kept), sep=', ', most=8)} share: their "
                        f"collectives cannot be lined up with the others' and are left unpaired (traces of another "
                        f"job, or profiled at other steps)")
    if late:
        problems.append(f"rank(s) {int_ranges(late, sep=', ', most=8)} ({_held_text(held, late)}) start their profiling "
                        f"window at another step than rank(s) {int_ranges(lined, sep=', ', most=8)} (step {start}): their "
                        "collectives' sequence numbers cannot be lined up with the others' and are left unpaired")
    return coll


def _most(counts: Counter) -> int:
    """The value counted most; on a tie the smallest."""
    return max(counts, key=lambda s: (counts[s], -s))


def _held_text(held: dict[int, set[int]], ranks: list[int]) -> str:
    """'rank 7: steps 1009; ranks 0-6: steps 10-13', ranks grouped by the steps they hold."""
    alike: dict[tuple[int, ...], list[int]] = {}
    for r in ranks:
        alike.setdefault(tuple(sorted(held[r])), []).append(r)
    return "; ".join(f"rank{'s' if len(rs) > 1 else ''} {int_ranges(rs, sep=', ', most=8)}: "
                     f"step{'s' if len(ss) > 1 else ''} {int_ranges(list(ss), sep=', ', most=8)}"
                     for ss, rs in list(alike.items())[:4]) + ("; …" if len(alike) > 4 else "")
