"""The doctor's reading of a job whose every rank a signal ended, where no summary.json says which ended
first (a script under plain torchrun or another launcher): stopped whole from outside, or one rank ended
first and the others torn down after it.

Why it needs its own rule: every status reads "terminated by signal", whatever happened. If the rank that
never launched a collective the others waited in (analyze.doctor.check_hang) was killed from outside, it is
a crash; if the whole job was stopped (a closed terminal, a preemption, `kill` of the launcher) while that
rank was stuck, the hang stands; if the job was stopped while it ran, a rank was merely a moment behind and
the job was stopped, not broken. What tells these apart is when each rank's end began (status.json
`ended_ns`: the signal's arrival, on the common time axis) and how long the waiting ranks had waited then.

- Every rank's end began within TOGETHER_NS (plus twice the clocks' alignment error) of the others: one
  signal reached the whole job. A rank that had waited in a collective at least STALL_STEPS median steps
  and STALL_MIN_NS was stuck: a hang (with the culprits check_hang found; without any where every member
  had launched it, stuck inside the collective). A shorter wait: interrupted, the job stopped while it ran.
- The culprits' ends began more than that before every other rank's: they were ended first (crash).
- Anything else, or a status without `ended_ns` (an older recorder's, or one written without an aligned
  clock): insufficient, saying why.

The bars: on this project's 2-core CPU machine (tests/integration/test_stopped_whole.py's script under
torchrun), SIGTERM to torchrun reached both ranks within 0.1-7.4 ms; SIGTERM to one rank, then torchrun's
teardown of the other, came 470-540 ms apart (the rank has to exit and the launcher's monitor to notice).

Invariants: pure functions of the trace's statuses, meta.json's clock errors, steps and launch table;
`judge_stopped` changes only a hang whose culprits, like every rank, a signal ended; `check_stopped_whole`
answers only where every rank's end began together.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, ranks_text
from commscope.load.frames import Trace

TOGETHER_NS = 50_000_000  # one signal to the whole job: ends this close together (measured: < 8 ms)
STALL_STEPS = 5           # a wait of this many median steps is no moment's lag...
STALL_MIN_NS = 1_000_000_000  # ...nor is one of a second, however short the steps


@dataclass
class _Ends:
    ended: dict[int, int]   # rank -> status.json ended_ns
    bar: int                # ns: ends closer than this began together
    spread: int             # ns: the last end's start minus the first's
    signals: str            # the signals' names, "SIGTERM"

    def together(self) -> str:
        n = len(self.ended)
        return (f"{self.signals} reached {'both' if n == 2 else f'all {n:,}'} ranks within {self.spread / 1e6:,.1f} "
                "ms (status.json ended_ns)")

    def details(self) -> dict:
        return {"ended_ns": {str(r): v for r, v in sorted(self.ended.items())}, "together_bar_ms": self.bar / 1e6,
                "spread_ms": round(self.spread / 1e6, 3)}


def _ends(trace: Trace, statuses: dict[int, dict], signals: str) -> _Ends | list[int]:
    """The ranks' end times, or the ranks whose status has none."""
    ended = {r: s.get("ended_ns") for r, s in statuses.items()}
    unknown = sorted(r for r, v in ended.items() if type(v) is not int)
    if unknown:
        return unknown
    errors = [int(((m or {}).get("clock") or {}).get("error_ns") or 0) for m in (trace.config.get("meta") or {}).values()]
    return _Ends(ended, TOGETHER_NS + 2 * max(errors, default=0), max(ended.values()) - min(ended.values()), signals)


def judge_stopped(d: Diagnosis, trace: Trace, statuses: dict[int, dict], signals: str, sources: list[str]) -> Diagnosis:
    """`d` (a hang by absence whose culprits, like every rank, a signal ended) read with the ranks' end
    times: the hang, a crash of the culprits, interrupted, or insufficient."""
    ends = _ends(trace, statuses, signals)
    if isinstance(ends, list):
        return Diagnosis("insufficient", [], sources=sources, details={"ended_ns_missing": ends}, summary=(
            f"insufficient: every rank was ended by a signal ({signals}) and no summary.json says which ended "
            f"first; rank(s) {ranks_text(ends)} wrote no ended_ns in status.json, so whether the job was stopped "
            "whole from outside (a closed terminal, a preemption) or one rank was killed and the others torn "
            "down after it cannot be told."))
    culprits_end = max(ends.ended[r] for r in d.culprit_ranks)
    others = [v for r, v in ends.ended.items() if r not in d.culprit_ranks]
    if others and culprits_end + ends.bar < min(others):
        return replace(d, verdict="crash", details={**(d.details or {}), **ends.details()}, summary=(
            f"crash: rank(s) {ranks_text(d.culprit_ranks)} ended by {signals} from outside the job, "
            f"{(min(others) - culprits_end) / 1e6:,.0f} ms before any other rank (status.json ended_ns), which "
            f"were torn down after; {d.summary.removeprefix('hang: ')}"))
    if ends.spread > ends.bar:
        return Diagnosis("insufficient", [], sources=sources, details=ends.details(), summary=(
            f"insufficient: every rank was ended by a signal ({signals}) and no summary.json says which ended "
            f"first; their ends began {ends.spread / 1e6:,.0f} ms apart (status.json ended_ns): neither within "
            f"{ends.bar / 1e6:,.0f} ms of each other (the job stopped whole) nor with rank(s) "
            f"{ranks_text(d.culprit_ranks)}, which never launched '{d.label}', clearly first."))
    waits = {int(e["rank"]): ends.ended[int(e["rank"])] - int(e["call_ns"]) for e in d.evidence or []
             if e.get("launched") and not e.get("finished") and e.get("call_ns") is not None
             and int(e["rank"]) in ends.ended}
    what = f"'{d.label}', which rank(s) {ranks_text(d.culprit_ranks)} had not yet launched"
    return _by_wait(d, trace, ends, waits, what, sources)


def check_stopped_whole(lt: pd.DataFrame, trace: Trace, statuses: dict[int, dict], signals: str,
                        sources: list[str]) -> Diagnosis | None:
    """A job whose every rank a signal ended together, where no rank is missing from a collective (else
    judge_stopped answers): interrupted, or a hang inside a collective every member launched. None where
    the ends did not begin together or are unknown (the caller's insufficient stands)."""
    ends = _ends(trace, statuses, signals)
    if isinstance(ends, list) or ends.spread > ends.bar:
        return None
    pending = lt[~lt["finished"].astype(bool)] if len(lt) else lt
    rows = [(ends.ended[int(r)] - int(c), int(r), lab) for r, c, lab in
            zip(pending["rank"], pending["call_ns"], pending["label"]) if int(r) in ends.ended and pd.notna(c)]
    waits: dict[int, int] = {}
    for w, r, _ in rows:
        waits[r] = max(w, waits.get(r, w))
    label = max(rows, key=lambda x: x[0])[2] if rows else None
    d = Diagnosis("hang", [], label=label, sources=sources)
    return _by_wait(d, trace, ends, waits, f"'{label}', which every member had launched", sources)


def _by_wait(d: Diagnosis, trace: Trace, ends: _Ends, waits: dict[int, int], what: str,
             sources: list[str]) -> Diagnosis:
    """A job stopped whole: `d` (a hang) where some rank had waited past the stall bar, else interrupted,
    or insufficient where the bar or the waits are unknown."""
    step = _median_step_ns(trace)
    stall = max(STALL_MIN_NS, STALL_STEPS * step) if step is not None else None
    waiter = max(waits, key=waits.get) if waits else None
    waited = waits.get(waiter)
    details = {**ends.details(), "waited_ms": None if waited is None else round(waited / 1e6, 3),
               "median_step_ms": None if step is None else round(step / 1e6, 3),
               "stall_bar_ms": None if stall is None else stall / 1e6}
    if stall is None:
        return Diagnosis("insufficient", [], sources=sources, details=details, summary=(
            f"insufficient: the job was stopped whole from outside ({ends.together()}) before any step finished: "
            "with no step to measure a step by, whether a rank was stuck or a moment behind cannot be told."))
    if waited is not None and waited >= stall:
        stuck = (f"{d.summary.rstrip('.')}; rank {waiter}" if d.culprit_ranks else
                 f"hang: rank {waiter}")
        summary = (f"{stuck} had waited {waited / 1e9:,.1f} s in {what if not d.culprit_ranks else 'it'} "
                   f"({waited / step:,.0f} median steps) when the job was stopped whole from outside: "
                   f"{ends.together()}.")
        if not d.culprit_ranks:
            summary += " No rank is missing from it: stuck inside the collective (the backend or the network)."
        return replace(d, sources=sources, details={**(d.details or {}), **details}, summary=summary)
    lag = ("no rank was waiting in a collective" if waited is None else
           f"the longest wait on a collective then (rank {waiter} on {what}) was {waited / 1e6:,.1f} ms, under "
           f"the {stall / 1e6:,.0f} ms a stuck rank would show ({STALL_STEPS} median steps of {step / 1e6:,.1f} ms, "
           f"at least {STALL_MIN_NS / 1e9:.0f} s): a moment's lag, not a hang")
    return Diagnosis("interrupted", [], step=d.step, sources=sources, details=details, summary=(
        f"interrupted: the job was stopped whole from outside while it ran: {ends.together()}; {lag}. What the "
        "ranks did while being stopped is a consequence, not a fault."))


def _median_step_ns(trace: Trace) -> float | None:
    """The median duration of the finished steps over all ranks (None: no step finished)."""
    s = trace.steps
    if not len(s):
        return None
    dur = (s["end_ns"] - s["start_ns"]).to_numpy(dtype=float, na_value=np.nan)  # Int64: exact, then floats
    dur = dur[np.isfinite(dur) & (dur > 0)]
    return float(np.median(dur)) if len(dur) else None
