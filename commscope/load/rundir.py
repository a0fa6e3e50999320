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
import pandas as pd

from commscope.errors import UserError
from commscope.load.evidence import read_fault_evidence
from commscope.load.files import read_json, read_jsonl
from commscope.load.frames import COLUMNS, Trace, frame, is_ns, ns_array
from commscope.load.kineto_pool import attach_ops, concat_parts, parse_files
from commscope.rundir import check_schema, rank_dirs
from commscope.rundir.schema import CONFIG, EVENTS, KINETO_TRACE, META, STATUS, SUMMARY, WATCHDOG

# Regions that are computation; containers (optimizer, opt.phase*) also hold communication waits.
_COMPUTE_NAMES = ("forward", "backward")
_COMPUTE_PREFIXES = ("update:", "compute:")


def _optional_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise UserError(f"{path} is not a JSON object")
    check_schema(doc, path)
    return doc


def is_compute_region(name: str) -> bool:
    return name in _COMPUTE_NAMES or name.startswith(_COMPUTE_PREFIXES)


def load(path: str, progress=None, with_ops: bool = False, workers: int | None = None) -> Trace:
    summary = _optional_json(os.path.join(path, SUMMARY))
    config = _optional_json(os.path.join(path, CONFIG))
    dirs = rank_dirs(path)
    if not dirs:
        raise UserError(f"{path} is a run directory without rank*/ folders: nothing was recorded")
    problems: list[str] = []
    recs: dict[str, list[dict]] = {"step": [], "collective": [], "region": [], "hook": []}
    metas: dict[int, dict] = {}
    statuses: dict[int, dict] = {}
    no_data: set[int] = set()
    kfiles = {r: os.path.join(d, KINETO_TRACE) for r, d in sorted(dirs.items())  # profiler traces
              if os.path.isfile(os.path.join(d, KINETO_TRACE))}
    total = len(dirs) + len(kfiles)  # progress: rank folders, then their traces (the slow part)
    for i, (rank, d) in enumerate(sorted(dirs.items())):
        meta = _optional_json(os.path.join(d, META))
        if meta is not None:
            if int(meta.get("rank", rank)) != rank:
                raise UserError(f"{d}/{META} says rank {meta.get('rank')}, folder says rank {rank}")
            metas[rank] = meta
        st = _optional_json(os.path.join(d, STATUS))
        if st is not None:
            statuses[rank] = st
            if st.get("status") not in (None, "completed"):
                problems.append(f"rank {rank}: {st.get('status')}"
                                + (f": {st['error']}" if st.get("error") else ""))
        if os.path.isfile(os.path.join(d, WATCHDOG)):
            problems.append(f"rank {rank}: the hang watchdog fired (see {d}/{WATCHDOG})")
        ev = os.path.join(d, EVENTS)
        if os.path.isfile(ev):
            rows, torn = read_jsonl(ev)
            if torn:
                problems.append(f"rank {rank}: ignored a torn last line in {EVENTS}")
            for r in rows:
                k = r.get("kind")
                if k in recs:
                    r.setdefault("rank", rank)
                    recs[k].append(r)
        else:
            problems.append(f"rank {rank}: no {EVENTS}")
            no_data.add(rank)
        if progress:
            progress(i + 1, total)
    sizes = {int(m["world_size"]) for m in metas.values() if "world_size" in m}
    if summary and "world_size" in summary:
        sizes.add(int(summary["world_size"]))
    if len(sizes) > 1:
        raise UserError(f"{path}: ranks disagree on world_size: {sorted(sizes)}")
    ws = sizes.pop() if sizes else max(dirs) + 1
    if any(r >= ws for r in dirs):
        raise UserError(f"{path}: rank folder(s) {[r for r in dirs if r >= ws]} outside world_size {ws}")
    missing = sorted(set(range(ws)) - set(dirs))
    if missing:
        problems.append(f"no folder for rank(s) {missing} of {ws}")
    any_meta = next(iter(metas.values()), {})
    trace = Trace(source="run", path=path, world_size=ws,
                  backend=(summary or {}).get("backend", any_meta.get("backend")),
                  device=(summary or {}).get("device", any_meta.get("device")),
                  config={"summary": summary or {}, "config": config or {},
                          "meta": {str(r): m for r, m in metas.items()},
                          "status": {str(r): s for r, s in statuses.items()}},
                  ranks=sorted(set(dirs) - no_data),
                  problems=problems)
    try:
        _fill_from_records(trace, recs)
    except (ValueError, TypeError, OverflowError) as e:  # a field of the wrong type (e.g. "start_ns": "x")
        raise UserError(f"{path}: an {EVENTS} record has a field of the wrong type ({e})") from None
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


def _records(rows: list[dict], kind: str) -> pd.DataFrame:
    if not rows:
        return frame(kind)
    return frame(kind, pd.DataFrame({c: ns_array([r.get(c) for r in rows]) if is_ns(c) else [r.get(c) for r in rows]
                                     for c in COLUMNS[kind]}))


def _fill_from_records(trace: Trace, recs: dict[str, list[dict]]) -> None:
    trace.steps = _records(recs["step"], "steps").sort_values(["rank", "step"]).reset_index(drop=True)
    c = _records(recs["collective"], "collectives")
    c["bytes"] = pd.to_numeric(c["bytes"], errors="coerce").astype(np.float64)
    trace.collectives = c.sort_values(["rank", "call_ns"], kind="stable").reset_index(drop=True)
    reg = _records(recs["region"], "regions")
    trace.regions = reg.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    comp = reg[reg["name"].map(is_compute_region).astype(bool)] if len(reg) else reg
    trace.compute = frame("compute", comp.assign(stream=np.nan, kind="region")[
        ["rank", "step", "name", "start_ns", "end_ns", "stream", "kind"]] if len(comp) else None)
    trace.hooks = _records(recs["hook"], "hooks")
    for kind in COLUMNS:
        df = getattr(trace, kind)
        if "step" in df.columns and len(df):
            df["step"] = pd.to_numeric(df["step"], errors="coerce").fillna(-1).astype(np.int64)
