"""`load_path`: decide what a path is (run directory, folder of Kineto traces, one trace file), load it,
and fit the files together: each file's rank (distributedInfo, else its name, else assumed), the files of
one rank merged (one per profiling window; overlapping ones refused), the job's world size (distributedInfo,
else process-group sizes, else the ranks read) kept apart from the ranks present, and collectives paired
across ranks only where group, sequence and size agree. Every fallback is a line in `Trace.problems`.

Kineto files are parsed by `commscope.load.kineto_pool` (a process pool when there are several files and
cores), for a folder of traces and for a run directory's profiler traces alike.
"""
from __future__ import annotations

import collections
import os
from typing import Any

import numpy as np
import pandas as pd

from commscope.errors import UserError
from commscope.load import limits, rundir
from commscope.load.files import Missing, entry_names, is_trace_file, list_trace_files
from commscope.load.frames import COLUMNS, UNPAIRED_MARK, Trace
from commscope.load.kineto_comms import GLOO_GROUP
from commscope.load.kineto_pool import Progress, attach_ops, concat_ops, concat_parts, load_ops, parse_files
from commscope.load.step_lineup import line_up
from commscope.rundir import has_run_marker, is_run_dir, rank_dirs
from commscope.rundir.schema import CONFIG, KINETO_TRACE, META, RANK_DIR, RECORDING_FILES, SUMMARY
from commscope.util.ranges import int_ranges
from commscope.util.text import escape_controls


def load_path(path: str, steps: tuple[int, int] | None = None, progress: Progress | None = None,
              workers: int | None = None, with_ops: bool = False, scheduler: Any = None,
              with_ops_up_to: int | None = None) -> Trace:
    """Load a run directory or Kineto trace(s). `steps=(a, b)` keeps steps a ≤ s < b.

    `progress(done, total)` is called after each rank file; `workers` caps the parse processes
    (default: one per core, at most one per file; 1 = in this process). `with_ops` builds `Trace.ops` in
    the same pass (for callers that will read it anyway, e.g. `commscope layout`); without it `ops` is
    parsed on first access, a second pass over the files, and a rank selection taken first
    (`Trace.select_ranks`) parses only its ranks' files. `with_ops_up_to=N` limits `with_ops` to inputs
    of at most N profiler trace files (the HTML report: up to its PAGE_ALL_RANKS it reads every rank's
    ops, above only a few ranks'). `scheduler` (a Dask scheduler address, Client or cluster) runs the
    per-rank stage on that cluster instead (commscope.load.engine).
    """
    limits.check_environment()
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise Missing(path)
    parent = os.path.dirname(path)
    if os.path.isdir(path) and RANK_DIR.match(os.path.basename(path)) and is_run_dir(parent) and \
            os.path.isfile(os.path.join(path, META)):
        # one rank's folder read as traces would report its meta.json "not a chrome trace"
        raise UserError(f"{path} is one rank's folder of the run directory {parent}: pass the run directory")
    beside, left_out = _traces_beside_run_files(path)
    beside = beside or _traces_in_rank_folders(path)
    if os.path.isdir(path) and is_run_dir(path) and not beside:
        trace = rundir.load(path, progress=progress, with_ops=with_ops, workers=workers, scheduler=scheduler,
                            with_ops_up_to=with_ops_up_to)
    else:
        if os.path.isfile(path):
            if not is_trace_file(path):
                raise UserError(f"{path} is not a Kineto trace (.json / .json.gz) or a run directory")
            files = [path]
        else:
            files = beside or list_trace_files(path)
            if not files:
                raise UserError(f"{path} holds no run directory (summary.json, config.json, rank*/) "
                                f"and no Kineto traces (*.json, *.json.gz){_nested_hint(path)}")
        trace = load_kineto_files(files, path, progress=progress, workers=workers,
                                  with_ops=with_ops and (with_ops_up_to is None or len(files) <= with_ops_up_to),
                                  scheduler=scheduler)
        if beside and left_out:
            names = " and ".join(left_out)
            trace.problems.append(f"{names} beside the traces {'is' if len(left_out) == 1 else 'are'} not a "
                                  f"commscope run's (no rank*/ folders, no run marker): the folder is read as "
                                  f"Kineto traces, {names} left out")
    _escape_names(trace)
    return trace.select_steps(steps)


# the text columns a label or a region's name comes from the user's data in, and every output prints
_NAMED = (("collectives", "label"), ("hooks", "label"), ("regions", "name"))


def _escape_names(trace: Trace) -> None:
    """Labels and region names with control characters, with those written as escapes (a newline as `\\n`):
    a terminal table would break its row at a newline inside a cell, before any printer could escape it.
    Checked per distinct value, so a million rows of twenty labels cost twenty checks."""
    for kind, col in _NAMED:
        frame = getattr(trace, kind)
        if col not in frame or not len(frame):
            continue
        values = frame[col]
        shown = {v: escape_controls(v) for v in pd.unique(values) if isinstance(v, str)}
        odd = {v: e for v, e in shown.items() if e != v}
        if odd:
            frame[col] = values.map(lambda v: odd.get(v, v) if isinstance(v, str) else v)


def _traces_in_rank_folders(path: str) -> list[str]:
    """The Kineto traces of a folder laid out as rank<N>/ subfolders of profiler output only (a natural
    layout for per-rank traces: rank3/trace.json.gz) with nothing of a commscope run in it (no run marker,
    summary.json or config.json; no rank folder holding a record of the recorder): [] for anything else."""
    if not os.path.isdir(path) or has_run_marker(path) or any(
            os.path.isfile(os.path.join(path, n)) for n in (CONFIG, SUMMARY)):
        return []
    dirs = rank_dirs(path)
    if not dirs or any(os.path.exists(os.path.join(d, n)) for d in dirs.values() for n in RECORDING_FILES
                       if n != KINETO_TRACE):
        return []
    return [f for d in sorted(dirs.values()) for f in list_trace_files(d)]


def _traces_beside_run_files(path: str) -> tuple[list[str], list[str]]:
    """(the Kineto traces, the names left out) of a folder that looks like a run only by a config.json or a
    summary.json (users keep them beside their profiler output: a training config, a metrics summary),
    with no run marker and no rank folders; ([], []) for anything else, a run directory among them."""
    if not os.path.isdir(path) or has_run_marker(path) or rank_dirs(path):
        return [], []
    named = [n for n in (CONFIG, SUMMARY) if os.path.isfile(os.path.join(path, n))]
    if not named:
        return [], []
    traces = [f for f in list_trace_files(path) if os.path.basename(f) not in named]
    return (traces, named) if traces else ([], [])


def _nested_hint(path: str) -> str:
    """"; traces one level down in SUB/: give that folder" when a subfolder holds them (TensorBoard's
    profiler plugin writes them to one folder per worker), else ""."""
    try:
        subs = sorted(e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return ""
    found = [d for d in subs if any(is_trace_file(n) for n in entry_names(d))]
    if not found:
        return ""
    more = f" (and {len(found) - 1} more folder(s))" if len(found) > 1 else ""
    return f"; traces one level down in {os.path.basename(found[0])}/{more}: give that folder"


def load_kineto_files(files: list[str], path: str, progress: Progress | None = None,
                      workers: int | None = None, with_ops: bool = False, scheduler: Any = None) -> Trace:
    # In a folder, a JSON file that is no trace (hparams.json beside rank0.json) is skipped and said, not
    # fatal: any profiler output loads. Given alone, or where no file of the folder is a trace, it is the
    # error.
    folder = os.path.isdir(path)
    with parse_files(files, with_ops=with_ops, progress=progress, workers=workers, scheduler=scheduler,
                     skip_non_traces=folder) as parts:
        skipped = [p for p in parts if "skipped" in p]
        if skipped:
            parts = [p for p in parts if "skipped" not in p]
            if not parts:
                more = len(skipped) - 1
                raise UserError(skipped[0]["error"] + (f"; {path} holds no chrome trace (its {more} other "
                                                       "file(s) are none either)" if more else ""))
        trace = _assemble(parts, files, path, workers, with_ops, scheduler)
    trace.problems[:0] = [p["skipped"] for p in skipped]
    return trace


# With several profiling windows (files) per rank, window k's collectives are numbered from k·SEQ_STRIDE:
# sequence numbers line up across ranks within a window, not across windows (the collectives between
# windows were not recorded).
SEQ_STRIDE = 1_000_000
_RANK_FRAMES = ("steps", "collectives", "compute", "regions", "kernels", "ops", "hta_cpu_stream_ops")


def _unknown_sizes_span_the_job(coll: pd.DataFrame, ws: int, present: int, problems: list[str]) -> None:
    """With ranks of the job missing, a collective whose group size no trace records (no process-group
    info: a `stream:<id>` group) may have members among them: its size is taken as the job's, so it has no
    known last arrival (skew.complete). With every rank present no member can be missing, and an unknown
    size stays unknown."""
    unknown = pd.to_numeric(coll["group_size"], errors="coerce").isna().to_numpy()
    if not unknown.any():
        return
    coll.loc[unknown, "group_size"] = ws
    groups = sorted(coll.loc[unknown, "group"].astype(str).unique())
    shown = ", ".join(groups[:4]) + (f" and {len(groups) - 4} more" if len(groups) > 4 else "")
    problems.append(f"{int(unknown.sum())} collective(s) of group(s) {shown} record no group size; with {present} "
                    f"of the job's {ws} ranks in the input their members may be among the missing ranks, so they "
                    f"are taken as spanning all {ws}: no arrival skew, straggler or bandwidth is judged on them")


def _assemble(parts: list, files: list[str], path: str, workers: int | None, with_ops: bool,
              scheduler: Any = None) -> Trace:
    """One Trace of the per-file parts: ranks settled, the files of one rank merged (one per profiling
    window), the job's world size told apart from the ranks present, and collectives paired across
    ranks only where group, sequence and size agree."""
    problems: list[str] = [q for p in parts for q in p["problems"]]
    _settle_ranks(parts, problems)
    by_rank: dict[int, list] = {}
    for p in parts:
        by_rank.setdefault(p["rank"], []).append(p)
    merged = [_merge_windows(r, ps, problems) for r, ps in sorted(by_rank.items())]
    ranks = [p["rank"] for p in merged]
    ws, ws_from = _world_size(parts, ranks, path, problems)
    if ws > limits.WORLD_SIZE.value():  # the same limit as a run directory's: analyses size frames by it
        raise limits.WORLD_SIZE.refuse(f"{path}: world_size {ws:,} is beyond the largest world size")
    missing = len(ranks) < ws
    if missing:
        absent = sorted(set(range(ws)) - set(ranks)) if ws <= 64 else None
        problems.append(f"no trace for rank(s) {int_ranges(absent, sep=', ')} of {ws}" if absent is not None else
                        f"no trace for {ws - len(ranks)} of the job's {ws} ranks (ranks present: "
                        f"{_short(ranks)})")
    for p in merged:
        if not len(p["steps"]):
            problems.append(f"rank {p['rank']}: no ProfilerStep annotations (events get step −1)")
    has_gpu = any(len(p["kernels"]) for p in merged)
    # The frames go to the constructor: a kind left out is built empty by its default factory, which for
    # all of them cost about half of this function.
    frames = {}
    for kind in COLUMNS:
        if kind == "ops":
            continue
        df = concat_parts(merged, kind)
        if df is not None:
            frames[kind] = df
        elif kind == "kernels" and merged:
            frames[kind] = merged[0][kind]
    # With every rank of the job present, a (group, seq) whose members disagree is what a desync looks like,
    # and doctor must see it; with ranks missing it is as likely sequence numbers drifting between the
    # sampled ranks' windows, and pairing such members would invent desyncs and stragglers.
    if "collectives" in frames and "steps" in frames:
        frames["collectives"] = line_up(frames["collectives"], frames["steps"], problems)
    if "collectives" in frames and len(ranks) < ws:
        frames["collectives"] = _pair(frames["collectives"], problems)
        _unknown_sizes_span_the_job(frames["collectives"], ws, len(ranks), problems)
    mixed = _gloo_groups_unknown(merged, problems)
    rank_files = {p["rank"]: p["files"] for p in merged}
    first = merged[0]
    trace = Trace(source="kineto", path=path, world_size=ws, backend=first["backend"],
                  # a host-side trace of a GPU job has no kernel but lists the GPUs its process saw
                  device="cuda" if has_gpu or any(p["info"]["deviceProperties"] for p in merged) else "cpu",
                  config={"distributedInfo": first["info"]["distributedInfo"],
                          "deviceProperties": first["info"]["deviceProperties"],
                          "files": {r: fs[0] for r, fs in rank_files.items()},
                          # every file of a rank, only where some rank has several (profiling cycles):
                          # otherwise it would repeat "files"
                          **({"rank_files": rank_files} if any(len(fs) > 1 for fs in rank_files.values()) else {}),
                          "rank_from": {p["rank"]: p["rank_from"] for p in merged},
                          # "ranks read" where no trace declares or implies it: the doctor does not
                          # take such a guess for a one-rank job (commscope.analyze.doctor)
                          "world_size_from": ws_from,
                          "events_left_out": sum(p.get("left_out", 0) for p in parts),
                          # a stand-in group whose collectives may come from process groups of different members
                          # (numbered together because the trace does not say which each ran on): the doctor
                          # judges no desync or straggler there
                          "mixed_groups": [GLOO_GROUP] if mixed else []},
                  ranks=ranks, problems=problems, **frames)
    file_rank = {p["info"]["file"]: p["rank"] for p in parts}
    files = [f for f in files if f in file_rank]
    attach_ops(trace, merged, files, with_ops, workers, file_rank, scheduler)
    if not with_ops:
        trace._ops_of_ranks = lambda keep: load_ops([f for f in files if file_rank[f] in keep], workers,
                                                    file_rank, scheduler)
    extra = concat_parts(merged, "hta_cpu_stream_ops")
    trace.extra["hta_cutoff_ns"] = {p["rank"]: p["hta_cutoff_ns"] for p in merged}
    trace.extra["hta_step_cut"] = len({n for p in merged for n in p["hta_step_names"]}) >= 2
    if extra is not None:
        trace.extra["hta_cpu_stream_ops"] = extra
    return trace


def _gloo_groups_unknown(merged: list, problems: list[str]) -> bool:
    """One line where ranks' gloo collectives share the stand-in group `gloo` (kineto_comms: their `c10d::`
    ops name no process group) while their pg_config lists several groups: which group each ran on is not
    in the trace (a group's gloo work runs on a pool of worker threads the trace does not tie to it).
    Whether those groups differ in their members (or their members are not all known): then one rank's
    call at a number may pair with another group's call on another rank, not only one launched out of order."""
    hit, names, members = [], set(), set()
    for p in merged:
        pgs = (p["info"]["distributedInfo"] or {}).get("pg_config") if isinstance(
            p["info"]["distributedInfo"], dict) else None
        listed = [g for g in pgs if isinstance(g, dict)] if isinstance(pgs, list) else []
        groups = {str(g.get("pg_name")) for g in listed}
        c = p["collectives"]
        if len(groups) > 1 and len(c) and (c["group"].astype(str) == GLOO_GROUP).any():
            hit.append(p["rank"])
            names |= groups
            members |= {_members(g) for g in listed}
    if hit:
        shown = ", ".join(sorted(names)[:8]) + (f", … ({len(names)} in all)" if len(names) > 8 else "")
        problems.append(f"rank(s) {_short(hit)}: gloo collectives name no process group and pg_config lists "
                        f"{len(names)} groups ({shown}): which group each ran on is unknown, so they are numbered as one "
                        f"group '{GLOO_GROUP}' in launch order, and pairing across ranks by that number may mix "
                        "groups (ranks launching them in different orders, groups of different members); none "
                        "is counted as queued behind another (each one's exposed time is its own execution)")
    return bool(hit) and (len(members) > 1 or None in members)


def _members(group: dict) -> tuple | None:
    """A pg_config entry's members (its `ranks`, else its `pg_size` alone), None where neither is given."""
    ranks, size = group.get("ranks"), group.get("pg_size")
    if isinstance(ranks, list) and ranks and all(type(r) is int for r in ranks):
        return tuple(sorted(ranks))
    return ("size", size) if type(size) is int else None


def _short(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f", … ({len(ranks)} in all)" if len(ranks) > 16 else "")


def _settle_ranks(parts: list, problems: list[str]) -> None:
    """Give every part a rank. Files whose rank is unknown (no distributedInfo, none in the name) are
    grouped by the process that wrote them (`kineto.worker_of`); such workers take the ranks no file
    claims, in name order (one worker: rank 0)."""
    unknown = sorted({p["worker"] for p in parts if p["rank"] is None})
    if not unknown:
        return
    taken = {p["rank"] for p in parts if p["rank"] is not None}
    free = (r for r in range(len(taken) + len(unknown)) if r not in taken)
    given = {w: next(free) for w in unknown}
    for p in parts:
        if p["rank"] is None:
            _set_rank(p, given[p["worker"]])
            p["rank_from"] = "assumed"
    problems.append("rank unknown (no distributedInfo rank, none in the file name) for "
                    + "; ".join(f"{w}: taken as rank {r}" for w, r in given.items()))


def _set_rank(part: dict, rank: int) -> None:
    part["rank"] = rank
    for kind in _RANK_FRAMES:
        df = part.get(kind)
        if df is not None and len(df):
            df["rank"] = rank


def _merge_windows(rank: int, parts: list, problems: list[str]) -> dict:
    """The files of one rank as one part: profiling windows in time order, their collectives numbered
    per window (SEQ_STRIDE). Windows that overlap in time are not successive cycles of one process but
    two traces claiming one rank, nor are windows that repeat a step number (_steps_once): refused. A file
    of the rank with no timed event (an empty profiling cycle) has no window to place: left out, and said,
    where the rank has other files."""
    timed = [p for p in parts if p["window"] is not None]
    if timed and len(timed) < len(parts):
        for p in parts:
            if p["window"] is None:
                problems.append(f"{p['info']['file']}: no timed event (an empty profiling cycle); left out, "
                                f"rank {rank} has other files")
        parts = timed
    parts = sorted(parts, key=lambda p: (p["window"] or (0, 0))[0])
    for a, b in zip(parts, parts[1:]):
        if a["window"] is None or b["window"] is None or b["window"][0] < a["window"][1]:
            raise UserError(f"rank {rank} appears twice: {a['info']['file']} and {b['info']['file']} "
                            "(their times overlap: not successive profiling windows of one rank)")
    _steps_once(rank, parts)
    out = dict(parts[0])
    out["files"] = [p["info"]["file"] for p in parts]
    if len(parts) == 1:
        return out
    for k, p in enumerate(parts[1:], start=1):
        c = p["collectives"]
        if len(c):
            c["seq"] = c["seq"] + k * SEQ_STRIDE
    for kind in _RANK_FRAMES:
        vals = [p[kind] for p in parts if p.get(kind) is not None]
        out[kind] = concat_ops(vals) if vals else None
        if out[kind] is None and vals:
            out[kind] = vals[0]
    cut = [p["hta_cutoff_ns"] for p in parts if p["hta_cutoff_ns"] is not None]
    out["hta_cutoff_ns"] = max(cut) if cut else None
    out["hta_step_names"] = sorted({n for p in parts for n in p["hta_step_names"]})
    out["window"] = (parts[0]["window"][0], parts[-1]["window"][1])
    return out


def _steps_once(rank: int, parts: list) -> None:
    """Successive profiling cycles of one profiler number their steps onwards (ProfilerStep#N), so a step
    number two of a rank's files both hold means they are not: two runs' traces in one folder (a
    tensorboard_trace_handler folder written to again), or two profilers in one process, each counting from
    0. Merged, their same-numbered steps would add up: refused."""
    seen: dict[int, str] = {}
    for p in parts:
        steps = p.get("steps")
        mine = {int(x) for x in steps["step"].dropna()} if steps is not None and len(steps) else set()
        both = sorted(mine & seen.keys())
        if both:
            raise UserError(f"rank {rank}'s traces {seen[both[0]]} and {p['info']['file']} both hold step "
                            f"{both[0]} (ProfilerStep#{both[0]}): not successive cycles of one profiler, but two "
                            "runs' traces in one folder or two profilers in one process; give each its own folder")
        seen.update(dict.fromkeys(mine, p["info"]["file"]))


def _world_size(parts: list, ranks: list[int], path: str, problems: list[str]) -> tuple[int, str]:
    """The job's world size and where it came from ("distributedInfo", "process groups", "ranks read"):
    distributedInfo's (all files must agree, and hold every rank present), else the largest inferred from
    process groups, else the ranks read; never less than the ranks present."""
    declared = {p["world_size"] for p in parts if p["world_from"] == "distributedInfo"}
    if len(declared) > 1:
        raise UserError(f"traces in {path} disagree on world_size: {sorted(declared)}")
    if declared:
        ws = declared.pop()
        bad = [r for r in ranks if r >= ws]
        if bad:
            outside = set(bad)
            files = [os.path.basename(p["info"]["file"]) for p in parts if p["rank"] in outside]
            if all(p.get("rank_from") == "assumed" for p in parts if p["rank"] in outside):
                # the number is one _settle_ranks gave: the file itself names none
                raise UserError(f"{', '.join(files[:4])}{' …' if len(files) > 4 else ''} in {path} "
                                f"name{'s' if len(files) == 1 else ''} no rank "
                                f"(no distributedInfo, none in the file name), and every rank of the job the other "
                                f"traces declare (world_size {ws}) already has a trace: a trace of another job? "
                                "Give each job's traces a folder of their own")
            raise UserError(f"rank(s) {int_ranges(bad, sep=', ', most=8)} outside world_size {ws} in {path} (from "
                            f"{', '.join(files[:4])}{' …' if len(files) > 4 else ''})")
        return ws, "distributedInfo"
    inferred = [p["world_size"] for p in parts if p["world_size"] is not None]
    least = max(len(ranks), max(ranks) + 1)
    if inferred and max(inferred) >= least:
        return max(inferred), "process groups"
    problems.append(f"the job's world size is unknown (no distributedInfo.world_size, no process-group "
                    f"sizes): taken as {least}, from the ranks read")
    return least, "ranks read"


def _pair(c: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """Collectives whose (group, seq) peers across ranks disagree on op, dtype or size are not the same
    collective (sequence numbers drift where a rank's window holds collectives another's does not, or
    where the trace names no process group): they are left unpaired — the minority of each such key, or
    all of it on a tie — by a group of their own on their rank, `<group> (unpaired, rank R)`, so no
    cross-rank analysis matches them. all_to_all may move different sizes per rank: its size is not
    compared. An unknown dtype or size agrees with any."""
    if c["rank"].nunique() < 2:
        return c
    op = c["op"].astype(str).to_numpy(dtype=object)
    recorded = pd.to_numeric(c["bytes"], errors="coerce").to_numpy(np.float64)  # what the examples say
    size = np.where(op == "all_to_all", np.nan, recorded)  # what is compared
    dt = c["dtype"].to_numpy(dtype=object)
    dt = np.array([v if isinstance(v, str) and v and v != "TensorList" else None for v in dt], dtype=object)
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([c["group"].astype(str), c["seq"]]))
    unpaired = np.zeros(len(c), dtype=bool)
    examples: list[str] = []
    order = np.argsort(codes, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(codes[order])) + 1):
        if len(rows) < 2:
            continue
        sig = [(op[i], None if np.isnan(size[i]) else float(size[i]), dt[i]) for i in rows]
        # over the distinct signatures (a few) with their counts: all pairs of members is O(members²),
        # seconds per load at a thousand ranks
        count = collections.Counter(sig)
        if all(_agree(a, b) for a in count for b in count):
            continue
        # the signature most members agree with (members agreeing with several count for each)
        agreeing = {a: sum(n for b, n in count.items() if _agree(a, b)) for a in count}
        support = [agreeing[a] for a in sig]
        best = max(support)
        leaders = {sig[i] for i, n in enumerate(support) if n == best}
        keep = sig[support.index(best)] if len(leaders) == 1 else None
        for i, s in zip(rows, sig):
            if keep is None or not _agree(keep, s):
                unpaired[i] = True
        if len(examples) < 3:
            who = ", ".join(f"rank {c['rank'].iat[i]}: {op[i]} "
                            f"({'unknown size' if np.isnan(recorded[i]) else f'{int(recorded[i])} B'}"
                            f"{f', {dt[i]}' if dt[i] else ''})"
                            for i in rows[:4])
            examples.append(f"group {c['group'].iat[rows[0]]} seq {c['seq'].iat[rows[0]]} ({who})")
    n = int(unpaired.sum())
    if not n:
        return c
    c = c.copy()
    g = c["group"].astype(object).to_numpy(copy=True)
    r = c["rank"].to_numpy()
    g[unpaired] = [f"{g[i]}{UNPAIRED_MARK}{r[i]})" for i in np.flatnonzero(unpaired)]
    c["group"] = g
    problems.append(f"{n} collective(s) left unpaired across ranks: their process group and sequence number "
                    f"match but op, dtype or size do not, e.g. {'; '.join(examples)}")
    return c


def _agree(a: tuple, b: tuple) -> bool:
    """Two (op, bytes, dtype) signatures can be one collective: same op, and bytes / dtype equal where
    both are known."""
    return a[0] == b[0] and (a[1] is None or b[1] is None or a[1] == b[1]) and \
        (a[2] is None or b[2] is None or a[2] == b[2])
