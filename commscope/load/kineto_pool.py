"""Parsing several Kineto files into per-rank parts (`kineto.parse_file`), and giving a loaded Trace its
`ops` frame from them.

Files are parsed in a process pool when there are several files and cores: decoding JSON is CPU-bound and
per-file independent, and the per-rank frames that come back are small. Used by the loader for folders of
traces and by `rundir` for a run directory's profiler traces.
"""
from __future__ import annotations

import functools
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

import pandas as pd

from commscope.load import kineto
from commscope.load.files import gc_paused

Progress = Callable[[int, int], None]


def parse_all(files: list[str], progress: Progress | None = None, workers: int | None = None,
              fn: Callable = kineto.parse_file) -> list:
    n = len(files)
    if workers is None:
        workers = min(n, os.cpu_count() or 1)
    if workers <= 1 or n <= 1:
        out = []
        for i, f in enumerate(files):
            out.append(fn(f))
            if progress:
                progress(i + 1, n)
        return out
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=kineto.keep_documents) as pool, \
            gc_paused():  # unpickling the frames allocates ~10⁵ objects; no collections meanwhile
        futs = [pool.submit(fn, f) for f in files]
        out = []
        for i, fu in enumerate(futs):
            out.append(fu.result())
            if progress:
                progress(i + 1, n)
    return out


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
                workers: int | None = None) -> list:
    """Per-rank parts of `files` (kineto.parse_file), with the `ops` frame when `with_ops`."""
    fn = functools.partial(kineto.parse_file, with_ops=True) if with_ops else kineto.parse_file
    return parse_all(files, progress=progress, workers=workers, fn=fn)


def attach_ops(trace: Any, parts: list, files: list[str], with_ops: bool, workers: int | None) -> None:
    """`trace.ops` from `parts` when they were parsed with ops, else loaded on first access (Trace.ops)."""
    if with_ops:
        trace.ops = concat_parts(parts, "ops")
    else:
        trace._ops_loader = lambda: load_ops(files, workers)
