"""`load_path`: decide what a path is (run directory, folder of Kineto traces, one trace file), load it,
and check that the ranks fit together (no duplicates, one world size).

Kineto files are parsed in a process pool when there are several files and cores: decoding JSON is
CPU-bound and per-file independent, and the per-rank frames that come back are small.
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

import multiprocessing as mp
import pandas as pd

from commscope.errors import UserError
from commscope.load import kineto, rundir
from commscope.load.files import gc_paused, is_trace_file, list_trace_files
from commscope.load.frames import COLUMNS, Trace

Progress = Callable[[int, int], None]


def load_path(path: str, steps: tuple[int, int] | None = None, progress: Progress | None = None,
              workers: int | None = None, with_ops: bool = False) -> Trace:
    """Load a run directory or Kineto trace(s). `steps=(a, b)` keeps steps a ≤ s < b.

    `progress(done, total)` is called after each rank file; `workers` caps the parse processes
    (default: one per core, at most one per file; 1 = in this process). `with_ops` builds `Trace.ops` in
    the same pass (for callers that will read it anyway, e.g. the HTML report's layout section); without
    it `ops` is parsed on first access, a second pass over the files.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file or directory")
    if os.path.isdir(path) and rundir.is_run_dir(path):
        trace = rundir.load(path, progress=progress, with_ops=with_ops)
    else:
        if os.path.isfile(path):
            if not is_trace_file(path):
                raise UserError(f"{path} is not a Kineto trace (.json / .json.gz) or a run directory")
            files = [path]
        else:
            files = list_trace_files(path)
            if not files:
                raise UserError(f"{path} holds no run directory (summary.json, config.json, rank*/) "
                                "and no Kineto traces (*.json, *.json.gz)")
        trace = load_kineto_files(files, path, progress=progress, workers=workers, with_ops=with_ops)
    return trace.select_steps(steps)


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
    dfs = [d for d in frames if d is not None and len(d)]
    return pd.concat(dfs, ignore_index=True) if dfs else None


def load_kineto_files(files: list[str], path: str, progress: Progress | None = None,
                      workers: int | None = None, with_ops: bool = False) -> Trace:
    parts = parse_all(files, progress=progress, workers=workers,
                      fn=functools.partial(kineto.parse_file, with_ops=True) if with_ops else kineto.parse_file)
    seen: dict[int, str] = {}
    for p in parts:
        if p["rank"] in seen:
            raise UserError(f"rank {p['rank']} appears twice: {seen[p['rank']]} and {p['info']['file']}")
        seen[p["rank"]] = p["info"]["file"]
    sizes = {p["world_size"] for p in parts}
    if len(sizes) > 1:
        raise UserError(f"traces in {path} disagree on world_size: {sorted(sizes)}")
    ws = sizes.pop()
    parts.sort(key=lambda p: p["rank"])
    ranks = [p["rank"] for p in parts]
    problems = []
    bad = [r for r in ranks if not 0 <= r < ws]
    if bad:
        raise UserError(f"rank(s) {bad} outside world_size {ws} in {path}")
    missing = sorted(set(range(ws)) - set(ranks))
    if missing:
        problems.append(f"no trace for rank(s) {missing} of {ws}")
    for p in parts:
        if not len(p["steps"]):
            problems.append(f"rank {p['rank']}: no ProfilerStep annotations (events get step −1)")
    has_gpu = any(len(p["kernels"]) for p in parts)
    trace = Trace(source="kineto", path=path, world_size=ws, backend=parts[0]["backend"],
                  device="cuda" if has_gpu else "cpu",
                  config={"distributedInfo": parts[0]["info"]["distributedInfo"],
                          "deviceProperties": parts[0]["info"]["deviceProperties"],
                          "files": {p["rank"]: p["info"]["file"] for p in parts}},
                  ranks=ranks, problems=problems)
    if with_ops:
        trace.ops = concat_ops([p["ops"] for p in parts])
    else:
        trace._ops_loader = lambda: load_ops(files, workers)
    for kind in COLUMNS:
        if kind == "ops":
            continue
        dfs = [p[kind] for p in parts if len(p[kind])]
        if dfs:
            setattr(trace, kind, pd.concat(dfs, ignore_index=True))
        elif kind == "kernels" and parts:
            setattr(trace, kind, parts[0][kind])
    extra = [p["hta_cpu_stream_ops"] for p in parts if len(p["hta_cpu_stream_ops"])]
    trace.extra["hta_cutoff_ns"] = {p["rank"]: p["hta_cutoff_ns"] for p in parts}
    if extra:
        trace.extra["hta_cpu_stream_ops"] = pd.concat(extra, ignore_index=True)
    return trace
