"""Readers and writers of the run directory's small JSON files whose format the schema fixes: the run
marker (RUN/commscope-run.json), a rank's status.json, RUN/config.json, the schema-version check every
reader applies, and the type checks of meta.json, status.json, summary.json and config.json
(`check_doc`): a field of the wrong type (`"rank": "one"`, `"world_size": "four"`, a loss of "inf") is one
UserError line naming the file and the field, so no reader converts it later with a traceback or folds it
into a figure.

Writers go through `commscope.util.atomic`, so a reader (another rank, the launcher, `doctor`) never sees
half a file. Without pandas or torch: the launcher and the trainer's exit paths use it.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable

from commscope.errors import UserError
from commscope.rundir.schema import (CONFIG, JOB_STATUSES, META, RANK_STATUSES, RUN_MARKER, SCHEMA_VERSION, STATUS,
                                     SUMMARY, SUMMARY_RANK_STATUSES)
from commscope.util.atomic import create_bytes_atomic, write_json_atomic
from commscope.util.jsondoc import document


def check_schema(doc: dict, where: str) -> None:
    """Refuse a document written by a newer commscope (one UserError line naming `where`)."""
    v = doc.get("schema_version", SCHEMA_VERSION)
    if type(v) is not int:  # "1", 1.0, true: a garbled file, not a newer commscope's
        raise UserError(f"{where} has schema_version {v!r}, not an integer version number")
    if v > SCHEMA_VERSION:
        raise UserError(f"{where} has schema_version {v!r}; this commscope reads version <= {SCHEMA_VERSION} "
                        "(upgrade commscope)")


def _is_int(v: Any) -> bool:
    return type(v) is int  # bool is an int subclass; a rank of `true` is not a rank


def _is_num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _is_nat(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _opt(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


def _list_of(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(test(x) for x in v)


_STR = _opt(lambda v: isinstance(v, str))


def _one_of(values: tuple[str, ...]) -> str:
    return "one of " + ", ".join(f'"{v}"' for v in values)
_DICT = _opt(lambda v: isinstance(v, dict))
_LIST = _opt(lambda v: isinstance(v, list))
# field -> (test, what it must be); a field that is absent is not checked (every field is optional to
# readers, which fall back on what the other files say), one that is present must pass.
_FIELDS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    META: {"rank": (_is_nat, "a rank number (integer >= 0)"),
           "local_rank": (_opt(_is_nat), "an integer >= 0"),
           "world_size": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
           "hostname": (_STR, "a string"), "pid": (_opt(_is_int), "an integer"),
           "backend": (_STR, "a string"), "device": (_STR, "a string"), "torch": (_STR, "a string"),
           "cpu_cores": (_opt(lambda v: _is_int(v) and v >= 1), "an integer >= 1"),
           "mode": (_STR, "a string"), "started_ns": (_opt(_is_int), "an integer (ns)"),
           "profile_steps": (_STR, "a string \"START:STOP\" or null"),
           "clock": (lambda v: v is None or isinstance(v, dict) and _is_int(v.get("offset_ns", 0))
                     and _is_nat(v.get("error_ns", 0)) and _STR(v.get("method")) and _opt(_is_int)(v.get("rounds"))
                     and _STR(v.get("job")),
                     "{offset_ns: int, error_ns: int >= 0, method: str, rounds: int, job: str}")},
    STATUS: {"status": (lambda v: v in RANK_STATUSES, _one_of(RANK_STATUSES)), "error": (_STR, "a string or null"),
             "last_step": (_opt(_is_int), "an integer"), "ended_ns": (_opt(_is_int), "an integer (ns)"),
             "signal": (_STR, "a string or null")},
    SUMMARY: {"status": (_opt(lambda v: v in JOB_STATUSES), _one_of(JOB_STATUSES)),
              "world_size": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
              "backend": (_STR, "a string"), "device": (_STR, "a string"), "preset": (_STR, "a string"),
              "steps": (_opt(_is_int), "an integer"),
              "losses": (_opt(_list_of(_opt(_is_num))), "a list of finite numbers (or null)"),
              "step_times_ms": (_opt(_list_of(lambda v: _is_num(v) and v >= 0)),
                                "a list of finite numbers >= 0"),
              "tokens_per_s": (_opt(_is_num), "a finite number"),
              "ranks": (_opt(lambda v: isinstance(v, dict) and all(x in SUMMARY_RANK_STATUSES for x in v.values())),
                        f"an object of rank -> {_one_of(SUMMARY_RANK_STATUSES)}"),
              "exit_code": (_opt(_is_int), "an integer"), "message": (_STR, "a string"),
              "torchrun_killed": (_STR, "a string (the signal's name) or null")},
    CONFIG: {"args": (_DICT, "an object"), "model": (_DICT, "an object"), "param_table": (_LIST, "a list"),
             "scatter_order": (_LIST, "a list"), "work_order": (_LIST, "a list")},
}


def check_doc(doc: Any, where: str, name: str) -> dict:
    """`doc` read from `where` as the run directory's file `name` (META, STATUS, SUMMARY or CONFIG): it
    must be a JSON object of a schema version this commscope reads, whose known fields have their types;
    the first that does not is one UserError line."""
    if not isinstance(doc, dict):
        raise UserError(f"{where} is not a JSON object")
    check_schema(doc, where)
    for field, (test, what) in _FIELDS[name].items():
        if field in doc and not test(doc[field]):
            v = repr(doc[field])
            raise UserError(f"{where}: {field} is {v if len(v) <= 40 else v[:37] + '...'}, expected {what}")
    if name == STATUS and "status" not in doc:
        raise UserError(f"{where} has no status")
    return doc


# A status.json is a few hundred bytes; one far larger is not one (and is not read whole into memory).
STATUS_MAX_BYTES = 1 << 20


def read_status(rank_dir: str) -> dict | None:
    """A rank's status.json; None when there is none. Raises ValueError when it is there but unreadable:
    not a regular file (a FIFO would block the read), over STATUS_MAX_BYTES, or not a status document."""
    path = os.path.join(rank_dir, STATUS)
    if not os.path.lexists(path):
        return None
    if not os.path.isfile(path):
        raise ValueError(f"unreadable {STATUS} (not a regular file)")
    try:
        with open(path, "rb") as f:
            raw = f.read(STATUS_MAX_BYTES + 1)
        if len(raw) > STATUS_MAX_BYTES:
            raise ValueError(f"over {STATUS_MAX_BYTES >> 20} MiB")
        st = json.loads(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {STATUS} ({e})") from None
    try:
        return check_doc(st, STATUS, STATUS)
    except UserError as e:
        raise ValueError(f"unreadable {STATUS} ({e})") from None


def check_config(config: Any) -> None:
    """ValueError unless `config` can be written as config.json and read back by every command: a dict
    without `schema_version` (the run format's, written by write_config) whose keys the readers know have
    their types (`args` an object, `scatter_order` a list, ...: CONFIG's fields). The recording API checks
    it where the script calls it, not where a reader would refuse the run later."""
    if not isinstance(config, dict):
        raise ValueError(f"write_config takes a dict, got {type(config).__name__}")
    if "schema_version" in config:
        raise ValueError("write_config: schema_version is commscope's own key (it writes the run format's)")
    try:
        check_doc({"schema_version": SCHEMA_VERSION, **config}, "write_config", CONFIG)
    except UserError as e:
        raise ValueError(str(e)) from None


def write_config(run_dir, config: dict) -> None:
    """RUN/config.json (atomically)."""
    write_json_atomic(os.path.join(run_dir, CONFIG), {"schema_version": SCHEMA_VERSION, **config})


def write_status(rank_dir, status: str, error: str | None, last_step: int, ended_ns: int | None = None,
                 signal: str | None = None) -> None:
    """rank{R}/status.json, written atomically so a reader never sees half of it. `ended_ns`: when the
    rank's end began, on the run's common time axis (a writer without an aligned clock leaves it out);
    `signal`: the signal whose arrival that was ("SIGTERM"), whatever error then ended the rank."""
    write_json_atomic(os.path.join(rank_dir, STATUS), {"status": status, "error": error, "last_step": last_step,
                                                        **({} if ended_ns is None else {"ended_ns": int(ended_ns)}),
                                                        **({} if signal is None else {"signal": signal})})


def write_run_marker(run_dir, run_id: str, *, exclusive: bool = False, **fields) -> bool:
    """RUN/commscope-run.json: the run's id (and who wrote it), the first file of every run. `exclusive`:
    only if there is none yet (several nodes' launchers start one run: the first one's marker stands).
    True if this call wrote it."""
    path = os.path.join(run_dir, RUN_MARKER)
    doc = {"schema_version": SCHEMA_VERSION, "run_id": run_id, **fields}
    if exclusive:
        return create_bytes_atomic(path, document(doc) + b"\n")
    write_json_atomic(path, doc)
    return True


def read_run_marker(run_dir: str) -> dict | None:
    """The run marker; None when there is none. Raises ValueError when it is there but unreadable."""
    try:
        with open(os.path.join(run_dir, RUN_MARKER), "rb") as f:
            doc = json.loads(f.read(65536))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {RUN_MARKER} ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("run_id"), str):
        raise ValueError(f"unreadable {RUN_MARKER} (no run_id)")
    return doc
