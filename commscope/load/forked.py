"""A minimal process pool for parsing files: `run(fn, items, workers)`, forked workers that each take the
next item from one queue and send its result back on a pipe of their own; with `in_parent`, the calling
process takes items from the same queue too.

Why not concurrent.futures: its workers stay until the parent has processed the last result and sends
exit sentinels, and its manager thread must then be joined (or it races interpreter exit on CPython 3.11).
Here every item and one end marker per worker are queued before the workers start, so a worker that
finds no more items exits at once (tearing down a forked copy of the parent takes ~10 ms), overlapping
the other workers' last items and the parent's work.

Why `in_parent`: a result parsed in the parent is neither pickled nor sent nor unpickled (~5 ms of a
~60 ms Kineto file, on the critical path), and there is one process fewer to fork and tear down; with
one process per core the parent would otherwise only wait. While it works on an item it cannot read the
pipes, so they are enlarged to hold a whole result (Linux) and a worker finishing meanwhile need not wait;
between its items the parent takes in whatever has arrived.

Invariants: results come back in the order of `items` (progress counts completions, in any order); an
item whose call raised raises in the parent (the first such item in order; from a worker, its traceback
attached as the cause); workers are reaped, or killed if the caller stops early, when the block ends.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from commscope.load.files import gc_paused

try:
    import fcntl
except ImportError:  # pragma: no cover - not Unix: pipes keep their size
    fcntl = None

_DONE = None  # the end marker in the item queue
_PIPE_BYTES = 1 << 20  # Linux's default limit for unprivileged processes (/proc/sys/fs/pipe-max-size)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, as text (attached as the exception's cause)."""

    def __str__(self) -> str:
        return self.args[0]


def _work(tasks: Any, out: Any, fn: Callable, items: list, init: Callable | None) -> None:
    if init is not None:
        init()
    while (i := tasks.get()) is not _DONE:
        try:
            out.send((i, fn(items[i]), None, None))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            out.send((i, None, e, traceback.format_exc()))
    out.close()


@contextlib.contextmanager
def run(fn: Callable, items: list, workers: int, progress: Callable[[int, int], None] | None = None,
        init: Callable | None = None, in_parent: bool = False) -> Iterator[list]:
    """`[fn(x) for x in items]` computed by `workers` forked processes (each calling `init` first) and,
    `in_parent`, by this process too (without `init`)."""
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    n = len(items)
    tasks = ctx.SimpleQueue()
    for i in range(n):
        tasks.put(i)
    for _ in range(workers + in_parent):
        tasks.put(_DONE)
    procs, readers = [], []
    finished = False
    try:
        for _ in range(workers):
            r, w = ctx.Pipe(duplex=False)
            _enlarge(r)
            p = ctx.Process(target=_work, args=(tasks, w, fn, items, init), daemon=True)
            p.start()
            w.close()  # the worker holds the writing end: EOF here means it has gone
            procs.append(p)
            readers.append(r)
        got = _Results(n, progress)
        live = list(readers)
        if in_parent:
            while (i := tasks.get()) is not _DONE:
                try:
                    value = fn(items[i])
                except Exception as e:  # noqa: BLE001 - raised in item order below, as a worker's would be
                    got.add(i, None, e, None)
                else:
                    got.add(i, value, None, None)
                got.receive(live, timeout=0)
        while got.done < n:
            if not live:
                raise RuntimeError(f"a parse worker died ({got.done} of {n} files done)")
            got.receive(live, timeout=None)
        if got.errors:
            err, tb = got.errors[min(got.errors)]
            if tb is not None:
                err.__cause__ = RemoteTraceback(tb)
            raise err
        finished = True
        yield got.values
    finally:
        for p in procs:
            if not finished:
                p.terminate()
            p.join()
        for r in readers:
            r.close()
        tasks.close()


def _enlarge(conn: Any) -> None:
    """Let the pipe behind `conn` buffer a whole result, where the platform allows (Linux ≥ 2.6.35)."""
    with contextlib.suppress(AttributeError, OSError):  # no fcntl / no F_SETPIPE_SZ / over the limit
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


class _Results:
    """Results (and errors, by item) as they complete, from the workers' pipes or from the parent."""

    def __init__(self, n: int, progress: Callable[[int, int], None] | None) -> None:
        self.values: list = [None] * n
        self.errors: dict[int, tuple] = {}
        self.done = 0
        self._progress = progress

    def add(self, i: int, value: Any, err: BaseException | None, tb: str | None) -> None:
        if err is not None:
            self.errors[i] = (err, tb)
        else:
            self.values[i] = value
        self.done += 1
        if self._progress:
            self._progress(self.done, len(self.values))

    def receive(self, readers: list, timeout: float | None) -> None:
        """Take in the results waiting on `readers` (within `timeout`: 0 polls, None blocks until one
        arrives); a reader at EOF (its worker has gone) is removed from the list."""
        with gc_paused():  # unpickling a result allocates ~10⁴ objects: no collections meanwhile
            for r in wait(readers, timeout):
                try:
                    msg = r.recv()
                except EOFError:
                    readers.remove(r)
                    continue
                self.add(*msg)
