"""Durable output of one rank: append-only events.jsonl written one whole step per write (small JSON files
are written atomically by commscope.util.atomic, re-exported here).

Why one `os.write` per step: the bytes reach the kernel's page cache immediately, so a SIGKILL of the
process keeps every finished step (only a machine crash needs fsync). fsync itself can take
milliseconds on real disks, which would be a visible share of a 40 ms GPU step, so it runs on a
persistent background thread (woken per step; coalesces) and once more, blocking, at close.

Invariants: records are only appended; a step's records go out in one write (a kill can tear at most
the last line, which readers ignore); JSON files are replaced atomically (write temp + rename).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterable

import orjson

from commscope.util.jsondoc import JSON_OPTS as _OPTS
from commscope.util.atomic import write_json_atomic  # noqa: F401  (re-exported: the recorder's small JSON files)


def _encode(record: dict, _dumps=orjson.dumps, _opts=_OPTS) -> bytes:
    return _dumps(record, option=_opts, default=str)


class EventSink:
    """events.jsonl of one rank (truncated at open: a run directory belongs to one run)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        threading.Thread(target=self._fsync_loop, name="commscope-fsync", daemon=True).start()

    @staticmethod
    def encode(records: Iterable[dict]) -> list[bytes]:
        """The lines of `records` for `append` (encoded as they are resolved, written once per step)."""
        return list(map(_encode, records))

    def append(self, lines: list[bytes]) -> None:
        """Write `lines` (`encode`'s) in one write."""
        if not lines or self._fd is None:
            return
        data = b"\n".join(lines) + b"\n"  # one join: no per-line concatenation
        view = memoryview(data)
        while view:  # a regular-file write is normally whole; loop for the rare short write
            n = os.write(self._fd, view)
            view = view[n:]
        self._dirty.set()  # ~1 us; the fsync thread does the slow part

    def ends_with(self, line: bytes) -> bool:
        """Whether the file's last bytes are `line` (with its newline): a write a signal's exception
        interrupted after os.write returned did reach the file, and the caller's state must say so."""
        data = line + b"\n"
        if self._fd is None:
            return False
        try:
            size = os.fstat(self._fd).st_size
            return size >= len(data) and os.pread(self._fd, len(data), size - len(data)) == data
        except OSError:
            return False

    def _fsync_loop(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            with self._lock:
                if self._fd is None:
                    return
                try:
                    os.fsync(self._fd)
                except OSError:
                    pass  # durability is best effort; the bytes are already in the page cache

    def close(self) -> None:
        if self._fd is None:
            return
        with self._lock:  # never close the fd under a running fsync
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)  # best effort, as in the fsync thread: the bytes are in the page cache
            except OSError:
                pass
            finally:
                os.close(fd)
        self._dirty.set()  # wake the fsync thread so it sees the closed sink and exits
