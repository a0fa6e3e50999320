"""`load_path`: decide what a path is (run directory, folder of Kineto traces, one trace file), load it,
and check that the ranks fit together (no duplicates, one world size).

Kineto files are parsed by `commscope.load.kineto_pool` (a process pool when there are several files and
cores), for a folder of traces and for a run directory's profiler traces alike.
"""
from __future__ import annotations

import os


from commscope.errors import UserError
from commscope.load import rundir
from commscope.load.files import is_trace_file, list_trace_files
from commscope.load.frames import COLUMNS, Trace
from commscope.load.kineto_pool import Progress, attach_ops, concat_parts, parse_files
from commscope.rundir import is_run_dir


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
    if os.path.isdir(path) and is_run_dir(path):
        trace = rundir.load(path, progress=progress, with_ops=with_ops, workers=workers)
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


def load_kineto_files(files: list[str], path: str, progress: Progress | None = None,
                      workers: int | None = None, with_ops: bool = False) -> Trace:
    with parse_files(files, with_ops=with_ops, progress=progress, workers=workers) as parts:
        return _assemble(parts, files, path, workers, with_ops)


def _assemble(parts: list, files: list[str], path: str, workers: int | None, with_ops: bool) -> Trace:
    """One Trace of the per-rank parts, after checking that they fit together."""
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
    # The frames go to the constructor: a kind left out is built empty by its default factory, which for
    # all of them cost about half of this function.
    frames = {}
    for kind in COLUMNS:
        if kind == "ops":
            continue
        df = concat_parts(parts, kind)
        if df is not None:
            frames[kind] = df
        elif kind == "kernels" and parts:
            frames[kind] = parts[0][kind]
    trace = Trace(source="kineto", path=path, world_size=ws, backend=parts[0]["backend"],
                  device="cuda" if has_gpu else "cpu",
                  config={"distributedInfo": parts[0]["info"]["distributedInfo"],
                          "deviceProperties": parts[0]["info"]["deviceProperties"],
                          "files": {p["rank"]: p["info"]["file"] for p in parts}},
                  ranks=ranks, problems=problems, **frames)
    attach_ops(trace, parts, files, with_ops, workers)
    extra = concat_parts(parts, "hta_cpu_stream_ops")
    trace.extra["hta_cutoff_ns"] = {p["rank"]: p["hta_cutoff_ns"] for p in parts}
    if extra is not None:
        trace.extra["hta_cpu_stream_ops"] = extra
    return trace
