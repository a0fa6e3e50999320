"""Typed, streaming reading of a run's events.jsonl files (docs/run_format.md, "events.jsonl records") into
the columns of the `steps`, `collectives`, `regions` and `hooks` frames.

Every field the frames carry is checked against its type before it is kept: nanosecond times and counters
are integers in int64 range (never a bool, a string or a float beyond 2⁶³), numbers are finite, strings
are strings. A record that fails is left out and counted in `problems` — never folded into the figures:
- a field of the wrong type or out of range (`"start_ns": "x"`, `"ts": true`, `"loss": "NaN"`, a step of 10³⁰);
- a negative duration (`end_ns < start_ns`, `return_ns < call_ns`, `wait_end_ns < wait_ns`);
- a duplicate: a line identical to an earlier one (a file concatenated with itself), a second `step`
  record for the same step, or a second collective with the same (group, seq) on one rank;
- a record whose `rank` is not its folder's.
Problems are grouped by cause with a count and the first line, so a file of a million bad lines makes a
handful of problem lines.

Memory is proportional to the records read, not to the file: lines stream through `iter_jsonl`, a record
is stored as one slot per column in compact arrays (int64/float64 `array`s, interned strings), duplicate
lines are recognised by hash before they are decoded, and more than limits.EVENTS distinct records in a
run is refused with one line naming the limit.
"""
from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np
import pandas as pd

from commscope.errors import UserError
from commscope.load import limits
from commscope.load.files import DUPLICATE, TORN, gc_paused, iter_jsonl
from commscope.load.frames import COLUMNS, frame

NA = -2 ** 63  # int64 column slot for a missing value (never a valid value: checked on input)
_INT64_MAX = 2 ** 63 - 1

# Field types: "ns" (time, int64), "int" (int64 counter), "num" (finite number), "str" (string; a
# group's name may also be written as a number), "scalar" (any string or number).
_KINDS: dict[str, dict[str, str]] = {
    "step": {"step": "int", "start_ns": "ns", "end_ns": "ns", "loss": "num"},
    "collective": {"step": "int", "label": "str", "phase": "str", "op": "str", "bytes": "num", "dtype": "str",
                   "group": "str", "group_size": "int", "seq": "int", "call_ns": "ns", "return_ns": "ns",
                   "wait_ns": "ns", "wait_end_ns": "ns", "start_ns": "ns", "end_ns": "ns", "stream": "scalar",
                   "timing": "str"},
    "region": {"step": "int", "micro_step": "int", "name": "str", "start_ns": "ns", "end_ns": "ns"},
    "hook": {"step": "int", "micro_step": "int", "label": "str", "position": "int", "t_ns": "ns"},
}
FRAME_OF = {"step": "steps", "collective": "collectives", "region": "regions", "hook": "hooks"}
# Fields a record of the kind is useless without.
_REQUIRED = {"step": ("step", "start_ns", "end_ns"), "collective": ("call_ns",), "region": ("start_ns",),
             "hook": ("t_ns",)}
# Lower bounds of counters (a step is -1 outside any step).
_MIN = {"step": -1, "micro_step": 0, "position": 0, "seq": 0, "group_size": 1, "bytes": 0}
# (start, end) pairs whose end must not precede the start.
_SPANS = {"step": (("start_ns", "end_ns"),), "region": (("start_ns", "end_ns"),),
          "collective": (("call_ns", "return_ns"), ("wait_ns", "wait_end_ns"), ("start_ns", "end_ns")),
          "hook": ()}


class _Reject(Exception):
    """A record left out; args[0] is the cause (grouped in problems), args[1] the detail of this one."""


def _int(v: Any, name: str) -> int:
    if type(v) is float and v.is_integer() and abs(v) <= _INT64_MAX:  # 1.0e3 written by another tool
        v = int(v)
    if type(v) is not int:  # bool is an int subclass: `true` is not a time
        raise _Reject(f"{name} is not an integer", f"{name}={_short(v)}")
    if not -_INT64_MAX <= v <= _INT64_MAX:
        raise _Reject(f"{name} is out of the int64 range", f"{name}={_short(v)}")
    if v < _MIN.get(name, -_INT64_MAX):
        raise _Reject(f"{name} is below {_MIN[name]}", f"{name}={v}")
    return v


def _num(v: Any, name: str) -> float:
    if type(v) not in (int, float) or not math.isfinite(v):  # orjson reads no NaN/inf, but 1e308*10 is not JSON either
        raise _Reject(f"{name} is not a finite number", f"{name}={_short(v)}")
    v = float(v)
    if not math.isfinite(v) or v < _MIN.get(name, -math.inf):
        raise _Reject(f"{name} is out of range", f"{name}={_short(v)}")
    return v


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class EventColumns:
    """The records kept so far, one compact column per frame column, and the problems met."""

    def __init__(self) -> None:
        self.cols: dict[str, dict[str, Any]] = {}
        for kind, fields in _KINDS.items():
            c: dict[str, Any] = {"rank": array("q")}
            for f, t in fields.items():
                c[f] = array("q") if t in ("ns", "int") else array("d") if t == "num" else []
            self.cols[kind] = c
        self.read = 0  # distinct records read (the limit counts these)
        self._strings: dict[str, str] = {}  # interned: labels and names repeat on every step
        self.problems: list[str] = []

    def read_rank(self, path: str, rank: int, label: str) -> int:
        """Read one rank's events.jsonl at `path` (named `label` in problems); the number of records kept.
        A torn last line is a problem; a corrupt line elsewhere a UserError (from iter_jsonl)."""
        cap = limits.EVENTS.value()
        causes: dict[tuple[str, str], list] = {}  # (kind, cause) -> [count, first line, detail]
        step_seen: set[int] = set()
        coll_seen: set[tuple] = set()
        kept = 0
        with gc_paused():
            for lineno, _, rec in iter_jsonl(path, dedup=True):
                if rec is TORN:
                    self.problems.append(f"rank {rank}: ignored a torn last line in {label}")
                    continue
                if rec is DUPLICATE:
                    _count(causes, ("line", "a copy of an earlier line"), lineno, "")
                    continue
                self.read += 1
                if self.read > cap:
                    raise limits.EVENTS.refuse(f"{path}: too many events.jsonl records in this run")
                if not isinstance(rec, dict):
                    raise UserError(f"{path}: line {lineno} is not a JSON object")
                kind = rec.get("kind")
                if type(kind) is not str or kind not in _KINDS:
                    continue  # another kind of record (the format may grow): not ours to judge
                try:
                    row = self._check(rec, kind, rank)
                    if kind == "step":
                        if row["step"] in step_seen:
                            raise _Reject("a second record of the same step", f"step {row['step']}")
                        step_seen.add(row["step"])
                    elif kind == "collective" and row["seq"] is not None:
                        key = (row["group"], row["seq"])
                        if key in coll_seen:
                            raise _Reject("a second collective with the same (group, seq)",
                                          f"group {row['group']} seq {row['seq']}")
                        coll_seen.add(key)
                except _Reject as e:
                    _count(causes, (kind, e.args[0]), lineno, e.args[1])
                    continue
                self._append(kind, rank, row)
                kept += 1
        for (kind, cause), (n, first, detail) in causes.items():
            what = "line" if kind == "line" else f"{kind} record"
            self.problems.append(
                f"rank {rank}: {label}: ignored {n} {what}{'s' if n > 1 else ''}: {cause} "
                f"({'first at ' if n > 1 else ''}line {first}{': ' + detail if detail else ''})")
        return kept

    def _check(self, rec: dict, kind: str, rank: int) -> dict[str, Any]:
        r = rec.get("rank", rank)
        if type(r) is not int or r != rank:
            raise _Reject("its rank is not the folder's", f"rank={_short(r)}")
        row: dict[str, Any] = {}
        for f, t in _KINDS[kind].items():
            v = rec.get(f)
            if v is None:
                if f in _REQUIRED[kind]:
                    raise _Reject(f"no {f}", "")
                row[f] = None
            elif t in ("ns", "int"):
                row[f] = _int(v, f)
            elif t == "num":
                row[f] = _num(v, f)
            elif t == "str":
                if type(v) is int and f == "group":
                    v = str(v)
                if type(v) is not str:
                    raise _Reject(f"{f} is not a string", f"{f}={_short(v)}")
                row[f] = self._strings.setdefault(v, v)
            else:
                if type(v) not in (str, int, float):
                    raise _Reject(f"{f} is not a string or number", f"{f}={_short(v)}")
                row[f] = v
        if row["step"] is None:
            row["step"] = -1
        for a, b in _SPANS[kind]:
            if row[a] is not None and row[b] is not None and row[b] < row[a]:
                raise _Reject(f"negative duration ({b} < {a})", f"{b} - {a} = {row[b] - row[a]} ns")
        return row

    def _append(self, kind: str, rank: int, row: dict[str, Any]) -> None:
        c = self.cols[kind]
        c["rank"].append(rank)
        for f, t in _KINDS[kind].items():
            v = row[f]
            if t in ("ns", "int"):
                c[f].append(NA if v is None else v)
            elif t == "num":
                c[f].append(math.nan if v is None else v)
            else:
                c[f].append(v)

    def frame(self, kind: str) -> pd.DataFrame:
        """The frame (commscope.load.frames) of one record kind, columns in the contract's order. Times
        are nullable Int64; counters int64, or float64 with NaN where some are missing; numbers float64."""
        c = self.cols[kind]
        data: dict[str, Any] = {}
        for col in COLUMNS[FRAME_OF[kind]]:
            if col not in c:
                continue  # not in events.jsonl (frame() fills it)
            t = "int" if col == "rank" else _KINDS[kind][col]
            if t in ("ns", "int"):
                a = np.frombuffer(c[col], dtype=np.int64) if len(c[col]) else np.zeros(0, np.int64)
                missing = a == NA
                if t == "ns":
                    data[col] = pd.arrays.IntegerArray(a.copy(), missing)
                elif missing.any():
                    data[col] = np.where(missing, np.nan, a.astype(np.float64))
                else:
                    data[col] = a.copy()
            elif t == "num":
                data[col] = np.frombuffer(c[col], dtype=np.float64).copy() if len(c[col]) else np.zeros(0)
            else:
                data[col] = pd.Series(c[col], dtype=object)
        return frame(FRAME_OF[kind], pd.DataFrame(data))


def _count(causes: dict, key: tuple[str, str], lineno: int, detail: str) -> None:
    got = causes.get(key)
    if got is None:
        causes[key] = [1, lineno, detail]
    else:
        got[0] += 1
