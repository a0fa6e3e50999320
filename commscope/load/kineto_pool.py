"""Parsing several Kineto files into per-rank parts (`kineto.parse_file`), and giving a loaded Trace its
`ops` frame from them.

Files are parsed in a process pool when there are several files and cores: decoding JSON is CPU-bound and
per-file independent, and the per-rank frames that come back are small. Used by the loader for folders of
traces and by `rundir` for a run directory's profiler traces.

The parent takes each part as it arrives (progress counts completions), and callers use the parts inside
`parsing`'s block: the workers' exit (~10 ms: tearing down a forked copy of the parent) overlaps that work
(concatenating the frames) instead of preceding it. Invariant: parts come back in the order of `files`, and when
files fail, the error raised is that of the first failing file in that order, whatever finished first.
"""
from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator

import pandas as pd

from commscope.load import kineto
from commscope.load.files import gc_paused

Progress = Callable[[int, int], None]


def parse_all(files: list[str], progress: Progress | None = None, workers: int | None = None,
              fn: Callable = kineto.parse_file) -> list:
    with parsing(files, progress, workers, fn) as parts:
        return parts


@contextlib.contextmanager
def parsing(files: list[str], progress: Progress | None = None, workers: int | None = None,
            fn: Callable = kineto.parse_file) -> Iterator[list]:
    """`fn` of every file, in the order of `files`; pool workers are reaped when the block ends, so their
    exit overlaps whatever the block does with the parts."""
    n = len(files)
    if workers is None:
        workers = min(n, os.cpu_count() or 1)
    if workers <= 1 or n <= 1:
        out = []
        for i, f in enumerate(files):
            out.append(fn(f))
            if progress:
                progress(i + 1, n)
        yield out
        return
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=kineto.keep_documents)
    where = {pool.submit(fn, f): i for i, f in enumerate(files)}
    # Shut down at once: submitted work still runs, and the executor's thread sends the exit sentinels as
    # soon as the last part is in, then reaps the workers by itself. Joining that thread only when the
    # caller is done keeps the workers' CPU time accounted to this call and the thread from racing
    # interpreter exit (CPython 3.11's executor can then write to a closed pipe).
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False)
    try:
        with gc_paused():  # unpickling the frames allocates ~10⁵ objects; no collections meanwhile
            out = [None] * n
            for done, fu in enumerate(as_completed(where), 1):
                out[where[fu]] = fu
                if progress:
                    progress(done, n)
        yield [fu.result() for fu in out]  # raises the first failing file's error, in file order
    finally:
        for fu in where:
            fu.cancel()  # only files not started yet, when interrupted
        if manager is not None:
            manager.join()


def load_ops(files: list[str], workers: int | None = None) -> pd.DataFrame:
    """The `ops` frame of Kineto files (a second, ops-only parse: see `Trace.ops`)."""
    return concat_ops(parse_all(files, workers=workers, fn=kineto.parse_ops))


def concat_ops(frames: list) -> pd.DataFrame | None:
    """The non-empty frames concatenated; None when there are none."""
    dfs = [d for d in frames if d is not None and len(d)]
    return pd.concat(dfs, ignore_index=True) if dfs else None


def concat_parts(parts: list, key: str) -> pd.DataFrame | None:
    """Frame `key` of every per-rank part (parse_file's dicts) concatenated; None when all are empty."""
    return concat_ops([p[key] for p in parts])


def parse_files(files: list[str], *, with_ops: bool, progress: Progress | None = None,
                workers: int | None = None) -> contextlib.AbstractContextManager[list]:
    """Per-rank parts of `files` (kineto.parse_file), with the `ops` frame when `with_ops`: a context
    manager (see `parsing`)."""
    fn = functools.partial(kineto.parse_file, with_ops=True) if with_ops else kineto.parse_file
    return parsing(files, progress=progress, workers=workers, fn=fn)


def attach_ops(trace: Any, parts: list, files: list[str], with_ops: bool, workers: int | None) -> None:
    """`trace.ops` from `parts` when they were parsed with ops, else loaded on first access (Trace.ops)."""
    if with_ops:
        trace.ops = concat_parts(parts, "ops")
    else:
        trace._ops_loader = lambda: load_ops(files, workers)
