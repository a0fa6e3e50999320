"""One torch.profiler (Kineto) chrome trace → the frames of one rank.

`commscope.load.kineto_events` reads the file into per-kind columns (kernels, runtime launches, cpu ops,
user annotations) and drops, with a counted reason, events whose values cannot be used (wrong types,
non-finite or negative times, exact duplicates); everything here is numpy/pandas on those. Timestamps
become int64 ns on the Unix epoch: `baseTimeNanoseconds + round(ts_us * 1000)`, so ranks of one host
share an axis.

Which rank of what job (`_identity`): `distributedInfo.rank` / `.world_size` where they are integers in
range (0 ≤ rank < world_size ≤ MAX_WORLD); else the rank from the file name (`rank-N`, `rank_N`, `rankN`,
also inside a `tensorboard_trace_handler` worker name) and the world size from the process groups the
trace names (`pg_config` sizes, the largest `Group size` of its collectives). What stays unknown is None,
for the loader to settle across files (`commscope.load.loader`); each fallback is a line in `problems`.

Collectives are found by `commscope.load.kineto_comms` (NCCL correlation matching, gloo pairing);
this module only extracts and shapes the raw material. Steps: the CPU `ProfilerStep#N` ranges are the host
windows (regions and cpu ops are assigned by them); `commscope.load.device_steps` gives each kernel the step
that launched it and, on GPU traces, turns the windows of the `steps` frame into device time.
"""
from __future__ import annotations

import functools
import gc
import math
import os
import re
import sys

import numpy as np
import orjson
import pandas as pd

from commscope.load import kineto_comms
from commscope.load.device_steps import device_steps
from commscope.load.kineto_events import NotATrace, read_events
from commscope.load.kineto_values import NS_LIMIT, LEFT_OUT, check_shapes, check_values
from commscope.load.files import FileProblem, gc_paused, read_bytes
from commscope.load.frames import assign_steps, frame, match_positions, ns_array

# HTA's classification, kept identical so overlap numbers compare (hta/utils/utils.py); `is_comm` also
# counts RCCL's own kernel names (ROCm), which HTA's rule misses (and HTA then counts as compute).
HTA_COMM_KERNEL_RE = re.compile(r"^nccl.*Kernel")
COMM_KERNEL_RE = re.compile(r"^(nccl|rccl).*Kernel", re.I)
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_STEP_RE = re.compile(r"^ProfilerStep#(\d{1,18})$")  # int64 step numbers
MAX_WORLD = kineto_comms.MAX_WORLD  # the largest world size believed
# `rank3`, `rank-3`, `rank_3` anywhere in the file name (torch's tensorboard_trace_handler puts the
# worker name first: `<worker>.<pid>.<ts>.pt.trace.json`), not preceded by a letter (`crank3`)
_RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_]?(\d+)(?!\d)", re.I)
_TB_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ts>\d+)\.pt\.trace\.json(\.gz)?$")


def hta_unseen_comm_kernels(kernels: pd.DataFrame) -> tuple[int, int, str | None]:
    """(communication kernels, those HTA does not recognize as communication, the commonest such name).

    `is_comm` counts RCCL's `rccl…Kernel` names; HTA's rule is `^nccl.*Kernel` only, so its overlap leaves
    them out and its kernel breakdown counts them as computation. The summary and the HTA comparison both
    say so from this one count."""
    if not len(kernels) or "is_comm" not in kernels.columns:
        return 0, 0, None
    comm = kernels.loc[kernels["is_comm"].astype(bool), "name"].astype(str)
    names, counts = np.unique(comm.to_numpy(), return_counts=True)
    unseen = [(int(c), n) for n, c in zip(names.tolist(), counts.tolist()) if not HTA_COMM_KERNEL_RE.match(n)]
    if not unseen:
        return len(comm), 0, None
    return len(comm), sum(c for c, _ in unseen), max(unseen)[1]


_KEEP: list | None = None


def keep_documents() -> None:
    """Pool-worker initializer: keep documents decoded as dicts (the generic reader) alive until the
    worker exits.

    Freeing 10⁵ small dicts costs about as much as building them; pool workers end with os._exit, so
    documents kept here are never freed one by one. Typed documents (untracked Structs) are freed: that is
    cheaper than faulting in fresh memory for every file.
    """
    global _KEEP
    _KEEP = []


def _ns(ts: list, base: int) -> np.ndarray:
    a = np.asarray(ts, dtype=np.float64) * 1000.0
    return np.round(a).astype(np.int64) + np.int64(base)


def parse_file(path: str, with_ops: bool = False) -> dict:
    """Frames of one rank (`rank`, `world_size`, `backend`, `info`, and one DataFrame per frame kind), its
    `problems`, and among them `dropped`: the lines about values left out or taken as unknown; `left_out`: how
    many events were left out whole (kineto_values.LEFT_OUT).

    `ops` is only built `with_ops` (else None): see `Trace.ops`, which is loaded lazily.
    """
    # The collector stays off until the decoded document is gone: re-enabling it earlier makes the next
    # allocation scan all ~10⁵ fresh objects.
    with gc_paused():
        out = _parse(path, with_ops)
        if _KEEP is not None:
            # pool worker: the kept documents would otherwise all be traversed by the first collection
            # after the collector is re-enabled (~0.1 s per file); freeze moves them out of its reach
            gc.freeze()
        return out


def parse_file_or_skip(path: str, with_ops: bool = False) -> dict:
    """parse_file, or `{"skipped": line}` where the file is no chrome trace (kineto_events.NotATrace): one
    parse either way, so a large stray file in a folder of traces is read once."""
    try:
        return parse_file(path, with_ops)
    except NotATrace as e:
        return {"skipped": e.skip_line, "error": str(e)}


def parse_ops(path: str) -> pd.DataFrame:
    return parse_file(path, with_ops=True)["ops"]


def _parse(path: str, with_ops: bool) -> dict:
    try:
        raw = read_bytes(path)
    except FileProblem as e:  # skipped in a folder like any file that is no trace, an error alone
        raise NotATrace(path, e.what) from None
    ev = read_events(path, raw, with_ops)
    if _KEEP is not None and isinstance(ev.doc, dict):
        _KEEP.append(ev.doc)
    ev.doc = None
    check_values(ev)
    check_shapes(ev)
    dropped = [_dropped_line(path, why, n) for why, n in ev.dropped.items()]
    # events left out whole for unusable times: the summary's note on a trace with no collectives says
    # collectives may be among them
    left_out = sum(n for why, n in ev.dropped.items() if why.endswith(LEFT_OUT))
    problems = list(dropped)
    who = _identity(path, ev.di, ev.o_name, ev.o_args)
    problems += who.pop("problems")
    di = who["di"]
    rank = who["rank"] if who["rank"] is not None else 0  # the loader renumbers unknown ranks
    launches = pd.DataFrame({"correlation": column(ev.l_corr, ev.ints), "tid": column(ev.l_tid),
                             "ts_ns": _ns(ev.l_ts, ev.base), "external_id": column(ev.l_ext, ev.ints)})
    k_corr = column(ev.k_corr, ev.ints)
    launch_pos = match_positions(pd.Series(k_corr), launches["correlation"])  # the one kernel → launch join
    a_start, a_end = _span(ev.a_ts, ev.a_dur, ev.base)
    ann = pd.DataFrame({"name": pd.Series(ev.a_name, dtype=object), "tid": ev.a_tid, "start_ns": a_start,
                        "end_ns": a_end})
    host_steps, is_step = _host_steps(rank, ann)
    # per-step figures of device work use device windows; host work (regions, cpu ops, launches) the host's
    g_start, g_end = _span(ev.gpu_step_ts, ev.gpu_step_dur, ev.base)
    kernels, steps = _kernels(ev, rank, k_corr, _launch_ns(launches, launch_pos), host_steps, g_start, g_end)
    o_start, o_end = _span(ev.o_ts, ev.o_dur, ev.base)
    ops_all = pd.DataFrame({
        "name": pd.Series(_shared_strings(ev.o_name), dtype=object), "tid": column(ev.o_tid), "start_ns": o_start,
        "end_ns": o_end, "external_id": column(ev.o_ext, ev.ints), "dims": pd.Series(ev.o_dims, dtype=object),
        "hta_stream": np.array(ev.o_hta_stream, dtype=bool),  # bools in both readers ("stream" in args)
    })
    # HTA keeps only activity launched before the last ProfilerStep (CPU or GPU annotation) starts
    step_starts = list(host_steps["start_ns"]) + list(g_start)
    regions_src = ann[~is_step]
    comm_notes: list[str] = []
    p_start, p_end = _span(ev.p_ts, ev.p_dur, ev.base)
    py_frames = pd.DataFrame({"name": pd.Series(ev.p_name, dtype=object), "tid": column(ev.p_tid),
                              "start_ns": p_start, "end_ns": p_end})
    colls = kineto_comms.collectives(rank, di, kernels, launches, ops_all, ev.o_args, regions_src, launch_pos,
                                     host_steps, comm_notes, device_windows=steps, py_frames=py_frames,
                                     ann_shapes=ev.a_shapes)
    problems += [f"{path}: {n}" for n in comm_notes]
    ops = (_ops(rank, ops_all, ev.o_dims, ev.o_strides, ev.o_types, kernels, launch_pos, ev.l_ext)
           if with_ops else None)
    # Frames from columns in contract order, steps included: built once (frame() keeps them as they are)
    r_start = regions_src["start_ns"].to_numpy()
    regions = frame("regions", {
        "rank": rank, "step": assign_steps(np.full(len(r_start), rank), r_start, host_steps), "micro_step": np.nan,
        "name": _objects(regions_src["name"]), "start_ns": r_start, "end_ns": regions_src["end_ns"].to_numpy()})
    hta = np.flatnonzero(ops_all["hta_stream"].to_numpy(bool))
    hta_extra = pd.DataFrame({"name": _objects(ops_all["name"], hta), "start_ns": ops_all["start_ns"].to_numpy()[hta],
                              "end_ns": ops_all["end_ns"].to_numpy()[hta], "rank": rank})
    times = [int(f[c].min()) for f, c in ((kernels, "start_ns"), (ops_all, "start_ns"), (ann, "start_ns")) if len(f)]
    ends = [int(f[c].max()) for f, c in ((kernels, "end_ns"), (ops_all, "end_ns"), (ann, "end_ns")) if len(f)]
    return {
        **who, "problems": problems, "dropped": dropped, "left_out": left_out, "window": (min(times), max(ends)) if times else None,
        "backend": di.get("backend") if isinstance(di.get("backend"), str) else None,
        "info": {"distributedInfo": ev.di, "deviceProperties": ev.device_properties, "file": path},
        "steps": steps,
        "collectives": colls,
        "compute": _compute(rank, kernels, ops_all, host_steps),
        "regions": regions,
        "hooks": _no_hooks().copy(),  # Kineto traces have no hook events
        "ops": frame("ops", ops) if with_ops else None,
        "kernels": kernels,  # keeps `kind`, `hta_compute`, `launch_ns` beyond the contract (analyze.timeline)
        "hta_cpu_stream_ops": hta_extra,
        "hta_cutoff_ns": int(max(step_starts)) if step_starts else None,
        # HTA applies the cutoff only where its symbol table (all ranks' names) holds two or more names
        # with "ProfilerStep" in them (loader: trace.extra["hta_step_cut"])
        "hta_step_names": sorted({n for n in set(ev.a_name) if "ProfilerStep" in n} | set(ev.gpu_step_name)),
    }


def _span(ts: list, dur: list, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (int64 ns on the common axis) of events given as µs `ts` and `dur`."""
    start = _ns(ts, base)
    return start, start + np.round(np.asarray(dur, np.float64) * 1000).astype(np.int64)


def _kernels(ev, rank: int, k_corr, k_launch: np.ndarray, host_steps: pd.DataFrame, g_start: np.ndarray,
             g_end: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rank's kernels frame (one row per GPU kernel, memcpy or memset, classified) and its steps frame
    (`device_steps`: each kernel's step is the step that launched it)."""
    # A few hundred distinct kernel names repeat thousands of times: classify each once, and share one
    # string object per name so the frames pickle to the parent process as references.
    classes = {n: (n, bool(COMM_KERNEL_RE.match(n)), not (_NOT_COMPUTE_RE.match(n) or COMM_KERNEL_RE.match(n)))
               for n in set(ev.k_name)}
    k_cls = [classes[n] for n in ev.k_name]
    k_start, k_end = _span(ev.k_ts, ev.k_dur, ev.base)
    steps, k_step = device_steps(host_steps, k_start, k_end, k_launch, ev.gpu_step_name, g_start, g_end)
    stream = column(ev.k_stream, ev.ints)
    kernels = pd.DataFrame({  # one frame, every column at once (adding columns later copies it)
        "rank": rank, "name": pd.Series([c[0] for c in k_cls], dtype=object),
        "stream": stream if isinstance(stream, np.ndarray) else pd.to_numeric(pd.Series(stream), errors="coerce"),
        "start_ns": k_start, "end_ns": k_end,
        "correlation": k_corr, "external_id": column(ev.k_ext, ev.ints), "grid": ev.k_grid,
        "block": ev.k_block, "is_comm": [c[1] for c in k_cls], "kind": ev.k_kind,
        "hta_compute": [c[2] for c in k_cls], "launch_ns": k_launch, "step": k_step,
    })
    return kernels, steps


def _host_steps(rank: int, ann: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The rank's steps from its CPU `ProfilerStep#N` ranges (host windows), and which annotations they are."""
    is_step = ann["name"].str.match(_STEP_RE.pattern) if len(ann) else pd.Series([], dtype=bool)
    st = ann[is_step]
    # by start, then the first of each step number: sort_values' argsort and drop_duplicates' first
    # occurrence, on the few arrays instead of frames
    order = st["start_ns"].array.argsort()
    ids = st["name"].str.slice(len("ProfilerStep#")).astype(np.int64).to_numpy()[order]
    first = np.sort(np.unique(ids, return_index=True)[1])
    steps = frame("steps", {"rank": rank, "step": ids[first], "start_ns": st["start_ns"].to_numpy()[order][first],
                            "end_ns": st["end_ns"].to_numpy()[order][first], "loss": np.nan})
    return steps, is_step


def _dropped_line(path: str, why: str, n: int) -> str:
    return f"{path}: {n} {why}" if " event(s)" in why else f"{path}: {why}" + (f" ({n}×)" if n > 1 else "")


def _valid(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


def rank_from_name(path: str) -> int | None:
    """The rank a file name gives (`rank3`, `rank-3`, `rank_3`; the last such if several), else None."""
    hits = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(hits[-1]) if hits and int(hits[-1]) < MAX_WORLD else None


def worker_of(path: str) -> str:
    """Which process wrote the file, by its name: a tensorboard_trace_handler name's `<worker>.<pid>`
    (one file per profiling cycle), else the whole name. Files of one worker are cycles of one rank."""
    name = os.path.basename(path)
    m = _TB_NAME.match(name)
    return m.group("worker") if m else name


def _identity(path: str, di: dict, o_name: list, o_args) -> dict:
    """rank / world_size (None where unknown) and where each came from, the distributedInfo with only
    the values that passed (`di`, what collective matching reads), and a problem line per fallback."""
    problems = []
    rank = di.get("rank")
    rank_from = "distributedInfo"
    if rank is not None and not _valid(rank, 0, MAX_WORLD):
        problems.append(f"{path}: distributedInfo.rank {str(rank)[:40]!r} is not a rank (ignored)")
        rank = None
    ws = di.get("world_size")
    ws_from = "distributedInfo"
    if ws is not None and not _valid(ws, 1, MAX_WORLD + 1):
        problems.append(f"{path}: distributedInfo.world_size {str(ws)[:40]!r} is not a plausible world size "
                        f"(1…{MAX_WORLD}; ignored)")
        ws = None
    pg_config = []
    for p in di.get("pg_config") if isinstance(di.get("pg_config"), list) else []:
        if isinstance(p, dict):
            p = dict(p)
            if not _valid(p.get("pg_size"), 1, MAX_WORLD + 1):
                p.pop("pg_size", None)
            pg_config.append(p)
    if rank is None:
        rank = rank_from_name(path)
        rank_from = "file name" if rank is not None else None
    if ws is None:
        sizes = [p["pg_size"] for p in pg_config if "pg_size" in p]
        ws_from = "pg_config"
        if not sizes:  # the largest process group any collective names (a lower bound of the world)
            ws_from = "collectives' group sizes"
            for i, n in enumerate(o_name):
                if n == "record_param_comms":
                    g = o_args[i].get("Group size")
                    if _valid(g, 1, MAX_WORLD + 1):
                        sizes.append(g)
        ws = max(sizes) if sizes else None
        if ws is None:
            ws_from = None
    if not di:
        problems.append(f"{path}: no distributedInfo (recorded without a process group)"
                        + (f": rank {rank} from the file name" if rank is not None else ""))
    elif rank_from != "distributedInfo":
        problems.append(f"{path}: distributedInfo has no usable rank"
                        + (f": rank {rank} from the file name" if rank is not None else ""))
    if di and ws_from != "distributedInfo":
        problems.append(f"{path}: distributedInfo has no usable world_size: "
                        + (f"{ws} from {ws_from}" if ws is not None else "job size unknown"))
    clean = {k: v for k, v in di.items() if k not in ("rank", "world_size", "pg_config")}
    clean.update(rank=rank, world_size=ws if ws is not None else math.nan, pg_config=pg_config)
    return {"rank": rank, "rank_from": rank_from, "world_size": ws, "world_from": ws_from, "di": clean,
            "worker": worker_of(path), "problems": problems}


def _launch_ns(launches: pd.DataFrame, pos: np.ndarray) -> pd.arrays.IntegerArray:
    """Per kernel, `ts_ns` of its launch (row `pos` of `launches`, frames.match_positions), <NA> if none."""
    missing = pos < 0
    ts = launches["ts_ns"].to_numpy()
    return pd.arrays.IntegerArray(np.where(missing, 0, ts[pos] if len(ts) else 0).astype(np.int64), missing)


@functools.cache
def _no_hooks() -> pd.DataFrame:
    return frame("hooks")  # building an empty frame column by column costs ~0.5 ms, ten times a copy


def column(values: list, ints: bool = False) -> list | np.ndarray:
    """`values` for a frame column: an int64 (bool) array when all are Python ints (bools), which is what
    pandas infers from such a list, 5× slower; else the list itself, for pandas to infer.
    `ints`: the reader guarantees Python ints only (Events.ints), so the type of each is not checked."""
    kinds = ({int} if values else set()) if ints else set(map(type, values))
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: pandas infers uint64 or object
            return values
    return np.array(values, dtype=bool) if kinds == {bool} else values


def _shared_strings(names: list) -> list:
    """`names` with one object per distinct string (pickles as references, see above)."""
    one: dict = {}
    return [one.setdefault(n, n) for n in names]


def _objects(col: pd.Series, rows: np.ndarray | None = None) -> pd.Series:
    """The values of an object column (at `rows`) for a new frame, kept as objects: handed over as a bare
    array, strings would be inferred as the `str` dtype."""
    v = col.to_numpy(dtype=object)
    return pd.Series(v if rows is None else v[rows], dtype=object, copy=False)


# Host ops that are communication, not compute, in a CPU-only trace: gloo's and NCCL's c10d:: ops, and
# record_param_comms, torch's record of a collective's launch (or wait), which NCCL traces carry instead.
COMM_HOST_OPS = ("c10d::", "record_param_comms", "nccl:", "gloo:")


def _compute(rank: int, kernels: pd.DataFrame, ops_all: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The `compute` frame. GPU traces: non-communication device activity, with the kernels' launch steps.
    CPU-only traces: top-level ops of the main thread, by the host `steps`."""
    if len(kernels):
        k = np.flatnonzero(~kernels["is_comm"].to_numpy(bool))
        start = kernels["start_ns"].to_numpy()[k]
        # a kernel belongs to the step that launched it (load.device_steps: the device lags the host)
        return frame("compute", {
            "rank": rank, "step": kernels["step"].to_numpy()[k], "name": _objects(kernels["name"], k),
            "start_ns": start, "end_ns": kernels["end_ns"].to_numpy()[k], "stream": kernels["stream"].to_numpy()[k],
            "kind": kernels["kind"].array.take(k)})
    if not len(ops_all):
        return frame("compute")
    # The main thread is the one that launched the collectives (else the busiest).
    comm = ops_all["name"].str.startswith(COMM_HOST_OPS).to_numpy(bool)
    tids = ops_all.loc[comm, "tid"]
    main = tids.mode().iloc[0] if len(tids) else ops_all["tid"].mode().iloc[0]
    o = ops_all[ops_all["tid"] == main].sort_values(["start_ns", "end_ns"], ascending=[True, False])
    prev_end = np.maximum.accumulate(o["end_ns"].to_numpy())
    top = np.ones(len(o), dtype=bool)
    top[1:] = o["start_ns"].to_numpy()[1:] >= prev_end[:-1]
    o = o[top & ~o["name"].str.startswith(COMM_HOST_OPS).to_numpy()]
    df = pd.DataFrame({"rank": rank, "name": o["name"], "start_ns": o["start_ns"], "end_ns": o["end_ns"],
                       "stream": o["tid"], "kind": "cpu_op"})
    df["step"] = assign_steps(np.full(len(df), rank), df["start_ns"], steps)
    return frame("compute", df)


def _ops(rank: int, ops_all: pd.DataFrame, dims: list, strides: list, types: list, kernels: pd.DataFrame,
         launch_pos: np.ndarray, l_ext: list) -> pd.DataFrame:
    """cpu ops that recorded shapes, each with the kernels it launched (kernel → launch by correlation →
    the launch's External id = the op's External id). Built from plain lists and dicts: pandas
    groupby-to-list over thousands of tiny groups costs ~100× more."""
    keep = [i for i, d in enumerate(dims) if d is not None]
    sel = ops_all.iloc[keep]
    # Shapes repeat every step: share one list per distinct value, so frames pickle (to the parent
    # process) and unpickle as references instead of ~10⁵ small lists. Treat them as read-only.
    pool: dict = {}

    def shared(v):
        if v is None:
            return None
        return pool.setdefault(orjson.dumps(v), v)

    ops = pd.DataFrame({"rank": rank, "name": sel["name"].to_numpy(), "start_ns": sel["start_ns"].to_numpy(),
                        "end_ns": sel["end_ns"].to_numpy(), "tid": sel["tid"].to_numpy(),
                        "external_id": sel["external_id"].to_numpy(),
                        "dims": pd.Series([shared(dims[i]) for i in keep], dtype=object),
                        "strides": pd.Series([shared(strides[i]) for i in keep], dtype=object),
                        "dtypes": pd.Series([shared(types[i]) for i in keep], dtype=object)})
    names: dict = {}
    first: dict = {}
    total: dict = {}
    grids: dict = {}
    if len(kernels) and len(l_ext) and len(ops):
        launch = launch_pos.tolist()
        kn, ks, ke = kernels["name"].tolist(), kernels["start_ns"].tolist(), kernels["end_ns"].tolist()
        kg = kernels["grid"].tolist()
        for i in np.argsort(kernels["start_ns"].to_numpy(), kind="stable").tolist():
            x = l_ext[launch[i]] if launch[i] >= 0 else None
            if x is None or x < 0:
                continue
            if x not in names:
                names[x], first[x], total[x], grids[x] = [], ks[i], 0, []
            names[x].append(sys.intern(kn[i]))
            total[x] += ke[i] - ks[i]
            grids[x].append(shared(kg[i]))
    ext = ops["external_id"].tolist()
    ops["kernel_names"] = pd.Series([names.get(x) for x in ext], dtype=object)
    ops["kernel_ns"] = ns_array([first.get(x) for x in ext])
    # exact Python-int sums; a sum past the loader's time range (kernels of absurd durations, each in range
    # alone) is unknown, not a float that loses its low digits or an int64 that wraps
    ops["kernel_dur_ns"] = ns_array([None if (d := total.get(x)) is None or d >= NS_LIMIT else d for x in ext])
    ops["grids"] = pd.Series([grids.get(x) for x in ext], dtype=object)
    return ops
