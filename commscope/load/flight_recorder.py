"""NCCL Flight Recorder dumps (RUN/flight_recorder/rank_<R>, pickle or JSON; docs/faults.md) → launch
rows, a source of fault evidence independent of the recorder: their sequence numbers count every NCCL
collective of a process group, not the recorder's.

Invariants: a dump is never unpickled with the standard unpickler — `_NoGlobals` resolves no global but
TorchScript's list helpers (stand-ins that rebuild plain values), so a crafted file cannot run code and
torch is never imported; a dump is read whole only up to limits.DOC_BYTES; every field a launch row takes
is type-checked (`launch_rows`: a sequence number that is not an integer, a shape that is not a list of
small integers, a deeply nested value) and every way a dump can be broken is one UserError line naming
the file.
"""
from __future__ import annotations

import io
import json
import math
import pickle
from typing import Any

import pandas as pd

from commscope.errors import UserError
from commscope.load import limits
from commscope.load.files import read_bytes
from commscope.load.frames import LAUNCH_COLUMNS, dtype_size
from commscope.util.num import total_numel

# TorchScript's pickler (which writes Flight Recorder dumps) wraps typed lists in these helpers.
_JIT_HELPERS = {"build_intlist": list, "build_doublelist": list, "build_boollist": list, "build_tensorlist": list,
                "build_complexlist": list, "restore_type_tag": lambda value, _tag: value}


class _NoGlobals(pickle.Unpickler):
    """Flight Recorder dumps hold only builtin containers; refuse anything that would run code."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.jit._pickle" and name in _JIT_HELPERS:
            return _JIT_HELPERS[name]
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_flight_recorder(path: str) -> dict:
    """One dump as the document NCCL wrote (a dict with an 'entries' list)."""
    raw = read_bytes(path, limits.DOC_BYTES)
    if raw.lstrip()[:1] == b"{":
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: 10⁵ nested arrays
            raise UserError(f"{path}: Flight Recorder dump is not valid JSON ({' '.join(str(e).split())})") from None
    else:
        try:
            doc = _NoGlobals(io.BytesIO(raw)).load()
        except Exception as e:  # noqa: BLE001 - any corrupt pickle is the same user-facing problem
            raise UserError(f"{path}: not a Flight Recorder dump (pickle or JSON): {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise UserError(f"{path}: Flight Recorder dump without an 'entries' list")
    return doc


def launch_rows(rank: int, doc: dict) -> list[dict]:
    """A dump's collective entries → launch rows (LAUNCH_COLUMNS; point-to-point entries are left out).
    TypeError when an entry's field has the wrong type."""
    rows = []
    for e in doc.get("entries", []):
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        pg = e.get("process_group") or (e.get("pg_id"), "")
        group = pg[0] if isinstance(pg, (list, tuple)) and pg else pg
        name = e.get("profiling_name", "")
        seq, created = e.get("collective_seq_id", -1), e.get("time_created_ns")
        dtypes = e.get("input_dtypes") or []
        if (type(group) not in (str, int) or not isinstance(name, str) or type(seq) is not int
                or not (created is None or type(created) is int) or not isinstance(dtypes, list)
                or not all(isinstance(d, str) for d in dtypes) or not isinstance(e.get("state", ""), str)):
            raise TypeError("an entry with a field of the wrong type")
        name = name.removeprefix("nccl:")
        rows.append({
            "rank": rank, "group": str(group), "group_size": None,
            "seq": seq, "label": name, "op": name,
            "bytes": _input_bytes(_shapes(e.get("input_sizes")), dtypes), "dtype": ",".join(dtypes),
            "step": None, "call_ns": created, "wait_ns": None,
            "finished": e.get("state") == "completed", "source": "flight_recorder"})
    return rows


def _input_bytes(shapes: list, dtypes: list[str]) -> int | None:
    """Bytes of an entry's inputs: each input's elements × its dtype's size ("Float", "BFloat16": c10's
    names); None (unknown) when a dtype is missing or not one commscope knows, never an element count."""
    if len(dtypes) != len(shapes):
        return None
    sizes = [dtype_size(d) for d in dtypes]
    if any(math.isnan(b) for b in sizes):
        return None
    return sum(total_numel([shape]) * int(b) for shape, b in zip(shapes, sizes))


def _shapes(shapes: Any) -> list:
    """`shapes` checked to be a list of shapes, each None (a scalar) or a list of at most 16 dimensions in
    0..2⁴⁰ (so their product stays a finite float); TypeError otherwise."""
    if shapes is None:
        return []
    if not isinstance(shapes, list) or not all(
            s is None or isinstance(s, list) and len(s) <= 16 and all(type(d) is int and 0 <= d <= 2 ** 40 for d in s)
            for s in shapes):
        raise TypeError("input_sizes is not a list of shapes")
    return shapes


# The launch columns that hold integers. Each may be missing in some rows (a report without wait_ns, a
# dump without a step), which would make pandas infer float64 — 256 ns steps at today's epoch ns, and
# byte counts printed as 393216.0 — so they are built as nullable Int64 from the files' Python ints
# (docs/frames.md: `_ns` columns are never float).
INT_LAUNCH_COLUMNS = ("group_size", "seq", "bytes", "step", "call_ns", "wait_ns")


def launch_frame(rows: list[dict]) -> pd.DataFrame:
    """Launch rows (LAUNCH_COLUMNS) as a frame, INT_LAUNCH_COLUMNS exact as nullable Int64."""
    df = pd.DataFrame(rows, columns=LAUNCH_COLUMNS)
    for c in INT_LAUNCH_COLUMNS:
        df[c] = pd.array([r[c] for r in rows], dtype="Int64")
    return df
