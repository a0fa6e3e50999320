"""`Diagnosis`: the doctor's verdict on a run — which of VERDICTS, who, where, and the evidence — as every
rule of commscope.analyze.doctor (and of its straggler rule, analyze.doctor_straggler) returns it and the
renderers (reports/doctor_terminal.py, reports/doctor_section.py) print it. A plain record: it holds
what the rules found and computes nothing."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from numbers import Integral
from typing import Any

import pandas as pd

from commscope.util.ranges import int_ranges

VERDICTS = ("ok", "crash", "hang", "straggler", "desync", "interrupted", "insufficient")


@dataclass
class Diagnosis:
    verdict: str
    culprit_ranks: list[int] = field(default_factory=list)
    label: str | None = None
    step: int | None = None
    sequence: int | None = None
    group: str | None = None
    summary: str = ""
    evidence: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    second_opinion: dict | None = None  # the Flight Recorder's own verdict, when dumps exist
    # verdicts that hold beside this one: a straggler beside a desync (analyze.doctor: also_straggler)
    also: list[dict] = field(default_factory=list)
    confidence: str | None = None  # straggler: high | medium | low (docs/faults.md)
    details: dict | None = None    # straggler, ok: thresholds, judged steps, persistence, the instances
    problems: list[str] = field(default_factory=list)  # analyze.problems.loading_problems, as `report` lists them
    run_reports: list[str] = field(default_factory=list)  # analyze.problems.run_reports, as `report` lists them

    def to_json(self) -> dict:
        return asdict(self)


def iso_ns(ns: Any) -> int | None:
    """A time as the evidence holds it: integer ns, None where unknown."""
    return None if ns is None or pd.isna(ns) else int(ns)


def ranks_text(ranks: list[int]) -> str:
    """Ranks as the verdicts name them: "1,3", consecutive ones as a range ("0-899,901-1023") and at most
    16 runs, so a verdict stays one readable line at any world size."""
    return int_ranges(ranks, most=16)


def evidence_tables(evidence: list[dict]) -> tuple[list[list[dict]], int | None]:
    """A verdict's evidence as a page shows it: rows of the same fields together (a hang's culprits, which
    never launched the collective, apart from the ranks waiting in it, so no table is half empty), in the
    order the rows come, and every `*_ns` time (absolute ns on the trace's clock) as `*_ms` since the
    earliest of them: epoch nanoseconds read as nothing. A lone time (one row, one time) would read 0 since
    itself: its column is left out (doctor --json has it). Returns the tables and that origin (None: no time
    shown)."""
    def timed(k: str, v: Any) -> bool:
        return k.endswith("_ns") and isinstance(v, Integral) and not isinstance(v, bool)

    times = [int(v) for e in evidence for k, v in e.items() if timed(k, v)]
    if len(times) == 1:
        evidence = [{k: v for k, v in e.items() if not k.endswith("_ns")} for e in evidence]
        times = []
    origin = min(times) if times else None
    groups: dict[tuple, list[dict]] = {}
    for e in evidence:
        # a key is renamed only with its value converted; a time unknown (None) reads "–" under either name
        row = {(k[:-3] + "_ms" if timed(k, v) or (k.endswith("_ns") and v is None) else k):
               (round((int(v) - origin) / 1e6, 3) if timed(k, v) else v) for k, v in e.items()}
        groups.setdefault(tuple(row), []).append(row)
    return list(groups.values()), origin

