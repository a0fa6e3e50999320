"""A commscope run directory (docs/run_format.md) → `Trace`.

Reads summary.json / config.json (both optional), and per `rank<N>/` folder meta.json, events.jsonl
(a torn last line is ignored, as the format allows) and status.json; a rank's `trace.json.gz`, when
present, is parsed as a Kineto trace to fill `kernels` and `ops`. A rank folder without data is listed in
`problems` rather than failing the whole load: the other ranks can still be analyzed. The run's fault
evidence (watchdog/inflight reports, Flight Recorder dumps) becomes `Trace.faults` (commscope.load.evidence).
"""
from __future__ import annotations

import functools
import os
import shutil
from typing import Any

import numpy as np
import pandas as pd

from commscope.errors import UserError
from commscope.load.evidence import read_fault_evidence
from commscope.load import limits
from commscope.load.engine import map_files
from commscope.load.events import EventColumns, read_rank
from commscope.load.files import Missing, is_regular, is_trace_file, read_json, unreadable
from commscope.load.frames import Trace, frame
from commscope.load.kineto_pool import attach_ops, concat_parts, load_ops, parse_files
from commscope.load.one_job import check_one_job
from commscope.rundir import check_doc, launcher_log_tails, rank_dirs, read_run_marker
from commscope.rundir.schema import (RANK_DIR, CONFIG, EVENTS, KINETO_TRACE, META, PREVIOUS_RUN_PREFIX,
                                     RUN_MARKER, STATUS, STORAGE_ERROR, SUMMARY, WATCHDOG)
from commscope.util.ranges import int_ranges
from commscope.util.text import printable

# Regions that are computation unless their record says otherwise (`compute`); containers (optimizer,
# opt.phase*) also hold communication waits.
_COMPUTE_NAMES = ("forward", "backward")
_COMPUTE_PREFIXES = ("update:", "compute:")


def _unread_entries(path: str) -> list[str]:
    """A problem line for each entry of a run directory that looks like rank data but is not read: a
    profiler trace at the top (the loader reads a run's traces from rank<N>/trace.json.gz only) and a
    folder named like a rank that is none (`rank01/`, `rank1 copy/`). Left out unsaid, either would look read."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for e in entries:
        name, at = e.name, printable(os.path.join(path, e.name))
        try:
            is_dir, is_file = e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)
        except OSError:
            continue
        # by name, nothing opened: a gzip JSON or a name with "trace" in it (torch.profiler's *.pt.trace.json);
        # the run's own documents and a user's notes (hparams.json) are not traces
        if is_file and is_trace_file(name) and name not in (SUMMARY, CONFIG, RUN_MARKER) \
                and (name.endswith(".gz") or "trace" in name.lower()):
            out.append(f"{at}: not read (a run directory's profiler traces are rank<N>/{KINETO_TRACE}; "
                       "a folder holding only traces is read as Kineto traces)")
        elif is_dir and name.startswith("rank") and not RANK_DIR.match(name) and name[4:5].isdigit():
            out.append(f"{at}/: not read as a rank (rank folders are rank<N>, N in decimal without leading "
                       "zeros)")
        elif is_dir and name.startswith(PREVIOUS_RUN_PREFIX):
            # `run --overwrite` keeps the replaced run here until the new one's first step; past that, a
            # launcher killed before it left it, and nothing else would ever say so
            out.append(f"{at}/: not read: the run this one replaced, kept until the new run's first step; still "
                       "here after it, its launcher was killed before then (move its files back in place of "
                       "this run's, or remove it)")
    return out


def _running_launcher(path: str) -> int | None:
    """The pid of the `commscope run` launcher named by the run marker (launcher_pid, host), where it runs
    on this host now; None where it does not, or cannot be told (another host's launcher, a marker without
    them, an unreadable one). Only read: the folder's lock is the launcher's, and taking it even shared
    would refuse a launch into the folder at that moment."""
    import socket

    import psutil

    try:
        marker = read_run_marker(path) or {}
    except ValueError:
        return None
    pid = marker.get("launcher_pid")
    if type(pid) is not int or pid <= 0 or marker.get("host") != socket.gethostname():
        return None
    try:
        args = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return None
    # `commscope run …` (the installed script) or `python -m commscope run …`: a pid reused by another
    # program, even one run from a folder named commscope, is no launcher
    named = any(os.path.basename(a) == "commscope" for a in args)
    return pid if named and "run" in args else None


def _optional_json(path: str, name: str) -> dict | None:
    """The run directory's document `name` at `path`, type-checked (commscope.rundir.check_doc); None
    when there is none."""
    if not is_regular(path):
        return None
    return check_doc(read_json(path), path, name)


def _regular_or_problem(path: str, rank: int, problems: list[str]) -> bool:
    """True when `path` is a regular file this process may read; a FIFO, directory or symlink loop in its
    place, or a file the system refuses to open, is a problem of `rank` (reading it would block or fail),
    not a reason to refuse the other ranks."""
    try:
        if not is_regular(path):
            return False
        os.close(os.open(path, os.O_RDONLY))
        return True
    except UserError as e:
        problems.append(f"rank {rank}: {e}; ignored")
    except OSError as e:
        problems.append(f"rank {rank}: {unreadable(path, e)}; ignored")
    return False


def is_compute_region(name: str) -> bool:
    """Whether a region of this name is computation when its record does not say (no `compute` key)."""
    return name in _COMPUTE_NAMES or name.startswith(_COMPUTE_PREFIXES)


def compute_mask(regions) -> np.ndarray:
    """Per region: its record's `compute` (rec.region(name, compute=...)) where given, else by its name."""
    # by name over the distinct names (a few dozen), not over every region (10⁶ at 1024 ranks)
    codes, names = pd.factorize(regions["name"])
    named = np.array([is_compute_region(n) for n in names] + [False], dtype=bool)
    by_name = named[codes]  # code −1 (no name) takes the appended False
    said = regions["compute"].to_numpy(dtype=object) if "compute" in regions else np.full(len(regions), None)
    given = np.array([v is True or v is False for v in said], dtype=bool)
    return np.where(given, said == True, by_name)  # noqa: E712 (object array: elementwise, not identity)


def read_meta(d: str) -> dict | None:
    """The meta.json of the rank folder `d`, type-checked; None when there is none. UserError where it is
    unreadable or names another rank than the folder does (every reader of a rank's meta.json reads it here)."""
    meta = _optional_json(os.path.join(d, META), META)
    rank = int(RANK_DIR.match(os.path.basename(d)).group(1))
    if meta is not None and meta.get("rank", rank) != rank:
        raise UserError(f"{d}/{META} says rank {meta.get('rank')}, folder says rank {rank}")
    return meta


def read_rank_folder(d: str, expect_events: bool = True) -> dict:
    """Everything one `rank<N>/` folder holds but its profiler trace: meta.json, status.json, whether the
    watchdog fired, and its events.jsonl as compact columns (commscope.load.events.read_rank). The per-rank
    stage: a plain function of a path, run by a local worker process or a Dask worker. Without
    `expect_events` (a run recorded with --trace off, whose ranks write their status only) a folder without
    events.jsonl is no problem."""
    rank = int(RANK_DIR.match(os.path.basename(d)).group(1))
    if not os.path.isdir(d):  # listed by the caller, so gone where this runs: a Dask worker that cannot see it
        raise Missing(d)
    problems: list[str] = []
    meta = read_meta(d)
    # how the rank ended (status.json, watchdog.json) is the run's outcome, not a problem reading it: it goes
    # to trace.config ("status", "watchdog_ranks"; analyze.problems.run_reports). The watchdog counts as fired
    # where its file exists, whether or not its report parses (load.evidence says when one does not).
    st = _optional_json(os.path.join(d, STATUS), STATUS)
    watchdog = os.path.isfile(os.path.join(d, WATCHDOG))
    ev = os.path.join(d, EVENTS)
    events = None
    if _regular_or_problem(ev, rank, problems):
        events = read_rank(ev, rank, EVENTS, window=((meta or {}).get("started_ns"), (st or {}).get("ended_ns")))
    elif expect_events and not os.path.lexists(ev):
        problems.append(f"rank {rank}: no {EVENTS}")
    return {"rank": rank, "meta": meta, "status": st, "watchdog": watchdog, "events": events, "problems": problems,
            "path": ev}


def load(path: str, progress=None, with_ops: bool = False, workers: int | None = None,
         scheduler: Any = None, with_ops_up_to: int | None = None) -> Trace:
    """The run directory at `path` as a Trace; rank folders (and their profiler traces) are read by
    `workers` local processes, or by the Dask cluster at `scheduler` (commscope.load.engine). `with_ops`,
    `with_ops_up_to`: as commscope.load.load_path's (the count is of the ranks' profiler traces)."""
    max_ws = limits.WORLD_SIZE.value()
    summary = _optional_json(os.path.join(path, SUMMARY), SUMMARY)
    config = _optional_json(os.path.join(path, CONFIG), CONFIG)
    dirs = rank_dirs(path)
    if not dirs:  # what the launcher says of the run, where it says it (stopped during start-up, say)
        said = (summary or {}).get("message")
        # a replaced run kept aside (`run --overwrite` killed before the new run's first rank folder)
        kept = [p for p in _unread_entries(path) if PREVIOUS_RUN_PREFIX in p]
        raise UserError(f"{path} is a run directory without rank*/ folders: nothing was recorded" +
                        (f" ({SUMMARY}: {printable(said)})" if isinstance(said, str) and said else "") +
                        (f"; {kept[0]}" if kept else ""))
    if max(dirs) >= max_ws:  # before anything is sized by it: an empty rank99999999999/ allocates nothing
        raise limits.WORLD_SIZE.refuse(f"{path}: rank folder rank{max(dirs)} is beyond the largest world size")
    problems: list[str] = _unread_entries(path)
    kfiles = {r: os.path.join(d, KINETO_TRACE) for r, d in sorted(dirs.items())  # profiler traces
              if _regular_or_problem(os.path.join(d, KINETO_TRACE), r, problems)}
    total = len(dirs) + len(kfiles)  # progress: rank folders, then their traces (the slow part)
    with_ops = with_ops and (with_ops_up_to is None or len(kfiles) <= with_ops_up_to)
    trace_off = ((config or {}).get("args") or {}).get("trace") == "off"
    folders = map_files(functools.partial(read_rank_folder, expect_events=not trace_off),
                        [d for _, d in sorted(dirs.items())], scheduler=scheduler, workers=workers,
                        progress=progress and (lambda j, _n: progress(j, total)))
    events, metas, statuses, watchdog, no_data = _combine(folders, problems)
    ws = _world_size(path, dirs, metas, summary, max_ws)
    check_one_job(path, metas)
    missing = [r for r in range(ws) if r not in dirs]
    if missing:
        problems.append(f"no folder for rank(s) {int_ranges(missing, sep=', ', most=20)} of {ws}")
    # summary.json, written by the launcher after every rank ended, says a rank completed that has no
    # status.json: the file went missing (a partial copy), which the doctor takes for no sign of a crash
    said = (summary or {}).get("ranks") or {}
    lost_status = [r for r in sorted(dirs) if r not in statuses and said.get(str(r)) == "completed"]
    if lost_status:
        problems.append(f"no {STATUS} for rank(s) {int_ranges(lost_status, sep=', ', most=20)}, which "
                        f"{SUMMARY} says completed")
    any_meta = next(iter(metas.values()), {})
    trace = Trace(source="run", path=path, world_size=ws,
                  backend=(summary or {}).get("backend", any_meta.get("backend")),
                  device=(summary or {}).get("device", any_meta.get("device")),
                  config={"summary": summary or {}, "config": config or {},
                          "meta": {str(r): m for r, m in metas.items()},
                          "status": {str(r): s for r, s in statuses.items()},
                          "watchdog_ranks": sorted(watchdog),  # whose rank<N>/watchdog.json exists
                          # the ranks whose events.jsonl lost records (events.read_rank's "lost"): the doctor
                          # takes no absence in them for evidence
                          "lost_records": {str(r): v for r, v in sorted(events.lost.items())},
                          # ranks of the job without a folder: nothing of theirs was read, so the doctor takes
                          # neither their missing status.json nor their absence from a collective for evidence
                          "missing_rank_folders": missing,
                          # "<log>: <line>", a launcher log's tail saying the run directory took no more
                          # writes (disk full): where no status or summary fit, the only sign of it
                          "storage_error": _storage_error(path),
                          # the space left where it lies now: a full disk may have taken even that line
                          "free_bytes": _free_bytes(path),
                          # the pid of the launcher still running the job, where it runs on this host: a run
                          # without statuses or a summary is then in progress, not killed
                          "launcher_running": None if summary else _running_launcher(path)},
                  ranks=sorted(set(dirs) - no_data),
                  problems=problems)
    _fill_from_records(trace, events)
    # a rank's profiler trace that cannot be read (cut short by the kill that ended the run) is skipped and
    # said: its events.jsonl, what the doctor reads, stands without it
    with parse_files(list(kfiles.values()), with_ops=with_ops, workers=workers, scheduler=scheduler,
                     progress=(lambda j, _n: progress(len(dirs) + j, total)) if progress else None,
                     skip_non_traces=True) as kparts:
        skipped = {f for f, p in zip(kfiles.values(), kparts) if "skipped" in p}
        trace.problems += [p["skipped"] for p in kparts if "skipped" in p]
        kfiles = {r: f for r, f in kfiles.items() if f not in skipped}
        _attach_kineto(trace, [p for p in kparts if "skipped" not in p], kfiles, with_ops, workers, scheduler)
    trace.faults = read_fault_evidence(path, dirs)
    if trace.faults.error:  # the evidence of every rank is dropped with it: say so wherever problems are listed
        trace.problems.append(f"fault evidence not read: {trace.faults.error}")
    return trace


_LOG_TAIL = 1 << 16  # bytes of a launcher log read for a storage error: the ranks' last words are at its end


def _storage_error(run: str) -> str | None:
    """"<log>: <line>" for the first line of the last _LOG_TAIL bytes of a launcher log of the run
    (launcher.log, or each node's, in name order) that says a write failed for lack of space
    (STORAGE_ERROR), the line cut to 300 characters; None where there is none or no log."""
    for name, tail in launcher_log_tails(run, _LOG_TAIL).items():
        for line in tail.splitlines():
            if STORAGE_ERROR.search(line):
                return f"{printable(name)}: {printable(line.strip())[:300]}"
    return None


def _free_bytes(path: str) -> int | None:
    """Bytes free on the filesystem holding `path`, as its user may write them; None where unknown."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _combine(folders, problems: list[str]) -> tuple[EventColumns, dict, dict, list, set]:
    """The rank folders' results (read_rank_folder) combined, in rank order: every rank's events, meta.json
    and status.json by rank, the ranks whose watchdog fired and those without events; their problems are
    appended to `problems`."""
    events = EventColumns()
    metas: dict[int, dict] = {}
    statuses: dict[int, dict] = {}
    watchdog: list[int] = []
    no_data: set[int] = set()
    for f in folders:
        rank = f["rank"]
        if f["meta"] is not None:
            metas[rank] = f["meta"]
        if f["status"] is not None:
            statuses[rank] = f["status"]
        if f.get("watchdog"):
            watchdog.append(rank)
        problems += f["problems"]
        if f["events"] is None:
            no_data.add(rank)
        else:
            events.add(f["events"], f["path"])
    problems += events.problems
    return events, metas, statuses, watchdog, no_data


def _world_size(path: str, dirs: dict, metas: dict, summary: dict | None, max_ws: int) -> int:
    """The job's world size: what every meta.json and summary.json say (they must agree), else one past the
    highest rank folder. A rank folder outside it, or a size beyond the largest believed, is refused."""
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
    return ws


def _attach_kineto(trace: Trace, kparts: list, kfiles: dict, with_ops: bool, workers: int | None,
                   scheduler: Any) -> None:
    """The profiler traces' kernels, ops, regions and device properties, from their parsed parts."""
    # what the traces' values lost (events left out, shapes taken as unknown); the rest of a trace's problems
    # are about who wrote it, which meta.json says
    trace.problems += [q for p in kparts for q in p.get("dropped", ())]
    trace.config["events_left_out"] = sum(p.get("left_out", 0) for p in kparts)
    kernels = concat_parts(kparts, "kernels")
    if kernels is not None:
        trace.kernels = kernels
    # collectives the profiler saw, for the note on a run whose events.jsonl records none (summary.py)
    trace.config["profiler_collectives"] = sum(len(p["collectives"]) for p in kparts if p.get("collectives") is not None)
    if kfiles:
        attach_ops(trace, kparts, list(kfiles.values()), with_ops, workers, scheduler=scheduler)
        if not with_ops:  # a rank's profiler trace is the one in its folder
            trace._ops_of_ranks = lambda keep: load_ops([f for r, f in kfiles.items() if r in keep], workers,
                                                        scheduler=scheduler)
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
    comp = reg[compute_mask(reg)] if len(reg) else reg
    trace.compute = frame("compute", comp.assign(stream=np.nan, kind="region")[
        ["rank", "step", "name", "start_ns", "end_ns", "stream", "kind"]] if len(comp) else None)
    trace.hooks = events.frame("hook")

