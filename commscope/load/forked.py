"""A minimal process pool for parsing files: `run(fn, items, workers)`, forked workers that each take the
next item from one queue and send its result back on a pipe of their own.

Why not concurrent.futures: its workers stay until the parent has processed the last result and sends
exit sentinels, and its manager thread must then be joined (or it races interpreter exit on CPython 3.11).
Here every item and one end marker per worker are queued before the workers start, so a worker that
finds no more items exits at once (tearing down a forked copy of the parent takes ~10 ms), overlapping
the other workers' last items and the parent's work; nothing runs in the parent but the caller.

Invariants: results come back in the order of `items` (progress counts completions, in any order); an
item whose call raised raises in the parent (the first such item in order, the worker's traceback
attached as its cause); workers are reaped, or killed if the caller stops early, when the block ends.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from commscope.load.files import gc_paused

_DONE = None  # the end marker in the item queue


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
        init: Callable | None = None) -> Iterator[list]:
    """`[fn(x) for x in items]` computed by `workers` forked processes (each calling `init` first)."""
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    n = len(items)
    tasks = ctx.SimpleQueue()
    for i in range(n):
        tasks.put(i)
    for _ in range(workers):
        tasks.put(_DONE)
    procs, readers = [], []
    finished = False
    try:
        for _ in range(workers):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_work, args=(tasks, w, fn, items, init), daemon=True)
            p.start()
            w.close()  # the worker holds the writing end: EOF here means it has gone
            procs.append(p)
            readers.append(r)
        results: list = [None] * n
        errors: dict[int, tuple] = {}
        with gc_paused():  # unpickling the results allocates ~10⁵ objects: no collections meanwhile
            _receive(list(readers), results, errors, progress)
        if errors:
            err, tb = errors[min(errors)]
            err.__cause__ = RemoteTraceback(tb)
            raise err
        finished = True
        yield results
    finally:
        for p in procs:
            if not finished:
                p.terminate()
            p.join()
        for r in readers:
            r.close()
        tasks.close()


def _receive(readers: list, results: list, errors: dict, progress: Callable[[int, int], None] | None) -> None:
    """Fill `results` (and `errors`, by item) from the workers' pipes as results arrive."""
    n, done = len(results), 0
    while done < n:
        if not readers:
            raise RuntimeError(f"a parse worker died ({done} of {n} files done)")
        for r in wait(readers):
            try:
                i, value, err, tb = r.recv()
            except EOFError:
                readers.remove(r)
                continue
            if err is not None:
                errors[i] = (err, tb)
            else:
                results[i] = value
            done += 1
            if progress:
                progress(done, n)
