"""A run directory's fault evidence (docs/faults.md) → `FaultEvidence` frames: every rank's watchdog.json
(the hang watchdog fired) and inflight.json (the rank ended abnormally with collectives in flight), and
the NCCL Flight Recorder dumps under RUN/flight_recorder/.

Invariant: reading never raises. A file that cannot be read or is not what its name says leaves empty
frames and the reason in `error` — the first such file's, as one UserError line — so a broken report
spoils only the commands that need it (`doctor` refuses, the HTML report goes on without it).
"""
from __future__ import annotations

import os
import re

import pandas as pd

from commscope.errors import UserError
from commscope.load import flight_recorder
from commscope.load.files import read_json
from commscope.load.frames import EVIDENCE_COLUMNS, FaultEvidence
from commscope.load.stack_labels import user_frame
from commscope.rundir import flight_recorder_files
from commscope.rundir.schema import INFLIGHT, WATCHDOG

_REPORT_FILES = (("watchdog", WATCHDOG), ("inflight", INFLIGHT))


def read_fault_evidence(run_dir: str, rank_dirs: dict[int, str]) -> FaultEvidence:
    """The evidence of the run in `run_dir`, whose rank folders are `rank_dirs` (rank → folder)."""
    try:
        return _read(run_dir, rank_dirs)
    except UserError as e:
        return FaultEvidence(error=str(e))
    except OSError as e:  # a report or the dumps' folder the system will not let us read
        return FaultEvidence(error=f"{e.filename or run_dir}: {e.strerror or e}")


def _read(run_dir: str, rank_dirs: dict[int, str]) -> FaultEvidence:
    docs: dict[str, dict[int, tuple[str, dict]]] = {kind: {} for kind, _ in _REPORT_FILES}
    for rank, d in sorted(rank_dirs.items()):
        for kind, name in _REPORT_FILES:
            p = os.path.join(d, name)
            if os.path.isfile(p):
                doc = read_json(p)
                if (not isinstance(doc, dict) or not isinstance(doc.get("inflight", []), list)
                        or not _opt_int(-2 ** 63 + 1)(doc.get("fired_ns"))):
                    raise UserError(f"{p} is not a commscope {kind} report")
                docs[kind][rank] = (p, doc)
    dumps = {rank: (p, flight_recorder.read_flight_recorder(p)) for rank, p in flight_recorder_files(run_dir).items()}

    reports = [{"rank": rank, "kind": kind, "path": p, "fired_ns": doc.get("fired_ns") if kind == "watchdog" else None,
                "blocked_at": blocked_at(doc.get("stacks")) if kind == "watchdog" else None,
                "waiting_on": _waiting_on(doc.get("waiting_on")) if kind == "watchdog" else None}
               for kind, _ in _REPORT_FILES for rank, (p, doc) in docs[kind].items()]
    reports += [{"rank": rank, "kind": "flight_recorder", "path": p, "fired_ns": None, "blocked_at": None,
                 "waiting_on": None} for rank, (p, _) in dumps.items()]
    rows = []
    for kind, name in _REPORT_FILES:
        for rank, (p, doc) in docs[kind].items():
            try:
                rows += _inflight_rows(rank, doc, name)
            except (TypeError, ValueError) as e:
                raise UserError(f"{p} is not a commscope {kind} report ({e})") from None
    fr_rows = []
    for rank, (p, doc) in dumps.items():
        try:
            fr_rows += flight_recorder.launch_rows(rank, doc)
        except (TypeError, ValueError) as e:
            raise UserError(f"{p}: Flight Recorder dump with unreadable entries ({e})") from None
    return FaultEvidence(
        reports=pd.DataFrame({c: pd.Series([r[c] for r in reports], dtype=object) for c in EVIDENCE_COLUMNS["reports"]})
        if reports else FaultEvidence().reports,
        inflight=flight_recorder.launch_frame(rows),
        flight_recorder=flight_recorder.launch_frame(fr_rows))


# one frame of traceback.format_stack: '  File "/x/optimizer.py", line 327, in step\n    handle.wait()\n'
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n?(?P<code>.*)$', re.S)


def _waiting_on(rec: object) -> tuple | None:
    """The watchdog report's `waiting_on` record as (op, label, group, seq); None where it names none."""
    if not isinstance(rec, dict) or type(rec.get("seq")) is not int or rec.get("group") is None:
        return None
    return (rec.get("op"), rec.get("label"), str(rec.get("group")), rec["seq"])


def blocked_at(stacks: object) -> str | None:
    """The innermost user-code frame of the main thread in a watchdog report's `stacks` (thread name →
    traceback.format_stack lines), as `stack_labels.user_frame` names a frame, with its source line:
    "optimizer.py:327 step: handle.wait()". None where the report holds no main thread or no user frame."""
    if not isinstance(stacks, dict):
        return None
    main = next((v for k, v in stacks.items() if isinstance(k, str) and k.startswith("MainThread")), None)
    if not isinstance(main, list):
        return None
    for entry in reversed(main):
        m = _TB_FRAME.match(entry) if isinstance(entry, str) else None
        if m is None:
            continue
        label = user_frame(f"{m['file']}({m['line']}): {m['func'].strip()}")
        if label is not None:
            code = " ".join(m["code"].split())
            return f"{label}: {code}" if code else label
    return None


def _inflight_rows(rank: int, doc: dict, source: str) -> list[dict]:
    """A report's in-flight collectives → launch rows (records without a sequence number cannot be matched
    across ranks and are left out). TypeError when a field has the wrong type."""
    rows = []
    for r in doc.get("inflight", []):
        if not isinstance(r, dict) or r.get("seq") is None:
            continue
        for f, test in _INFLIGHT_FIELDS.items():
            if not test(r.get(f)):
                raise TypeError(f"{f} is {str(r.get(f))[:40]!r}")
        rows.append({"rank": rank, "group": str(r.get("group")), "group_size": r.get("group_size"),
                     "seq": r["seq"],
                     "label": r.get("label"), "op": r.get("op"), "bytes": None if r.get("bytes") is None else int(r["bytes"]),
                     "dtype": r.get("dtype"), "step": r.get("step"), "call_ns": r.get("call_ns"),
                     "wait_ns": r.get("wait_ns"), "finished": False, "source": source})
    return rows


def _opt_int(lo: int):
    return lambda v: v is None or type(v) is int and lo <= v < 2 ** 63


def _opt_str(v) -> bool:
    return v is None or isinstance(v, str)


# the fields a launch row takes, and what each must be (a bool is not a count, "3" is not a sequence number)
_INFLIGHT_FIELDS = {
    "seq": _opt_int(0), "group": lambda v: v is None or type(v) in (str, int), "group_size": _opt_int(1),
    "label": _opt_str, "op": _opt_str, "dtype": _opt_str, "step": _opt_int(-1),
    # a whole float (36.0) is a count a JSON writer spelled as a float; 36.5 bytes is not a count
    "bytes": lambda v: v is None or (type(v) is int or type(v) is float and v.is_integer()) and 0 <= v < 2 ** 63,
    "call_ns": _opt_int(-2 ** 63 + 1), "wait_ns": _opt_int(-2 ** 63 + 1),
}
