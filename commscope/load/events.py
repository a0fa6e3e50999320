"""Typed, streaming reading of a run's events.jsonl files (docs/run_format.md, "events.jsonl records") into
the columns of the `steps`, `collectives`, `regions` and `hooks` frames.

Every field the frames carry is checked against its type before it is kept: nanosecond times are integers
in int64 range, counters (steps, seq, …) within ±2⁵³ (exact as float64), never a bool, a string or a float
beyond 2⁶³; numbers are finite, strings are strings. A record that fails is left out and counted in
`problems` — never folded into the figures:
- a field of the wrong type or out of range (`"start_ns": "x"`, `"ts": true`, `"loss": "NaN"`, a step of 10³⁰),
  or a number no double holds (`1e400`, and the bare `NaN` / `Infinity` Python's json.dumps writes);
- a negative duration (`end_ns < start_ns`, `return_ns < call_ns`, `wait_end_ns < wait_ns`);
- a duplicate: a line identical to an earlier one (a file concatenated with itself), a second `step`
  record for the same step, or a second collective with the same (group, seq) on one rank;
- a record whose `rank` is not its folder's;
- a record with a time more than FAR_NS (a year) from the rank's median step start (its median record
  time without steps): the recorder's clock is one per run, so 1970 (`call_ns: 0`) or 2262 (2⁶³−1) beside
  2026 is no measurement, and kept it would make exposed times of thousands of years;
- a record with a time more than WINDOW_SLACK_NS (a minute) before its rank's recording began (meta.json
  started_ns) or after it ended (status.json ended_ns), where the caller knows them: a collective that
  "ends" months after its rank's status was written is no measurement either.
A record of a kind this reader does not know (`{"kind": "weird"}`, or none) is no error (the format may
grow) but is counted in `problems` too. Problems are grouped by cause with a count and the first line, so a
file of a million bad lines makes a handful of problem lines.

Two paths, one verdict: msgspec decodes a line straight into a typed Struct of its kind (types, int64
range and lower bounds checked in C, ~1 µs a line); a line it refuses is decoded again as a plain dict
and judged field by field in Python (`_check`), which names the cause. Only the refused lines pay for the
second path, so a well-formed run reads ~5× faster than a field-by-field check of every line.

The unit of work is one rank (`read_rank`, a plain function of a path: it runs in a worker process or on
a Dask worker, commscope.load.engine). Its records become compact columns (int64/float64 arrays, object
arrays of interned strings) before they leave the worker, so what travels and what the parent keeps is
proportional to the records kept, never to the file. `EventColumns` gathers the ranks' columns; more than
limits.EVENTS records in a run (or in one rank) is refused with one line naming the limit.
"""
from __future__ import annotations

import json
import math
from typing import Annotated, Any, Union

import msgspec
import numpy as np
import orjson
import pandas as pd

from commscope.errors import UserError
from commscope.load import limits
from commscope.load.files import DUPLICATE, TORN, gc_paused, iter_jsonl
from commscope.load.frames import COLUMNS, frame
from commscope.rundir.schema import LOSS_NONFINITE

NA = -2 ** 63  # int64 column slot for a missing value (never a valid value: checked on input)
_INT64_MAX = 2 ** 63 - 1
# Counters (steps, sequence numbers, positions, group sizes) stay exact as float64, which a counter column
# with missing values becomes (and analyses that reindex by step make of it): no run has 2⁵³ steps.
_COUNTER_MAX = 2 ** 53 - 1

# Field types: "ns" (time, int64), "int" (int64 counter), "num" (finite number), "str" (string; a
# group's name may also be written as a number), "scalar" (any string or number), "bool" (true or false).
_KINDS: dict[str, dict[str, str]] = {
    "step": {"step": "int", "start_ns": "ns", "end_ns": "ns", "loss": "num", "loss_nonfinite": "str"},
    "collective": {"step": "int", "label": "str", "phase": "str", "op": "str", "bytes": "num", "dtype": "str",
                   "group": "str", "group_size": "int", "seq": "int", "call_ns": "ns", "return_ns": "ns",
                   "wait_ns": "ns", "wait_end_ns": "ns", "start_ns": "ns", "end_ns": "ns", "stream": "scalar",
                   "timing": "str", "end_at_wait": "bool"},
    "region": {"step": "int", "micro_step": "int", "name": "str", "start_ns": "ns", "end_ns": "ns", "compute": "bool"},
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
# Every kind's first field is its step (the fast path puts -1 where it is missing).
assert all(next(iter(f)) == "step" for f in _KINDS.values())


def _field_type(name: str, t: str) -> Any:
    """The msgspec type of a field: the same checks as `_check`, so a Struct it decodes is a record `_check`
    would keep as it is (apart from the cross-field checks done after decoding)."""
    if t in ("ns", "int"):
        hi = _INT64_MAX if t == "ns" else _COUNTER_MAX
        return Annotated[int, msgspec.Meta(ge=max(-hi, _MIN.get(name, -hi)), le=hi)]
    if t == "num":
        return Annotated[float, msgspec.Meta(ge=_MIN[name])] if name in _MIN else float
    if t == "str":
        return Union[str, int] if name == "group" else str
    if t == "bool":
        return bool
    return Union[str, int, float]


def _struct(kind: str, fields: dict[str, str]) -> type:
    spec = [(f, _field_type(f, t)) if f in _REQUIRED[kind] else (f, Union[_field_type(f, t), None], None)
            for f, t in fields.items()]
    spec.append(("rank", Union[int, msgspec.UnsetType], msgspec.UNSET))  # last: astuple()[-1]
    return msgspec.defstruct(f"_{kind}", spec, tag_field="kind", tag=kind, kw_only=True, gc=False)


_STRUCTS = {kind: _struct(kind, fields) for kind, fields in _KINDS.items()}
_KIND_OF = {s: kind for kind, s in _STRUCTS.items()}
_DECODER = msgspec.json.Decoder(Union[tuple(_STRUCTS.values())])
_INDEX = {kind: {f: i for i, f in enumerate(fields)} for kind, fields in _KINDS.items()}
_NS_FIELDS = {f for fields in _KINDS.values() for f, t in fields.items() if t == "ns"}
_SPAN_IDX = {kind: tuple((_INDEX[kind][a], _INDEX[kind][b]) for a, b in spans) for kind, spans in _SPANS.items()}
_GROUP, _SEQ = _INDEX["collective"]["group"], _INDEX["collective"]["seq"]


def _decode(line: bytes) -> Any:
    """A typed Struct when msgspec accepts the line as one of our kinds, else the plain JSON value (raises
    orjson's error for a line that is not JSON: iter_jsonl's torn or corrupt line). A line that is a JSON
    object but for a number no double holds (1.5e400), or for the NaN / Infinity that Python's json.dumps
    writes for a non-finite float, is a `_NonFinite`: read_rank leaves that record out, as it does any
    record with a value out of range, where the file stays readable."""
    try:
        return _DECODER.decode(line)
    except (msgspec.DecodeError, RecursionError):  # msgspec raises the latter for ~1,000 levels of nesting
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            odd = _non_finite(line)
            if odd is None:
                raise
            return odd


class _NonFinite:
    """An events.jsonl line that is a JSON object but for numbers a double cannot hold (`cause`) in
    `fields` (its top-level keys that hold them; empty where they are nested deeper)."""

    def __init__(self, kind: Any, cause: str, fields: list[str]):
        self.kind, self.cause, self.fields = kind, cause, fields


def _non_finite(line: bytes) -> _NonFinite | None:
    """The `_NonFinite` of `line`, or None where it is no JSON object on its own terms but for those
    numbers: strict UTF-8 without lone surrogates (orjson's rules, which the stdlib reader is looser about)."""
    constants: list[str] = []
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=lambda name: constants.append(name) or float(name))
        orjson.dumps(value)  # refuses the lone surrogates ("\ud800") that orjson.loads would have refused
    except (ValueError, RecursionError, orjson.JSONEncodeError):
        return None
    if not isinstance(value, dict):
        return None
    fields = [f"{k}={v}" for k, v in value.items() if isinstance(v, float) and not math.isfinite(v)]
    cause = ("NaN or Infinity, which JSON has no value for (Python's json.dumps writes them for a non-finite "
             "float)" if constants else "a number beyond a double's range")
    return _NonFinite(value.get("kind"), cause, fields)


class _Reject(Exception):
    """A record left out; args[0] is the cause (grouped in problems), args[1] the detail of this one."""


def _int(v: Any, name: str, counter: bool = False) -> int:
    if type(v) is float and v.is_integer() and abs(v) <= _INT64_MAX:  # 1.0e3 written by another tool
        v = int(v)
    if type(v) is not int:  # bool is an int subclass: `true` is not a time
        raise _Reject(f"{name} is not an integer", f"{name}={_short(v)}")
    if not -_INT64_MAX <= v <= _INT64_MAX:
        raise _Reject(f"{name} is out of the int64 range", f"{name}={_short(v)}")
    if counter and not -_COUNTER_MAX <= v <= _COUNTER_MAX:
        raise _Reject(f"{name} is beyond ±2^53 (a counter, not a time)", f"{name}={_short(v)}")
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


def _check(rec: dict, kind: str, rank: int) -> tuple:
    """The record's values in field order, or _Reject naming why it is left out (the slow path)."""
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
            row[f] = _int(v, f, t == "int")
        elif t == "num":
            row[f] = _num(v, f)
        elif t == "str":
            if type(v) is int and f == "group":
                v = str(v)
            if type(v) is not str:
                raise _Reject(f"{f} is not a string", f"{f}={_short(v)}")
            row[f] = v
        elif t == "bool":
            if type(v) is not bool:
                raise _Reject(f"{f} is not true or false", f"{f}={_short(v)}")
            row[f] = v
        else:
            if type(v) not in (str, int, float):
                raise _Reject(f"{f} is not a string or number", f"{f}={_short(v)}")
            row[f] = v
    if row["step"] is None:
        row["step"] = -1
    for a, b in _SPANS[kind]:
        if row[a] is not None and row[b] is not None and row[b] < row[a]:
            raise _Reject(f"negative duration ({b} < {a})", f"{b} - {a} = {row[b] - row[a]} ns")
    return tuple(row.values())


def _fast(rec: Any, kind: str, rank: int) -> tuple | None:
    """The values of a Struct msgspec decoded, in field order, or None when a cross-field check fails
    (the slow path then names the cause)."""
    vals = msgspec.structs.astuple(rec)
    r = vals[-1]
    if r is not msgspec.UNSET and r != rank:
        return None
    vals = vals[:-1]
    for a, b in _SPAN_IDX[kind]:
        if vals[a] is not None and vals[b] is not None and vals[b] < vals[a]:
            return None
    if vals[0] is None or kind == "collective" and type(vals[_GROUP]) is int:
        vals = list(vals)
        if vals[0] is None:
            vals[0] = -1
        if kind == "collective" and type(vals[_GROUP]) is int:
            vals[_GROUP] = str(vals[_GROUP])
        vals = tuple(vals)
    return vals


def read_rank(path: str, rank: int, label: str, window: tuple[int | None, int | None] = (None, None)) -> dict:
    """One rank's events.jsonl at `path` (named `label` in problems), its records timed inside `window`
    (the rank's recording: meta.json started_ns, status.json ended_ns; None where unknown) give or take
    WINDOW_SLACK_NS: {"cols": kind → column → array,
    "read": distinct records read, "kept": records kept, "problems": [...], "rank": rank, "lost": what the
    rank's log lost, {"ignored": records left out, "causes": [why], "torn": a torn last line} (exact copies
    of an earlier line lose nothing and are not counted)}. A torn last line is a problem; a corrupt line
    elsewhere, or more than limits.EVENTS records, a UserError."""
    cap = limits.EVENTS.value()
    causes: dict[tuple[str, str], list] = {}  # (kind, cause) -> [count, first line, detail]
    problems: list[str] = []
    rows: dict[str, list[tuple]] = {kind: [] for kind in _KINDS}
    chunks: dict[str, list[dict]] = {kind: [] for kind in _KINDS}  # rows made columns, every _CHUNK records
    kept = 0
    step_seen: set[int] = set()
    coll_seen: set[tuple] = set()
    read = 0
    torn = False
    with gc_paused():
        for lineno, line, rec in iter_jsonl(path, dedup=True, decode=_decode):
            if rec is TORN:
                torn = True
                problems.append(f"rank {rank}: ignored a torn last line in {label}")
                continue
            if rec is DUPLICATE:
                _count(causes, ("line", "a copy of an earlier line"), lineno, "")
                continue
            read += 1
            if read > cap:
                raise limits.EVENTS.refuse(f"{path}: too many events.jsonl records in this run")
            if type(rec) is _NonFinite:
                if type(rec.kind) is str and rec.kind in _KINDS:  # another kind is not ours to judge
                    _count(causes, (rec.kind, rec.cause), lineno, ", ".join(rec.fields) or "inside a nested value")
                continue
            kind = _KIND_OF.get(type(rec))
            row = _fast(rec, kind, rank) if kind is not None else None
            try:
                if row is None:
                    if kind is not None:  # decoded, but a cross-field check failed: judge it as a dict
                        rec = orjson.loads(line)
                    if not isinstance(rec, dict):
                        raise UserError(f"{path}: line {lineno} is not a JSON object")
                    kind = rec.get("kind")
                    if type(kind) is not str or kind not in _KINDS:
                        # another kind of record (the format may grow): not ours to judge, but said, so a
                        # file of another recorder's records never reads as a rank that recorded nothing
                        _count(causes, ("line", "a record of a kind this commscope does not read (a newer "
                                                "recorder's, or another tool's)"), lineno, f"kind={_short(kind)}")
                        continue
                    row = _check(rec, kind, rank)
                if kind == "step":
                    if row[0] in step_seen:
                        raise _Reject("a second record of the same step", f"step {row[0]}")
                    step_seen.add(row[0])
                elif kind == "collective" and row[_SEQ] is not None:
                    key = (row[_GROUP], row[_SEQ])
                    if key in coll_seen:
                        raise _Reject("a second collective with the same (group, seq)",
                                      f"group {key[0]} seq {key[1]}")
                    coll_seen.add(key)
            except _Reject as e:
                _count(causes, (kind, e.args[0]), lineno, e.args[1])
                continue
            rows[kind].append(row)
            kept += 1
            if len(rows[kind]) >= _CHUNK:  # tuples cost ~4× the columns: never hold many of them
                chunks[kind].append(_columns(kind, rank, rows[kind]))
                rows[kind] = []
        cols = {kind: _concat([*chunks[kind], _columns(kind, rank, rows[kind])]) for kind in _KINDS}
    kept -= _leave_out_far(cols, causes)
    kept -= _leave_out_outside(cols, causes, window)
    for (kind, cause), (n, first, detail) in causes.items():
        what = "line" if kind == "line" else f"{kind} record"
        where = (f"{'first at ' if n > 1 else ''}line {first}{': ' + detail if detail else ''}" if first is not None
                 else f"{'e.g. ' if n > 1 else ''}{detail}")
        problems.append(f"rank {rank}: {label}: ignored {n} {what}{'s' if n > 1 else ''}: {cause} ({where})")
    if not read and not torn:  # an empty log: a rank that ended before its first record, or a file lost
        problems.append(f"rank {rank}: {label} holds no record")
    lost = [(n, cause) for (kind, cause), (n, _, _) in causes.items() if kind != "line"]
    return {"cols": cols, "read": read, "kept": kept, "problems": problems, "rank": rank,
            "lost": {"ignored": sum(n for n, _ in lost), "causes": list(dict.fromkeys(c for _, c in lost)),
                     "torn": torn}}


_CHUNK = 1 << 16  # records of one kind held as tuples before they become columns
FAR_NS = 365 * 24 * 3600 * 10 ** 9  # a record's time this far from the rank's others is no measurement
# A record's time this far outside its rank's recording (meta.json started_ns .. status.json ended_ns, both
# on the common axis: a status written without an aligned clock has no ended_ns) is no measurement either.
# A minute leaves room for a wait that returned while a signal's end unwound (ended_ns is the signal's
# arrival) and for a clock realigned mid-run, which moves the axis by the change in offset.
WINDOW_SLACK_NS = 60 * 10 ** 9


def _leave_out_outside(cols: dict[str, dict[str, np.ndarray]], causes: dict,
                       window: tuple[int | None, int | None]) -> int:
    """Drop, from one rank's columns, the records with a time more than WINDOW_SLACK_NS before the rank's
    recording began or after it ended (`window`), counting them in `causes`; the number dropped."""
    lo, hi = window
    if lo is None and hi is None:
        return 0
    return _leave_out(cols, causes, -math.inf if lo is None else lo - WINDOW_SLACK_NS,
                      math.inf if hi is None else hi + WINDOW_SLACK_NS,
                      "a time outside the rank's recording (before meta.json started_ns or after status.json "
                      "ended_ns, by more than a minute)")


def _leave_out_far(cols: dict[str, dict[str, np.ndarray]], causes: dict) -> int:
    """Drop, from one rank's columns, the records with a time more than FAR_NS from the rank's median step
    start (else its median record time), counting them in `causes`; the number dropped."""
    starts = cols["step"]["start_ns"]
    anchor = starts[starts != NA]
    if not len(anchor):
        anchor = np.concatenate([a[a != NA] for c in cols.values() for f, a in c.items() if f in _NS_FIELDS])
    if not len(anchor):
        return 0
    mid = float(np.median(anchor))
    return _leave_out(cols, causes, mid - FAR_NS, mid + FAR_NS, "a time more than a year from the rank's other records")


def _leave_out(cols: dict[str, dict[str, np.ndarray]], causes: dict, lo: float, hi: float, cause: str) -> int:
    """Drop, from one rank's columns, the records with any time outside [lo, hi], counting them in `causes`
    under `cause` with the first such field as its example; the number dropped."""
    dropped = 0
    for kind, c in cols.items():
        out = np.zeros(len(c["rank"]), dtype=bool)
        first = None
        for f in (f for f, t in _KINDS[kind].items() if t == "ns"):
            a = c[f]
            t = a.astype(np.float64)  # float: int64 differences overflow
            bad = (a != NA) & ((t < lo) | (t > hi))
            if bad.any() and first is None:
                first = f"{f}={int(a[bad][0])}"
            out |= bad
        n = int(out.sum())
        if n:
            for f in c:
                c[f] = c[f][~out]
            causes[(kind, cause)] = [n, None, first]
            dropped += n
    return dropped


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _columns(kind: str, rank: int, rows: list[tuple]) -> dict[str, np.ndarray]:
    """One rank's records of `kind` as compact columns: int64 with NA for a missing time or counter,
    float64 with NaN for a missing number, object arrays of interned strings."""
    n = len(rows)
    out: dict[str, np.ndarray] = {"rank": np.full(n, rank, dtype=np.int64)}
    by_col = list(zip(*rows)) if n else [()] * len(_KINDS[kind])
    for (f, t), vals in zip(_KINDS[kind].items(), by_col):
        if t in ("ns", "int"):
            out[f] = np.fromiter((NA if v is None else v for v in vals), dtype=np.int64, count=n)
        elif t == "num":
            out[f] = np.fromiter((math.nan if v is None else v for v in vals), dtype=np.float64, count=n)
        else:
            seen: dict = {}  # labels and names repeat on every step: one object each
            a = np.empty(n, dtype=object)
            a[:] = [seen.setdefault(v, v) for v in vals]
            out[f] = a
    if kind == "step" and n:
        # JSON has no NaN: a diverged loss is written as null beside "loss_nonfinite": "nan" (or "inf",
        # "-inf"); the column holds the value the training loop saw
        said = np.isin(out["loss_nonfinite"], list(LOSS_NONFINITE))
        out["loss"][said] = [float(v) for v in out["loss_nonfinite"][said]]
    return out


class EventColumns:
    """The records of a run's ranks (read_rank's results, added in rank order) and the problems met."""

    def __init__(self) -> None:
        self.parts: list[dict[str, dict[str, np.ndarray]]] = []
        self.read = 0  # distinct records read over all ranks (the limit counts these)
        self.problems: list[str] = []
        self.lost: dict[int, dict] = {}  # rank → read_rank's "lost", for the ranks whose log lost records

    def add(self, part: dict, path: str) -> int:
        """Keep one rank's records (`read_rank(path, …)`); the number kept."""
        self.read += part["read"]
        if self.read > limits.EVENTS.value():
            raise limits.EVENTS.refuse(f"{path}: too many events.jsonl records in this run")
        self.parts.append(part["cols"])
        self.problems += part["problems"]
        if part["lost"]["ignored"] or part["lost"]["torn"]:
            self.lost[part["rank"]] = part["lost"]
        return part["kept"]

    def read_rank(self, path: str, rank: int, label: str) -> int:
        """Read and keep one rank's events.jsonl in this process; the number of records kept."""
        return self.add(read_rank(path, rank, label), path)

    def frame(self, kind: str) -> pd.DataFrame:
        """The frame (commscope.load.frames) of one record kind, columns in the contract's order. Times
        are nullable Int64; counters int64, or float64 with NaN where some are missing; numbers float64."""
        data: dict[str, Any] = {}
        for col in COLUMNS[FRAME_OF[kind]]:
            if col != "rank" and col not in _KINDS[kind]:
                continue  # not in events.jsonl (frame() fills it)
            t = "int" if col == "rank" else _KINDS[kind][col]
            a = (np.concatenate([p[kind][col] for p in self.parts]) if self.parts else
                 np.zeros(0, dtype=object if t in ("str", "scalar", "bool") else np.float64 if t == "num" else np.int64))
            if t in ("ns", "int"):
                missing = a == NA
                if t == "ns":
                    data[col] = pd.arrays.IntegerArray(a, missing)
                elif missing.any():
                    data[col] = np.where(missing, np.nan, a.astype(np.float64))
                else:
                    data[col] = a
            elif t == "num":
                data[col] = a
            else:
                data[col] = pd.Series(a, dtype=object)
        return frame(FRAME_OF[kind], pd.DataFrame(data))


def _count(causes: dict, key: tuple[str, str], lineno: int, detail: str) -> None:
    got = causes.get(key)
    if got is None:
        causes[key] = [1, lineno, detail]
    else:
        got[0] += 1
