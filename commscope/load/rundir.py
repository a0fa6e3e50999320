"""A commscope run directory (docs/run_format.md) → `Trace`.

Reads summary.json / config.json (both optional), and per `rank<N>/` folder meta.json, events.jsonl
(a torn last line is ignored, as the format allows) and status.json; a rank's `trace.json.gz`, when
present, is parsed as a Kineto trace to fill `kernels` and `ops`. A rank folder without data is listed in
`problems` rather than failing the whole load: the other ranks can still be analyzed. The run's fault
evidence (watchdog/inflight reports, Flight Recorder dumps) becomes `Trace.faults` (commscope.load.evidence).
"""
from __future__ import annotations

import os

import numpy as np

from commscope.errors import UserError
from commscope.load.evidence import read_fault_evidence
from commscope.load import limits
from commscope.load.events import EventColumns
from commscope.load.files import is_regular, read_json
from commscope.load.frames import Trace, frame
from commscope.load.kineto_pool import attach_ops, concat_parts, parse_files
from commscope.rundir import check_doc, rank_dirs
from commscope.rundir.schema import CONFIG, EVENTS, KINETO_TRACE, META, STATUS, SUMMARY, WATCHDOG
from commscope.util.ranges import int_ranges

# Regions that are computation; containers (optimizer, opt.phase*) also hold communication waits.
_COMPUTE_NAMES = ("forward", "backward")
_COMPUTE_PREFIXES = ("update:", "compute:")


def _optional_json(path: str, name: str) -> dict | None:
    """The run directory's document `name` at `path`, type-checked (commscope.rundir.check_doc); None
    when there is none."""
    if not is_regular(path):
        return None
    return check_doc(read_json(path), path, name)


def _regular_or_problem(path: str, rank: int, problems: list[str]) -> bool:
    """True when `path` is a regular file; a FIFO, directory or symlink loop in its place is a problem of
    `rank` (reading it would block or fail), not a reason to refuse the other ranks."""
    try:
        return is_regular(path)
    except UserError as e:
        problems.append(f"rank {rank}: {e}; ignored")
        return False


def is_compute_region(name: str) -> bool:
    return name in _COMPUTE_NAMES or name.startswith(_COMPUTE_PREFIXES)


def load(path: str, progress=None, with_ops: bool = False, workers: int | None = None) -> Trace:
    max_ws = limits.WORLD_SIZE.value()
    summary = _optional_json(os.path.join(path, SUMMARY), SUMMARY)
    config = _optional_json(os.path.join(path, CONFIG), CONFIG)
    dirs = rank_dirs(path)
    if not dirs:
        raise UserError(f"{path} is a run directory without rank*/ folders: nothing was recorded")
    if max(dirs) >= max_ws:  # before anything is sized by it: an empty rank99999999999/ allocates nothing
        raise limits.WORLD_SIZE.refuse(f"{path}: rank folder rank{max(dirs)} is beyond the largest world size")
    problems: list[str] = []
    events = EventColumns()
    metas: dict[int, dict] = {}
    statuses: dict[int, dict] = {}
    no_data: set[int] = set()
    kfiles = {r: os.path.join(d, KINETO_TRACE) for r, d in sorted(dirs.items())  # profiler traces
              if _regular_or_problem(os.path.join(d, KINETO_TRACE), r, problems)}
    total = len(dirs) + len(kfiles)  # progress: rank folders, then their traces (the slow part)
    for i, (rank, d) in enumerate(sorted(dirs.items())):
        meta = _optional_json(os.path.join(d, META), META)
        if meta is not None:
            if meta.get("rank", rank) != rank:
                raise UserError(f"{d}/{META} says rank {meta.get('rank')}, folder says rank {rank}")
            metas[rank] = meta
        st = _optional_json(os.path.join(d, STATUS), STATUS)
        if st is not None:
            statuses[rank] = st
            if st.get("status") not in (None, "completed"):
                problems.append(f"rank {rank}: {st.get('status')}"
                                + (f": {st['error']}" if st.get("error") else ""))
        if os.path.isfile(os.path.join(d, WATCHDOG)):
            problems.append(f"rank {rank}: the hang watchdog fired (see {d}/{WATCHDOG})")
        ev = os.path.join(d, EVENTS)
        if _regular_or_problem(ev, rank, problems):
            events.read_rank(ev, rank, EVENTS)
        else:
            if not os.path.lexists(ev):
                problems.append(f"rank {rank}: no {EVENTS}")
            no_data.add(rank)
        if progress:
            progress(i + 1, total)
    problems += events.problems
    sizes = {m["world_size"] for m in metas.values() if "world_size" in m}
    if summary and "world_size" in summary:
        sizes.add(summary["world_size"])
    if sizes and max(sizes) > max_ws:
        raise limits.WORLD_SIZE.refuse(f"{path}: world_size {max(sizes):,} is beyond the largest world size")
    if len(sizes) > 1:
        raise UserError(f"{path}: ranks disagree on world_size: {sorted(sizes)}")
    ws = sizes.pop() if sizes else max(dirs) + 1
    if any(r >= ws for r in dirs):
        outside = int_ranges((r for r in dirs if r >= ws), sep=", ", most=20)
        raise UserError(f"{path}: rank folder(s) [{outside}] outside world_size {ws}")
    missing = [r for r in range(ws) if r not in dirs]
    if missing:
        problems.append(f"no folder for rank(s) [{int_ranges(missing, sep=', ', most=20)}] of {ws}")
    any_meta = next(iter(metas.values()), {})
    trace = Trace(source="run", path=path, world_size=ws,
                  backend=(summary or {}).get("backend", any_meta.get("backend")),
                  device=(summary or {}).get("device", any_meta.get("device")),
                  config={"summary": summary or {}, "config": config or {},
                          "meta": {str(r): m for r, m in metas.items()},
                          "status": {str(r): s for r, s in statuses.items()}},
                  ranks=sorted(set(dirs) - no_data),
                  problems=problems)
    _fill_from_records(trace, events)
    with parse_files(list(kfiles.values()), with_ops=with_ops, workers=workers,  # the profiled window
                     progress=(lambda j, _n: progress(len(dirs) + j, total)) if progress else None) as kparts:
        _attach_kineto(trace, kparts, kfiles, with_ops, workers)
    trace.faults = read_fault_evidence(path, dirs)
    return trace


def _attach_kineto(trace: Trace, kparts: list, kfiles: dict, with_ops: bool, workers: int | None) -> None:
    """The profiler traces' kernels, ops, regions and device properties, from their parsed parts."""
    kernels = concat_parts(kparts, "kernels")
    if kernels is not None:
        trace.kernels = kernels
    if kfiles:
        attach_ops(trace, kparts, list(kfiles.values()), with_ops, workers)
        trace.config["files"] = kfiles
    # The profiled window's record_function ranges, on the same clock as `ops` (events.jsonl regions are
    # on the common axis, which differs from Kineto's by the clock offset): used to attribute ops.
    ann = concat_parts(kparts, "regions")
    if ann is not None:
        trace.extra["kineto_regions"] = ann
    props = next((p["info"]["deviceProperties"] for p in kparts if p["info"].get("deviceProperties")), None)
    if props:
        trace.config["deviceProperties"] = props


def _fill_from_records(trace: Trace, events: EventColumns) -> None:
    trace.steps = events.frame("step").sort_values(["rank", "step"]).reset_index(drop=True)
    c = events.frame("collective")
    trace.collectives = c.sort_values(["rank", "call_ns"], kind="stable").reset_index(drop=True)
    reg = events.frame("region")
    trace.regions = reg.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    comp = reg[reg["name"].map(is_compute_region).astype(bool)] if len(reg) else reg
    trace.compute = frame("compute", comp.assign(stream=np.nan, kind="region")[
        ["rank", "step", "name", "start_ns", "end_ns", "stream", "kind"]] if len(comp) else None)
    trace.hooks = events.frame("hook")

