"""Writing files atomically: a temporary file in the same folder, then `os.replace`, so a reader
(another rank, `commscope doctor`, the launcher) never sees half a file, whatever kills the writer, and a
write that fails (a full disk) leaves the previous file as it was and no temporary file.

Torch-free and pandas-free on purpose: the launcher and the trainer's exit paths (which may run before
torch is imported) use it, as does the recorder (`commscope.recording.sink` re-exports it). Where a
command may write is commscope.util.outputs' rule; how a JSON document is encoded, commscope.util.jsondoc's.
"""
from __future__ import annotations

import contextlib
import io
import os
import secrets
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from commscope.util.jsondoc import document

_CHUNK = 1 << 20


def _write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd`, a chunk at a time (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


def _temp_name(path: Path) -> Path:
    """A fresh hidden name beside `path`: `.<name>.tmp<pid>-<random>` (the name cut so it stays under
    the file system's 255-byte limit)."""
    stem = os.fsencode(path.name)[:200]
    return path.with_name(f".{os.fsdecode(stem)}.tmp{os.getpid()}-{secrets.token_hex(4)}")


# A temporary file is created new: never an existing file or a link someone left there
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _temp_with(path: Path, data: bytes) -> Path:
    """A new temporary file beside `path` (mode 0666 less the umask) holding `data`; removed again when
    writing it fails in any way, a signal's KeyboardInterrupt included."""
    tmp = _temp_name(path)
    fd = os.open(tmp, _TEMP_FLAGS, 0o666)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except BaseException:
        # a full disk or a signal mid-write must not leave a zero-byte or half temp file behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """`data` to `path` through a temporary file in the same folder (_temp_with) and `os.replace`; the
    temporary file is removed on any failure."""
    tmp = _temp_with(Path(path), data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def create_bytes_atomic(path: str | os.PathLike, data: bytes) -> bool:
    """`data` to `path` only if no file is there, complete when it appears: through a temporary file as
    write_bytes_atomic, then `os.link`, which refuses an existing name (atomic on NFS too, where O_EXCL
    was not always). True if this call created `path`, False if something was there first; the temporary
    file is removed either way."""
    tmp = _temp_with(Path(path), data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


class _FdWriter(io.RawIOBase):
    """A raw binary file on `fd` whose writes go through _write_all (all of the data, or an OSError)."""

    def __init__(self, fd: int):
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        _write_all(self.fd, data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self.fd)
            finally:
                super().close()


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write `path` in pieces, with write_bytes_atomic's guarantees: the pieces go to a
    new temporary file in the same folder (O_EXCL, O_NOFOLLOW, mode 0666 less the umask), which replaces
    `path` by `os.replace` when the `with` block ends normally, and is removed when it ends by any
    exception (a full disk, MemoryError, a signal's KeyboardInterrupt): never a partial output."""
    path = Path(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, _TEMP_FLAGS, 0o666)
    try:
        with io.BufferedWriter(_FdWriter(fd), _CHUNK) as f:  # closing it closes fd
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as an indented JSON document (commscope.util.jsondoc) to `path`, atomically."""
    write_bytes_atomic(path, document(obj) + b"\n")
