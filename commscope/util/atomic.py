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
    input directory, e.g. a trace built in memory), onto a directory, an output that is an input file under
    another name (a hard link or symlink to it: compared by device and inode, `_input_named`), or one in a
    folder that does not exist; one clear UserError line each."""
    o, s = _resolve(out), _resolve(src) if src is not None else None
    if s is not None and s.is_dir() and (o.parent == s or s in o.parents):
        raise UserError(f"refusing to write {out} inside the input directory {src}; choose an output elsewhere")
    if o.is_dir():
        raise UserError(f"{out} is a directory; give a file name to write")
    if s is not None:
        same = _input_named(out, s)
        if same is not None:
            raise UserError(f"refusing to write {out}: it is the input file {same} (a hard link or symlink to "
                            "it); choose an output elsewhere")
    if not o.parent.is_dir():
        raise UserError(f"output directory {o.parent} does not exist")


def _resolve(p: str | os.PathLike) -> Path:
    try:
        return Path(p).resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError: a symlink loop
        raise UserError(f"cannot resolve {p}: {e}") from None


def _input_named(out: str | os.PathLike, src: Path) -> str | None:
    """The file of the input `src` (a file, or a folder's files two levels deep: a run directory's rank
    folders, a trace folder) that the existing file `out` is, by (device, inode); None when none is."""
    try:
        o = os.stat(out)
    except OSError:
        return None  # nothing there yet: writing creates a new file
    key = (o.st_dev, o.st_ino)
    todo = [(src, 0)]
    while todo:
        p, depth = todo.pop()
        try:
            st = os.stat(p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return str(p)
        if depth < 2 and p.is_dir():
            try:
                todo += [(p / n, depth + 1) for n in os.listdir(p)]
            except OSError:
                continue
    return None
