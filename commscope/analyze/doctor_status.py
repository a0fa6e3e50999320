"""What each rank's status.json and the launcher's summary.json say of how the job ended, as the doctor's
rules read it (analyze.doctor): which ranks ended and how, the last step each finished, whose records are
incomplete, and whether a rank's error makes it a victim of another's fault or the fault itself.

Why apart from the rules: every rule (crash, hang, a stop from outside, insufficient) asks these same
questions of the statuses, and asks them the same way, so a rank that is a "victim" for one rule is one for
all of them.

Invariants: pure functions of the loaded Trace (its config's `status`, `summary`, `lost_records` and its
steps); a rank that finished no step has None as its last step, never a sentinel such as -1.
"""
from __future__ import annotations

import re
from dataclasses import replace

from commscope.analyze.diagnosis import Diagnosis, ranks_text
from commscope.load.frames import Trace
from commscope.rundir.schema import ENDED_STATUSES as ENDED, EVENTS, STATUS, SUMMARY

# Errors a rank reports when it was a victim, not the cause: a peer died, the launcher stopped it, the
# backend or our watchdog timed out waiting. Each names the distributed machinery (the backend, torch's
# Dist*Error types, a peer's connection, a signal, our watchdog): a user's own "DataLoader timed out" or
# "ConnectionError: could not reach the checkpoint server" is the rank's own fault, not a peer's. Whole
# words: "Unterminated string" is no sign.
_CONSEQUENCE = re.compile(r"\b(?:Terminated|terminated by signal|hang watchdog|pair closure|DistBackendError|"
                          r"DistNetworkError|DistStoreError|ProcessGroup\w*|KeyboardInterrupt|gloo|NCCL\w*|c10d|"
                          r"(?:closed|reset) by peer|Timed out waiting \d+ ?ms|WorkNCCL)\b", re.I)
# Of those, a peer's error that says it waited for this long: the rank it waited on was alive, not launching.
_TIMED_OUT = re.compile(r"\b(?:timed out|timeout|hang watchdog)\b", re.I)
# Exception types a rank's own code raises (a bug, bad data, its own memory), whatever words their message
# holds: "ValueError: bad timeout" is this rank's fault, not a peer's. The error reads "Type: message".
_OWN_TYPES = frozenset({
    "ArithmeticError", "AssertionError", "AttributeError", "FileNotFoundError", "FloatingPointError",
    "ImportError", "IndexError", "IsADirectoryError", "JSONDecodeError", "KeyError", "LookupError", "MemoryError",
    "ModuleNotFoundError", "NameError", "NotImplementedError", "OutOfMemoryError", "OverflowError",
    "PermissionError", "RecursionError", "StopIteration", "TypeError", "UnboundLocalError",
    "UnicodeDecodeError", "UnicodeEncodeError", "ValueError", "ZeroDivisionError"})
_ERROR_TYPE = re.compile(r"\s*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\s*:")


def _own_type(error: str) -> bool:
    m = _ERROR_TYPE.match(error)
    return bool(m) and m.group(1) in _OWN_TYPES


def _says(pattern: re.Pattern, error) -> bool:
    """Whether a rank's `error` says what `pattern` matches, and is not of a type its own code raises."""
    text = str(error)
    return not _own_type(text) and bool(pattern.search(text))


def is_consequence(error) -> bool:
    """The error of a rank that was a victim of another's fault (docs/faults.md)."""
    return _says(_CONSEQUENCE, error)


def timed_out(error) -> bool:
    """The error of a rank that gave up waiting on a collective."""
    return is_consequence(error) and _says(_TIMED_OUT, error)


def rank_statuses(trace: Trace) -> dict[int, dict]:
    return {int(r): s for r, s in trace.config.get("status", {}).items()}


def no_folder_ranks(trace: Trace) -> list[int]:
    """Ranks of a run directory that have no rank folder (the loader's `missing_rank_folders`): none of their
    records were read, so neither their absence from a collective nor their missing status.json is
    evidence of how they ended."""
    if trace.source != "run":
        return []
    return sorted(int(r) for r in trace.config.get("missing_rank_folders") or [])


def launcher_status(trace: Trace, ranks: list[int]) -> dict[str, object]:
    """Per rank of `ranks`, its status in the run's summary.json (the launcher's view, written after every
    rank ended), or None where it names none."""
    said = (trace.config.get("summary") or {}).get("ranks") or {}
    return {str(r): said.get(str(r)) for r in ranks}


def launcher_says(trace: Trace, ranks: list[int]) -> str:
    """What summary.json says of `ranks` (launcher_status), as a clause: "; summary.json says rank(s) 2
    completed", or "" when it names none of them."""
    said: dict[str, list[int]] = {}
    for r, st in launcher_status(trace, ranks).items():
        if isinstance(st, str):
            said.setdefault(st, []).append(int(r))
    return "".join(f"; {SUMMARY} says rank(s) {ranks_text(rs)} {st}" for st, rs in said.items())


def finished_text(step: int | None, trace: Trace | None = None) -> str:
    """A rank's last finished step as a verdict's sentence says it: "last finished step 3." or, when it
    finished none, "it finished no step." (its evidence holds null there, never a sentinel). A run of
    `--trace off` records no step: with no status either (a rank killed outright), the step is unknown."""
    if step is None and trace is not None and trace.run_args.get("trace") == "off":
        return "how many steps it finished is unknown (a run of --trace off records no step, and it left no status)."
    return "it finished no step." if step is None else f"last finished step {step}."


def unrecorded_ranks(trace: Trace) -> list[int]:
    """Ranks that say they completed but left no record the loader could read (their events.jsonl missing
    or unreadable: a problem of that rank): absence of their collectives is no evidence of anything."""
    seen = set(trace.steps["rank"].astype(int)) | set(trace.collectives["rank"].astype(int))
    return sorted(r for r, st in rank_statuses(trace).items() if st.get("status") in ENDED and r not in seen)


def incomplete_ranks(trace: Trace) -> dict[int, list[str]]:
    """Ranks whose records are not all there, with why: the loader ignored some of their records (a record
    it cannot place), their events.jsonl ends in a torn line while their status says "completed" (a rank
    that completed wrote its whole log; a killed one may tear its last line, which is no damage to judge
    by), or their status names a later step than their last recorded one as finished, however the rank
    ended (a cut log). The absence of a collective in such a rank's records is no evidence that it never
    launched it."""
    statuses = rank_statuses(trace)
    completed = {r for r, s in statuses.items() if s.get("status") in ENDED}
    out: dict[int, list[str]] = {}
    # what the loader lost of each rank's log (commscope.load.events.read_rank's "lost")
    for key, lost in (trace.config.get("lost_records") or {}).items():
        r, n, causes = int(key), lost.get("ignored") or 0, lost.get("causes") or []
        if n:
            out.setdefault(r, []).append(f"the loader ignored {n} of its records" +
                                         (f" ({'; '.join(causes)})" if causes else ""))
        if lost.get("torn") and r in completed:
            out.setdefault(r, []).append(f"its {EVENTS} is torn (its last line is cut off)")
    for r in sorted(statuses):
        said, last = statuses[r].get("last_step"), recorded_last_step(trace, r)
        if type(said) is int and said >= 0 and (last is None or last < said):
            ends = f"ends at step {last}" if last is not None else "holds no finished step"
            did = "completed" if r in completed else "finished"
            out.setdefault(r, []).append(f"its {STATUS} says it {did} step {said} but its {EVENTS} {ends}")
    return dict(sorted(out.items()))


def last_finished_step(trace: Trace, rank: int) -> int | None:
    """The rank's last finished step: its records', else its status.json's `last_step` (a run recorded
    with --trace off writes no step records); None when it finished none (never a sentinel such as -1,
    which a reader would take for a step)."""
    last = recorded_last_step(trace, rank)
    if last is None and trace.source == "run":
        said = rank_statuses(trace).get(rank, {}).get("last_step")
        return said if type(said) is int and said >= 0 else None
    return last


def recorded_last_step(trace: Trace, rank: int) -> int | None:
    """The last step the rank's records hold as finished (None: none)."""
    s = trace.steps
    s = s[(s["rank"] == rank) & (s["step"] >= 0)] if len(s) else s
    return int(s["step"].max()) if len(s) else None



def status_row(trace: Trace, statuses: dict[int, dict], rank: int) -> dict:
    """A rank's evidence row in a verdict on failed or stopped ranks: its status, its error and the last step
    it finished (None where it has none)."""
    s = statuses.get(rank, {})
    return {"rank": rank, "status": s.get("status"), "error": s.get("error"),
            "last_finished_step": last_finished_step(trace, rank)}


def stop_evidence(trace: Trace) -> tuple[list[dict], int | None, str]:
    """Each rank's status and last finished step, the last step every rank finished (None: some finished
    none), and that in words: what a stopped run's verdict shows."""
    statuses = rank_statuses(trace)
    ranks = sorted(set(trace.ranks) | set(statuses))
    evidence = [status_row(trace, statuses, r) for r in ranks]
    done = [e["last_finished_step"] for e in evidence]
    last = None if None in done or not done else min(done)
    none = [e["rank"] for e in evidence if e["last_finished_step"] is None]
    reached = (f"every rank finished step {last}" if last is not None else
               "no rank finished a step" if len(none) == len(done) else f"rank(s) {ranks_text(none)} finished no step")
    return evidence, last, reached


def with_rank_rows(d: Diagnosis, trace: Trace) -> Diagnosis:
    """`d` with every rank's status and last finished step as its evidence, and the last step every rank
    finished as its step: a verdict on the whole job, no rank singled out."""
    evidence, last, _ = stop_evidence(trace)
    return replace(d, evidence=evidence, step=last)


def with_stop_evidence(d: Diagnosis, trace: Trace) -> Diagnosis:
    """A stopped job's verdict with every rank's status and last finished step, the culprits first."""
    evidence, last, reached = stop_evidence(trace)
    culprits = set(d.culprit_ranks)
    evidence = [e for e in evidence if e["rank"] in culprits] + [
        {**e, "role": "affected"} if culprits else e for e in evidence if e["rank"] not in culprits]
    if d.verdict == "interrupted":
        return replace(d, evidence=evidence, step=last, summary=(
            f"{d.summary.rstrip('.')}; {reached}. What the ranks did while being stopped is a consequence, not a "
            "fault."))
    step = last_finished_step(trace, d.culprit_ranks[0]) if d.culprit_ranks else None
    return replace(d, evidence=evidence, step=step, summary=f"{d.summary.rstrip('.')}; {finished_text(step, trace)}")
