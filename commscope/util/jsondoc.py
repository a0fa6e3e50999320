"""How commscope encodes a JSON document: every command's `--json` output and the run directory's small
JSON files are written by `document`, so they follow one set of rules.

orjson, with numpy scalars and arrays as numbers, non-string keys as strings, NaN and infinities as
null (JSON has neither; orjson's own rule), pandas' missing values (pd.NA, pd.NaT) as null, and any
other value orjson cannot write as its str(): an output never fails on a value's type. `document` is
indented (a person reads it, `jq` too); `JSON_OPTS` is the same without indentation, for the recorder's
one-line records.

Imports neither pandas nor numpy: the recorder and the launcher use it.
"""
from __future__ import annotations

from typing import Any

import orjson

JSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
_MISSING = ("NAType", "NaTType")  # pandas' types of pd.NA and pd.NaT, named as every pandas version names them


def _default(v: Any) -> Any:
    t = type(v)
    return None if t.__name__ in _MISSING and t.__module__.startswith("pandas") else str(v)


def document(obj: Any) -> bytes:
    """`obj` as an indented JSON document, without a final newline."""
    return orjson.dumps(obj, option=JSON_OPTS | orjson.OPT_INDENT_2, default=_default)


def print_document(obj: Any) -> None:
    """`obj` as one JSON document on stdout (a command's `--json`), ending with a newline."""
    import sys

    sys.stdout.write(document(obj).decode() + "\n")
    sys.stdout.flush()
