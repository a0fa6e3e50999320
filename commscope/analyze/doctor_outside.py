"""The doctor's rules for a job ended from outside: the user's stop (Ctrl-C, summary.json `interrupted`),
torch.distributed.run killed, a rank killed by a signal (kill, the OOM killer), or every rank signalled with
no launcher summary to say which ended first (docs/faults.md, rules 1, 4 and 6).

Why apart from analyze.doctor: what ended a rank from outside decides whether a hang by absence is a hang
(the rank was stuck) or a crash (it was killed while the others ran), and whether a stopped job was stuck
when the stop came. These rules wrap the hang rule's answer (passed in as a callable, computed at most once)
and read when each rank's end began (analyze.doctor_stopped).

Invariants: pure functions of the trace, its fault evidence and the launch table; a signal commscope run
sent ("by commscope run") is the launcher's teardown after a failure, never a kill from outside.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, ranks_text
from commscope.analyze.doctor_status import rank_statuses, stop_evidence, timed_out, with_rank_rows, with_stop_evidence
from commscope.analyze.doctor_stopped import (check_stopped_ends, judge_stopped, silent_before_stop,
                                              stalled_before_stop, stuck_before_end, stuck_before_others_ended)
from commscope.load.frames import FaultEvidence, Trace
from commscope.rundir.schema import EVENTS, SIGNAL_ENDED, STATUS, SUMMARY, ending_signal


def someone_waited(trace: Trace, faults: FaultEvidence) -> bool:
    """A rank's watchdog fired or a rank timed out waiting: the job was stuck, so a rank signalled then may
    have been the launchers' teardown, not a kill from outside."""
    return bool(faults.ranks("watchdog")) or any(timed_out(s.get("error")) for s in rank_statuses(trace).values())


def ended_from_outside(d: Diagnosis, trace: Trace, faults: FaultEvidence) -> Diagnosis:
    """A hang found by absence whose culprits were ended by a signal while nobody had timed out is a rank
    killed from outside the job (`kill -TERM` on one rank, an OOM killer's SIGKILL): the others launched a
    collective it could not join because it was gone, not because it was stuck. commscope run and
    torch.distributed.run signal ranks only after one failed or timed out, and a signal commscope run sends
    says so in the status ("by commscope run"). Where the launcher's summary.json exists, the culprit must
    also be the rank it saw end first (`ended_first`): a rank torn down after another was killed during a
    real hang stays the hang's culprit. Without a summary, a job whose every rank a signal ended is read by
    when each rank's end began (analyze.doctor_stopped): stopped whole from outside (the hang stands, or
    the job was stopped while it ran), the culprits ended first (crash), or insufficient. Either way a
    culprit the others had waited for past the stall bar before its end began was stuck: the hang stands
    (doctor_stopped.stuck_before_end). Anything else is returned as it is."""
    if d.verdict != "hang" or not d.culprit_ranks or trace.source != "run" or someone_waited(trace, faults):
        return d
    statuses = rank_statuses(trace)
    signals = {}
    for r in d.culprit_ranks:
        error = str(statuses.get(r, {}).get("error") or "")
        m = SIGNAL_ENDED.search(error)
        if m is None or "by commscope run" in error:
            return d
        signals[r] = m.group(1)
    summary = trace.config.get("summary") or {}
    if summary:
        first = summary.get("ended_first")
        if not isinstance(first, dict) or first.get("rank") not in d.culprit_ranks:
            return d
    else:
        names = every_rank_signalled(trace)
        if names:
            judged = judge_stopped(d, trace, statuses, names, [*d.sources, STATUS])
            return with_stop_evidence(judged, trace) if judged.verdict == "interrupted" else judged
    names = sorted(set(signals.values()))
    stall = stuck_before_end(d, trace, statuses)
    if stall is not None:  # the others had waited past the stall bar before it was killed: it was stuck
        return stall.stands(d, f"rank(s) {ranks_text(d.culprit_ranks)} were ended by {' / '.join(names)} from "
                               "outside the job", [*d.sources, STATUS])
    return replace(d, verdict="crash", summary=(
        f"crash: rank(s) {ranks_text(d.culprit_ranks)} ended by {' / '.join(names)} from outside the job while "
        f"the others ran (no rank timed out, and the launchers signal ranks only after a failure); "
        f"{d.summary.removeprefix('hang: ')}"))


def stuck_when_interrupted(d: Diagnosis | None, lt: pd.DataFrame, trace: Trace,
                            hang: Callable[[], Diagnosis | None]) -> Diagnosis | None:
    """The user's stop (`d`, interrupted), or the hang a rank was in when it came: a rank that had waited
    past the stall bar in a collective another never launched (analyze.doctor_stopped.stalled_before_stop),
    or, no rank missing from any, every rank silent that long (silent_before_stop)."""
    if d is None or trace.source != "run":
        return d
    h = hang()
    stopped = stopped_words(trace.config.get("summary") or {})
    if h is None:
        silent = silent_before_stop(lt, stopped, d.sources, trace, rank_statuses(trace))
        return d if silent is None else with_rank_rows(silent, trace) if "silent_ms" in silent.details else silent
    if h.verdict != "hang":
        return d
    return stalled_before_stop(h, stopped, d.sources, trace, rank_statuses(trace)) or d


def stuck_before_killed(d: Diagnosis, trace: Trace, hang: Callable[[], Diagnosis | None]) -> Diagnosis:
    """A crash whose culprits left no status (killed: SIGKILL, the OOM killer) and never launched a
    collective the others had waited in past the stall bar by their first end: the culprits may have been
    stuck before they were killed (a hang ended by a kill). The crash stands, since a killed rank leaves no
    time of its end to measure the wait to; the summary says what the waits suggest."""
    if d.verdict != "crash" or trace.source != "run":
        return d
    statuses = rank_statuses(trace)
    if any(r in statuses for r in d.culprit_ranks):
        return d
    h = hang()
    if h is None or h.verdict != "hang" or sorted(h.culprit_ranks) != sorted(d.culprit_ranks):
        return d
    stall = stuck_before_others_ended(h, trace, statuses)
    if stall is None:
        return d
    who = ranks_text(d.culprit_ranks)
    return replace(d, details={**(d.details or {}), "stuck_before_killed": stall.details()}, summary=(
        f"{d.summary.rstrip('.')}. Before it was killed, {stall.waited_text(repr(str(h.label)))}, a collective "
        f"rank(s) {who} never launched (measured to the others' first end: a killed rank leaves no time of its "
        f"own end): rank(s) {who} may have been stuck before being killed."))


def every_rank_signalled(trace: Trace) -> str | None:
    """The signals' names ("SIGTERM") where every rank of the job left a status saying a signal ended it, or
    that one had begun its end (status.json `signal`: a rank in a collective's wait whose peer, stopped by the
    same signal, closed the connection ends by that error)."""
    statuses = rank_statuses(trace)
    names = [ending_signal(s) for s in statuses.values()]
    if len(statuses) != trace.world_size or not all(names):
        return None
    return ", ".join(sorted(set(names)))


def check_stopped(lt: pd.DataFrame, trace: Trace, faults: FaultEvidence) -> Diagnosis | None:
    """A run directory without summary.json whose every rank a signal ended, no rank missing from a
    collective and nobody timed out (analyze.doctor_stopped.check_stopped_ends)."""
    if trace.source != "run" or trace.config.get("summary") or someone_waited(trace, faults):
        return None
    names = every_rank_signalled(trace)
    d = check_stopped_ends(lt, trace, rank_statuses(trace), names, [STATUS, EVENTS]) if names else None
    if d is not None and "silent_ms" in (d.details or {}):  # stuck outside communication
        return with_rank_rows(d, trace)
    return with_stop_evidence(d, trace) if d is not None and d.verdict in ("interrupted", "crash") else d




def stopped_words(summary: dict) -> str:
    """Who stopped the run, as the verdicts say it: summary.json's `torchrun_killed` (the launcher saw
    torch.distributed.run killed by a signal from outside, its ranks ending with it: the user, or the
    system's OOM killer) or the user's signal."""
    killed = summary.get("torchrun_killed")
    if isinstance(killed, str) and killed:
        return (f"torch.distributed.run was killed by {killed} from outside the job (by the user, or the system: "
                "an OOM killer), and its ranks ended with it")
    how = f" ({summary['message']})" if summary.get("message") else ""
    return f"the run was stopped by the user{how}"


def check_interrupted(trace: Trace) -> Diagnosis | None:
    """The job stopped from outside while it ran: the user's signal (summary.json `interrupted`, a rank's
    interrupted status or KeyboardInterrupt), or torch.distributed.run killed (summary.json
    `torchrun_killed`, where no rank had failed on its own first: the launcher's message names that one
    instead)."""
    summary = trace.config.get("summary") or {}
    statuses = rank_statuses(trace)
    if summary.get("status") != "interrupted" and not summary.get("torchrun_killed") and not any(
            s.get("status") == "interrupted" or str(s.get("error") or "").startswith("KeyboardInterrupt")
            for s in statuses.values()):
        return None
    evidence, last, reached = stop_evidence(trace)
    return Diagnosis("interrupted", [], step=last, evidence=evidence, sources=[SUMMARY, STATUS] if summary else [STATUS],
                     summary=(f"interrupted: {stopped_words(summary)}; {reached}. "
                              "What the ranks did while being stopped is not judged as a fault."))
