"""Writing output files: atomically (a temporary file in the same folder, then `os.replace`, so a reader
— another rank, `commscope doctor`, the launcher — never sees half a file, whatever kills the writer), and
never into an input directory (`check_output`).

Torch-free and pandas-free on purpose: the launcher and the trainer's exit paths (which may run before
torch is imported) use it, as does the recorder (`commscope.recording.sink` re-exports it).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import orjson

from commscope.errors import UserError

JSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")  # per process: two writers never share it
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        # a full disk or a signal mid-write must not leave a zero-byte or half temp file behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=JSON_OPTS | orjson.OPT_INDENT_2, default=str) + b"\n")


def check_output(out: str | os.PathLike, src: str | os.PathLike | None) -> None:
    """Refuse an output inside the input directory `src` (commscope never writes where it reads; None: no
    input directory, e.g. a trace built in memory), onto a directory, or in a folder that does not exist; one
    clear UserError line each."""
    o = Path(out).resolve()
    s = Path(src).resolve() if src is not None else None
    if s is not None and s.is_dir() and (o.parent == s or s in o.parents):
        raise UserError(f"refusing to write {out} inside the input directory {src}; choose an output elsewhere")
    if o.is_dir():
        raise UserError(f"{out} is a directory; give a file name to write")
    if not o.parent.is_dir():
        raise UserError(f"output directory {o.parent} does not exist")
