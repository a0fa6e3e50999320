"""Which steps each rank's records cover, and the ranks whose records cover fewer steps than the others'.

A rank's records can stop early while the others' go on: its events.jsonl was cut short (a copy, a full
disk, a torn file), a profiler trace holds fewer steps, or the rank crashed. Every per-rank figure of the
report is then over that rank's own steps, and every mean over ranks (a label's `count_per_rank`,
`bytes_per_rank`, `exposed_ms`) averages ranks over different steps: a rank with half its steps missing
looks half as exposed. The figures are left as they are — leaving the full ranks' later steps out would
hide what was recorded, and `--steps` already compares every rank over the same steps — and
`coverage_notes` says which ranks are short, what they cover, and which `--steps` gives figures over the
steps every rank has (docs/analysis.md, "Ranks whose records cover fewer steps").

Invariant: a pure function of the steps frame and the ranks present; reads no file.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from commscope.util.ranges import int_ranges

GROUPS_NAMED = 3  # coverages named in the note; the rest are counted, so the note stays a few lines at any scale


@dataclass
class Coverage:
    """The steps of `steps` (all ranks, step >= 0) and, per rank present, the steps its records hold."""
    steps: list[int]
    by_rank: dict[int, list[int]]

    def short(self) -> dict[tuple[int, ...], list[int]]:
        """The ranks whose records miss some step another rank has, grouped by what they cover (steps →
        ranks), fewest steps first; {} when every rank has every step or no rank has any."""
        if not self.steps:
            return {}
        every = set(self.steps)
        out: dict[tuple[int, ...], list[int]] = {}
        for r, s in sorted(self.by_rank.items()):
            if set(s) != every:
                out.setdefault(tuple(s), []).append(r)
        return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))

    def common(self) -> list[int]:
        """The steps every rank present has."""
        sets = [set(s) for s in self.by_rank.values()]
        return sorted(set.intersection(*sets)) if sets else []


def coverage(steps: pd.DataFrame, ranks) -> Coverage:
    """Per rank of `ranks`, the steps (>= 0) of `steps` (the trace's `steps` frame) it has a row for."""
    by_rank: dict[int, list[int]] = {int(r): [] for r in ranks}
    if len(steps):
        s = steps[pd.to_numeric(steps["step"], errors="coerce") >= 0]
        for r, g in s.groupby(s["rank"].astype(int))["step"]:
            if int(r) in by_rank:
                by_rank[int(r)] = sorted({int(x) for x in g})
    every = sorted({x for s in by_rank.values() for x in s})
    return Coverage(every, by_rank)


def _steps_text(steps: list[int]) -> str:
    if not steps:
        return "no step"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {int_ranges(steps, most=8)}"


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}'s" if len(ranks) == 1 else f"ranks {int_ranges(ranks, most=8)}'"


def coverage_notes(steps: pd.DataFrame, ranks) -> list[str]:
    """One sentence, or none: the ranks whose records cover fewer steps than the others' (by coverage()),
    what each covers and how many steps that is, what that does to the per-rank figures and their means,
    and the `--steps` that compares every rank over the same steps when those steps are one range."""
    cov = coverage(steps, ranks)
    short = cov.short()
    if not short:
        return []
    named = list(short.items())[:GROUPS_NAMED]
    parts = [f"{_ranks_text(rs)} records cover {_steps_text(list(s))}{' only' if s else ''} ({len(s)} of "
             f"{len(cov.steps)})"
             for s, rs in named]
    rest = [r for _, rs in list(short.items())[GROUPS_NAMED:] for r in rs]
    if rest:
        parts.append(f"{len(rest)} more ranks' fewer steps too")
    full = [r for r in cov.by_rank if not any(r in rs for rs in short.values())]
    whole = (f"the other ranks' records cover {_steps_text(cov.steps)}" if full
             else f"the ranks together cover {_steps_text(cov.steps)}")
    common = cov.common()
    if common and common == list(range(common[0], common[-1] + 1)):
        fix = (f" `--steps {common[0]}:{common[-1] + 1}` gives figures over the steps every rank has "
               f"({_steps_text(common)}).")
    elif common:
        fix = f" The steps every rank has ({_steps_text(common)}) are not one range: no single `--steps` gives them."
    else:
        fix = " No step is held by every rank."
    text = "; ".join(parts)
    return [f"{text[0].upper()}{text[1:]}; {whole}. A rank's own figures (its step rows, its exposed time per "
            "label) count only the steps its records hold, and each label's means over ranks (count, bytes and "
            "exposed time per rank) average ranks over different steps: a rank with fewer steps shows less "
            f"communication and less exposed time for that reason alone.{fix}"]
