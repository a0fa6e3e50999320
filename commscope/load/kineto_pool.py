"""Parsing several Kineto files into per-rank parts (`kineto.parse_file`), and giving a loaded Trace its
`ops` frame from them.

Files are parsed by forked worker processes and this one (`commscope.load.forked`, one process per
core; fewer at once when the files together pass COMMSCOPE_MAX_PARSE_MB) when there are several files
and cores: decoding JSON is CPU-bound and per-file independent, and the per-rank frames that come back
are small. Used by the loader for folders of traces and by `rundir`
for a run directory's profiler traces.

Callers use the parts inside `parsing`'s block, and the workers are reaped at its end: each worker exits
as soon as no file is left for it, so its exit overlaps the other workers' last files and the parent's
concatenation. Invariant: parts come back in the order of `files`, and when files fail, the error raised
is that of the first failing file in that order, whatever finished first.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Callable, Iterator

import pandas as pd

from commscope.load import forked, kineto, limits

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
    # this process parses its share too (see forked.run): one worker fewer to fork
    with forked.run(fn, files, workers - 1, progress, init=kineto.keep_documents, in_parent=True,
                    cost=limits.parse_cost, budget=limits.PARSE_BYTES.value()) as parts:
        yield parts


def load_ops(files: list[str], workers: int | None = None, ranks: dict[str, int] | None = None,
             scheduler: Any = None) -> pd.DataFrame:
    """The `ops` frame of Kineto files (a second, ops-only parse: see `Trace.ops`); `ranks`: file → the
    rank the loader settled on (where the file itself does not say)."""
    from commscope.load.engine import map_files

    frames = map_files(kineto.parse_ops, files, scheduler=scheduler, workers=workers)
    for f, df in zip(files, frames):
        if ranks and f in ranks and df is not None and len(df):
            df["rank"] = ranks[f]
    return concat_ops(frames)


def concat_ops(frames: list) -> pd.DataFrame | None:
    """The non-empty frames concatenated; None when there are none."""
    dfs = [d for d in frames if d is not None and len(d)]
    return pd.concat(dfs, ignore_index=True) if dfs else None


def concat_parts(parts: list, key: str) -> pd.DataFrame | None:
    """Frame `key` of every per-rank part (parse_file's dicts) concatenated; None when all are empty."""
    return concat_ops([p[key] for p in parts])


def parse_files(files: list[str], *, with_ops: bool, progress: Progress | None = None,
                workers: int | None = None, scheduler: Any = None,
                skip_non_traces: bool = False) -> contextlib.AbstractContextManager[list]:
    """Per-rank parts of `files` (kineto.parse_file), with the `ops` frame when `with_ops`: a context
    manager (see `parsing`); on the Dask cluster at `scheduler` when one is given (commscope.load.engine).
    `skip_non_traces`: a file that is no chrome trace gives `{"skipped": line, "error": message}`
    (kineto.parse_file_or_skip) instead of raising."""
    parse = kineto.parse_file_or_skip if skip_non_traces else kineto.parse_file
    fn = functools.partial(parse, with_ops=True) if with_ops else parse
    if scheduler is not None:
        from commscope.load.engine import map_files

        return contextlib.nullcontext(map_files(fn, files, scheduler=scheduler, progress=progress))
    return parsing(files, progress=progress, workers=workers, fn=fn)


def attach_ops(trace: Any, parts: list, files: list[str], with_ops: bool, workers: int | None,
               ranks: dict[str, int] | None = None, scheduler: Any = None) -> None:
    """`trace.ops` from `parts` when they were parsed with ops, else loaded on first access (Trace.ops);
    `ranks`: file → rank, as in `load_ops`."""
    if with_ops:
        trace.ops = concat_parts(parts, "ops")
    else:
        trace._ops_loader = lambda: load_ops(files, workers, ranks, scheduler)
