"""Finding the collectives of one rank in a Kineto trace.

NCCL (GPU traces): each communication kernel is matched to the `record_param_comms` cpu op that launched
it: kernel `correlation` → the cuda_runtime/driver launch with the same correlation → the
`record_param_comms` op on the launch's thread whose [start, end] contains the launch. That op carries the
collective name, message sizes, dtype and process group. Kernels whose launch is outside the profiling
window (or not inside such an op) fall back to their name (`ncclDevKernel_AllGather_…`), with unknown
bytes; `record_param_comms` ops whose kernel is outside the window keep unknown start/end. Older traces
(torch < 2.1) name no collective, size or group on `record_param_comms`: the name comes from the innermost
enclosing `c10d::<op>` op or `nccl:<op>` range on its thread, else from an `nccl:<op>` cpu op nested
inside it (both nestings occur), the size from its input's `Input Dims` × `Input type` (else from those of
the op that named it), and the group is "0"; a record that neither names a collective nor launched a kernel is
dropped, and so are `wait` records (waiting on a work handle communicates nothing). RCCL kernels
(`rccl…Kernel`, ROCm) count as NCCL's.

gloo (CPU traces): there is no `record_param_comms`; a `c10d::<op>` cpu op on the caller thread
launches, and a `gloo:<op>` event on a gloo worker thread executes (including the wait for peers). They
are not linked, so each launch is paired, in launch order, with the earliest unpaired later execution of
a compatible op (reduce_scatter executes as `gloo:all_reduce`) whose tensor size agrees.

gloo's ops name no process group: their group is pg_config's one group, else (several groups, or no
pg_config) the stand-in `gloo`, numbered as one group in launch order. The worker threads do not tell the
groups apart: each group runs its gloo work on a pool of threads (2 by default) that the trace does not tie
to the group, and a group's collectives alternate between them (tests/data/gloo2). The loader says where
pg_config lists several groups (loader._gloo_groups_unknown).

Group size: the collective's `Group size` arg where recorded, else its group's `pg_size` in
distributedInfo.pg_config, else the world size for the default group "0"; gloo's ops name no group, so
theirs is the one `pg_size` all of pg_config's groups share; unknown (NaN) otherwise.

Label (and `label_source`): the innermost enclosing `record_function` range named
`commscope:<label>:<phase>` on the launching thread (`scope`), else the innermost enclosing user-code
Python frame there, in traces recorded with_stack (`stack`, `model.py:88 forward`:
commscope.load.stack_labels), else the collective's own name (`name`). A send or recv is not a collective:
it takes a group of its own rank (`_point_to_point`). `seq` numbers a rank's collectives per process group in
execution order (NCCL runs one communicator's kernels in launch order), the cross-rank match key; the
loader (`commscope.load.loader._pair`) unpairs keys whose members disagree on op, dtype or size.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from commscope.load.frames import (COLUMNS, P2P_MARK, assign_steps, dtype_size, frame, is_ns, normalize_op, ns_array,
                                   rel, unlinked)
from commscope.load.stack_labels import frame_label
from commscope.util.num import is_tensor_shape

LABEL_PREFIX = "commscope:"
COLLECTIVE_COLS = COLUMNS["collectives"]


def collectives(rank: int, di: dict, kernels: pd.DataFrame, launches: pd.DataFrame, ops_all: pd.DataFrame,
                op_args: list, annotations: pd.DataFrame, launch_pos: np.ndarray, steps: pd.DataFrame,
                problems: list[str] | None = None, device_windows: pd.DataFrame | None = None,
                py_frames: pd.DataFrame | None = None, ann_shapes: dict | None = None) -> pd.DataFrame:
    """The rank's `collectives` frame (contract columns): a collective's step is the host step (`steps`)
    of its launch; one with no launch in the trace takes the step whose `device_windows` (load.device_steps;
    default `steps`) holds its start. `launch_pos`: per
    kernel, the row of its launch in `launches` (frames.match_positions), −1 if none. `di`: the
    distributedInfo as kineto._identity checked it (`world_size` NaN where unknown). `ann_shapes`: the
    (`Input Dims`, `Input type`) of `nccl:<op>` annotations by their index label in `annotations`. What was
    left out is said in `problems`."""
    pgs = {str(p.get("pg_name")): p for p in (di.get("pg_config") or []) if isinstance(p, dict)}
    is_rpc = ops_all["name"].to_numpy() == "record_param_comms"  # numpy: 5× less overhead than a Series ==
    comm_k = kernels[kernels["is_comm"]] if len(kernels) else kernels
    if len(comm_k) and problems is not None:
        n_unlinked = int(unlinked(comm_k).sum())
        if n_unlinked:
            problems.append(f"{n_unlinked} of {len(comm_k)} communication kernels carry no "
                            "args.correlation, so they cannot be linked to their launches: such a launch and its "
                            "kernel may each count as a collective, and those collectives' counts, sizes and "
                            "exposed times are not reliable")
    if is_rpc.any() or len(comm_k):
        comm_pos = launch_pos[kernels["is_comm"].to_numpy(bool)] if len(kernels) else launch_pos
        rows = _nccl(rank, di, pgs, comm_k, comm_pos, launches, ops_all, is_rpc, op_args, annotations,
                     problems if problems is not None else [], ann_shapes or {})
    else:
        rows = _gloo(rank, di, pgs, ops_all, op_args, problems if problems is not None else [])
    _point_to_point(rows, rank)
    if not rows:
        df = frame("collectives", pd.DataFrame({c: ns_array([]) if is_ns(c) else [] for c in _ROW_COLS})
                   .assign(rank=rank, seq=pd.Series(dtype=np.int64)))
        df["step"] = assign_steps(np.full(0, rank), df["call_ns"], steps)
        return df
    # Column lists, reordered and labelled as lists and arrays: the frame is built once, in the contract's
    # column order (building it from the rows, then dropping, sorting and reordering copied it five times).
    col = {c: [r[c] for r in rows] for c in _ROW_COLS}
    ns = {c: ns_array(col[c]) for c in _ROW_COLS if is_ns(c)}
    labels, phases, sources = _label(col["_name"], col["_tid"], col["call_ns"], annotations, py_frames)
    # execution start, else launch: the order of the frame and the time `_sequence` anchors on
    t = _fill(ns["start_ns"], ns["call_ns"])
    o = int(t[~t.isna()].min()) if (~t.isna()).any() else 0
    seq = _sequence(col["group"], rel(ns["call_ns"], o), rel(t, o))
    order = np.argsort(rel(t, o), kind="stable")  # NaN (neither known) last, in row order, as sort_values
    # a collective belongs to the step that launched it; one launched before the profiler started to the
    # step whose device window its kernel ran in (the host range it ran in may belong to the next step)
    call, start = ns["call_ns"][order], ns["start_ns"][order]
    who = np.full(len(rows), rank)
    step = np.where(call.isna(), assign_steps(who, start, steps if device_windows is None else device_windows),
                    assign_steps(who, call, steps))
    unordered = {**col, **ns, "label": labels, "phase": phases, "seq": seq, "label_source": sources}
    out = {"rank": rank, "step": step}  # step: already in frame order
    for c in COLLECTIVE_COLS[2:]:
        if c not in unordered:  # a run directory's alone (end_at_wait): frame() fills it
            continue
        v = unordered[c]
        out[c] = [v[i] for i in order] if isinstance(v, list) else v[order]
    return frame("collectives", out)


POINT_TO_POINT = ("send", "recv")


def _point_to_point(rows: list[dict], rank: int) -> None:
    """A send or recv takes a group of its own rank, `<group> (point-to-point, rank R)`, of size 2: it is
    not a collective of its process group (its peer calls the other op, and a pipeline stage sends more
    than it receives), so numbering it with the group's collectives would shift their sequence numbers
    apart across ranks and make it look like a desync. Its peer is not matched: it counts toward its
    rank's communication time and overlap, never toward cross-rank analyses (skew, stragglers, bandwidth,
    the doctor's rules). A row named from its kernel alone (ncclDevKernel_SendRecv, launched before the
    profiling window) keeps its group: NCCL runs all_to_all with that kernel too."""
    for r in rows:
        if r["op"] in POINT_TO_POINT and not r.get("_kernel_named"):
            r["group"] = f"{r['group']}{P2P_MARK}{rank})"
            r["group_size"] = 2


def _fill(a: pd.arrays.IntegerArray, b: pd.arrays.IntegerArray) -> pd.arrays.IntegerArray:
    """`a` with its missing values taken from `b` (Series.fillna of one nullable column by another)."""
    return pd.arrays.IntegerArray(np.where(a._mask, b._data, a._data), a._mask & b._mask)


def _sequence(groups: list, call_all: np.ndarray, t_all: np.ndarray) -> np.ndarray:
    """Per-group sequence numbers anchored at the first collective launched inside the profiling window.

    Ranks start their windows at the same step boundary, so launches inside the window line up across
    ranks; kernels of collectives launched before the window (GPU lagging the CPU) differ in number per
    rank, so they are numbered backwards from the anchor (−1, −2, …) and later ones onwards.
    `call_all`, `t_all`: launch and (execution start, else launch) times, NaN where unknown.
    """
    seq = np.zeros(len(groups), dtype=np.int64)
    members: dict = {}
    for i, g in enumerate(groups):
        if not pd.isna(g):  # a missing group has no sequence (0), as groupby drops NA keys
            members.setdefault(g, []).append(i)
    for idx in members.values():
        idx = np.asarray(idx, dtype=np.intp)
        call = call_all[idx]
        start = t_all[idx]
        launched = ~np.isnan(call)
        li = idx[launched][np.argsort(call[launched], kind="stable")]
        seq[li] = np.arange(len(li))
        anchor = np.nanmin(start[launched]) if launched.any() else np.inf
        ui = idx[~launched][np.argsort(start[~launched], kind="stable")]
        us = t_all[ui]
        before = ui[us < anchor]
        after = ui[us >= anchor]
        seq[before] = np.arange(-len(before), 0)
        seq[after] = len(li) + np.arange(len(after))
    return seq


_ROW_COLS = ["label", "phase", "op", "bytes", "dtype", "group", "group_size", "call_ns", "return_ns",
             "wait_ns", "wait_end_ns", "start_ns", "end_ns", "stream", "timing", "_tid", "_name"]


def _row(**kw) -> dict:
    r = dict.fromkeys(_ROW_COLS, np.nan)
    r.update(wait_ns=np.nan, wait_end_ns=np.nan)
    r.update(kw)
    return r


# `record_param_comms` names that are not collectives: waiting on a work handle (functional collectives'
# `wait_tensor`) launches no communication of its own
_NOT_COLLECTIVES = {"wait", "wait_tensor", "work_wait", "waittensor"}
# What names the collective of a `record_param_comms` op in traces that do not name it on the op
# (torch < 2.1): the c10d dispatcher op or ProcessGroupNCCL's `nccl:<op>` range on the same thread, either
# around it or, in some torch versions, nested inside it (`record_param_comms` ⊃ `nccl:all_to_all`)
_WRAPPERS = ("c10d::", "nccl:", "rccl:")
_CHILDREN = ("nccl:", "rccl:")


def _wrapper_names(rpc: pd.DataFrame, need: np.ndarray, ops_all: pd.DataFrame, op_args: list, ann: pd.DataFrame,
                   ann_shapes: dict, prefer_c10d: bool = False) -> dict:
    """Row position in `rpc` → (collective name, `Input Dims`, `Input type`, start and end of the op or range
    that names it), for the rows `need` (no `Collective name`): the innermost enclosing `c10d::<op>` / `nccl:<op>` op
    or range on its thread, else the first `nccl:<op>` op or range that starts inside it on that thread.
    Their shapes size the collective where the `record_param_comms` op records none. `prefer_c10d`: of the
    enclosing ones, the innermost `c10d::<op>` where there is one (its arguments hold every tensor: an
    all_gather's output too, where `nccl:<op>` records its input alone)."""
    parts = []
    for f, is_ops in ((ops_all, True), (ann, False)):
        if len(f):
            hit = f["name"].str.startswith(_WRAPPERS).to_numpy(bool)
            parts.append(pd.DataFrame({"name": f["name"].to_numpy(dtype=object)[hit],
                                       "tid": f["tid"].to_numpy(dtype=object)[hit],
                                       "start_ns": f["start_ns"].to_numpy()[hit], "end_ns": f["end_ns"].to_numpy()[hit],
                                       "op_row": np.flatnonzero(hit) if is_ops else -1,
                                       "ann_key": -1 if is_ops else f.index.to_numpy()[hit]}))
    wrap = pd.concat(parts, ignore_index=True) if parts else None
    out: dict = {}
    if wrap is None or not len(wrap):
        return out
    w_name, w_tid = wrap["name"].to_numpy(dtype=object), wrap["tid"].to_numpy(dtype=object)
    w_s, w_e = wrap["start_ns"].to_numpy(), wrap["end_ns"].to_numpy()
    w_op, w_ann = wrap["op_row"].to_numpy(), wrap["ann_key"].to_numpy()
    w_child = np.array([n.startswith(_CHILDREN) for n in w_name], dtype=bool)
    w_c10d = np.array([n.startswith("c10d::") for n in w_name], dtype=bool)
    r_tid, r_s, r_e = rpc["tid"].to_numpy(dtype=object), rpc["start_ns"].to_numpy(), rpc["end_ns"].to_numpy()

    def named(h: int) -> tuple:
        n = w_name[h]
        short = n.split("::", 1)[1] if "::" in n else n.split(":", 1)[1]
        if w_op[h] >= 0:
            return short, ops_all["dims"].iat[w_op[h]], op_args[w_op[h]].get("Input type"), int(w_s[h]), int(w_e[h])
        return (short, *ann_shapes.get(int(w_ann[h]), (None, None)), int(w_s[h]), int(w_e[h]))

    for i in np.flatnonzero(need):
        same = w_tid == r_tid[i]
        hit = np.flatnonzero(same & (w_s <= r_s[i]) & (w_e >= r_s[i]))
        if prefer_c10d and w_c10d[hit].any():
            hit = hit[w_c10d[hit]]
        if len(hit):
            out[int(i)] = named(hit[np.argmax(w_s[hit])])
            continue
        inner = np.flatnonzero(same & w_child & (w_s > r_s[i]) & (w_s <= r_e[i]))
        if len(inner):
            out[int(i)] = named(inner[np.argmin(w_s[inner])])
    return out


def _dims_size(dims, types) -> tuple[int | None, str | None]:
    """Elements and dtype of a `record_param_comms` op's first input (its tensor, in traces that record
    shapes but not message sizes); None where it is a tensor list or not recorded."""
    first = dims[0] if isinstance(dims, list) and dims else None
    if not (isinstance(first, list) and first and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                       for x in first)):
        return None, None
    return math.prod(first), _known_dtype(types, 0)


def _known_dtype(types, i: int) -> str | None:
    """The `i`-th `Input type` where it is a dtype commscope knows the size of, else None."""
    dt = types[i] if isinstance(types, list) and i < len(types) and isinstance(types[i], str) else None
    return dt if not np.isnan(dtype_size(dt)) else None


DEFAULT_GROUP = "0"  # the default process group's name in `Process Group Name` and pg_config's `pg_name`
# gloo collectives' group where pg_config does not name exactly one: their `c10d::` ops name none, and a
# group's gloo work runs on a pool of worker threads (2 by default) that nothing in the trace ties to it
GLOO_GROUP = "gloo"


def _group_size(group: str, pgs: dict, di: dict) -> float:
    """The size of process group `group` where its collective does not record one (`Group size`): its
    `pg_size` in distributedInfo.pg_config, else the world size for the default group (every rank is in
    it); NaN where neither tells (a group pg_config does not list, or an unknown world size)."""
    size = pgs.get(group, {}).get("pg_size")
    if size is not None:
        return size
    return di.get("world_size", np.nan) if group == DEFAULT_GROUP else np.nan


# A world size beyond this is not believed (no job has a million ranks): per-rank structures are sized
# by the world size, and a corrupt 10⁹ must not allocate them. A `Group size` beyond it is not recorded.
MAX_WORLD = 1 << 20
# Elements of one message: more is not a message (2^58 elements of the widest dtype, complex128, are
# 2^62 bytes, int64 with room), and a byte count beyond int64 cannot be written as JSON. A `… msg nelems`
# beyond it is not recorded (the size comes from the shapes, else is unknown).
MAX_NELEMS = 1 << 58


def _num(v, lo: int = 0, hi: int = MAX_NELEMS) -> int | None:
    """A message size (or, with `lo`/`hi`, a group size) as recorded: an integer in [lo, hi), else None (a
    wrong type or an impossible value is not a size)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi else None


def _impossible(v, lo: int = 0, hi: int = MAX_NELEMS) -> bool:
    """An integer outside [lo, hi): a size recorded, but not one that can be."""
    return isinstance(v, int) and not isinstance(v, bool) and not lo <= v < hi


def _nccl(rank, di, pgs, comm_k, comm_pos, launches, ops_all, is_rpc, op_args, annotations, problems,
          ann_shapes) -> list[dict]:
    """NCCL/RCCL collectives: one row per `record_param_comms` op (its kernels' span where it launched any),
    then one per communication kernel that no such op launched."""
    rpc = ops_all[is_rpc]
    rpc_args = [op_args[i] for i in np.flatnonzero(is_rpc)]
    named = np.array(["Collective name" in a for a in rpc_args], dtype=bool)
    wrapper = _wrapper_names(rpc, ~named, ops_all, op_args, annotations, ann_shapes) if not named.all() else {}
    k = _with_launch(comm_k, comm_pos, launches)
    owner = _owners(k, rpc)
    rows, stream_group = _rpc_rows(rpc, rpc_args, wrapper, _spans(k, owner), pgs, di, problems)
    default_group = next(iter(pgs)) if len(pgs) == 1 else None
    unowned = np.flatnonzero(owner < 0)
    launched = _launch_wrappers(k, unowned, ops_all, op_args, annotations, ann_shapes)
    for j, name, stream, s_, e_ in zip(unowned.tolist(), k["name"].to_numpy()[unowned].tolist(),
                                       k["stream"].to_numpy()[unowned].tolist(),
                                       k["start_ns"].to_numpy()[unowned].tolist(),
                                       k["end_ns"].to_numpy()[unowned].tolist()):
        group = stream_group.get(stream, default_group or f"stream:{stream}")
        extra: dict = {}
        if j in launched:
            # launched inside a c10d::<op> / nccl:<op> that records no record_param_comms (some torch versions,
            # some ops): that op names the collective, its shapes size it, its span is the launch call
            w_name, w_dims, w_types, w_s, w_e = launched[j]
            nel, dt = _largest_size(w_dims, w_types)
            op = normalize_op(w_name)
            extra = dict(bytes=nel * dtype_size(dt) if nel is not None else np.nan, dtype=dt, call_ns=w_s,
                         return_ns=w_e)
        else:  # its launch is not in the trace (before the profiling window) or nothing around it names it
            op = normalize_op(re.sub(r"^rccl", "nccl", name.split("(")[0], flags=re.I))
            # a SendRecv kernel runs all_to_all as well as a send or recv: its name alone is no point-to-point op
            extra = dict(_kernel_named=True)
        rows.append(_row(op=op, group=group, group_size=_group_size(group, pgs, di), start_ns=s_, end_ns=e_,
                         stream=stream, timing="kernel", _name=launched[j][0] if j in launched else op, **extra))
    return rows


def _owners(k: pd.DataFrame, rpc: pd.DataFrame) -> np.ndarray:
    """Row of `rpc` whose span holds each kernel's launch on the same thread (kernel → launch → enclosing
    record_param_comms, searchsorted on each thread's sorted starts); -1 where none does."""
    owner = np.full(len(k), -1, dtype=np.int64)
    for tid, idx in rpc.groupby("tid", sort=False).indices.items():
        starts = rpc["start_ns"].to_numpy()[idx]
        ends = rpc["end_ns"].to_numpy()[idx]
        o = np.argsort(starts, kind="stable")
        starts, ends, idx = starts[o], ends[o], idx[o]
        sel = (k["tid"] == tid).to_numpy()
        t = k["ts_ns"].to_numpy()[sel]
        j = np.searchsorted(starts, t, side="right") - 1
        ok = (j >= 0)
        ok[ok] &= t[ok] <= ends[j[ok]]
        res = np.full(len(t), -1, dtype=np.int64)
        res[ok] = idx[j[ok]]
        owner[sel] = res
    return owner


def _spans(k: pd.DataFrame, owner: np.ndarray) -> dict[int, list]:
    """Owning op → [first kernel start, last kernel end, stream]: the kernels of one op (coalesced) are one
    interval."""
    span: dict[int, list] = {}
    for o, s_, e_, st in zip(owner.tolist(), k["start_ns"].tolist(), k["end_ns"].tolist(), k["stream"].tolist()):
        if o >= 0:
            if o in span:
                span[o][0] = min(span[o][0], s_)
                span[o][1] = max(span[o][1], e_)
            else:
                span[o] = [s_, e_, st]
    return span


def _rpc_rows(rpc: pd.DataFrame, rpc_args: list, wrapper: dict, span: dict, pgs, di,
              problems: list[str]) -> tuple[list[dict], dict]:
    """One row per record_param_comms op that names a collective or launched a kernel, and each kernel
    stream's first process group (the group of the stream's kernels that no op owns)."""
    rows: list[dict] = []
    stream_group: dict = {}
    rpc_dims = rpc["dims"].tolist()
    r_start, r_end, r_tid = rpc["start_ns"].tolist(), rpc["end_ns"].tolist(), rpc["tid"].tolist()
    anonymous = impossible = 0
    for i, a in enumerate(rpc_args):
        w_name, w_dims, w_types = wrapper.get(i, ("unknown", None, None))[:3]
        name = str(a.get("Collective name", w_name))
        if name.lower() in _NOT_COLLECTIVES:
            continue
        if name == "unknown" and i not in span:  # may as well be a wait: nothing says it communicated
            anonymous += 1
            continue
        op = normalize_op(name)
        dt = a.get("dtype")
        n_in, n_out = _num(a.get("In msg nelems")), _num(a.get("Out msg nelems"))
        if _impossible(a.get("In msg nelems")) or _impossible(a.get("Out msg nelems")) or \
                _impossible(a.get("Group size"), 1, MAX_WORLD + 1):
            impossible += 1
        nel = n_out if op == "all_gather" else n_in
        if nel is None:
            nel = n_in if n_in is not None else n_out
        if nel is None:  # older traces: the shape of its input tensor, where recorded
            nel, dims_dt = _dims_size(rpc_dims[i], a.get("Input type"))
            if nel is None:  # else that of the nccl:<op> / c10d::<op> op or range that names it
                nel, dims_dt = _dims_size(w_dims, w_types)
            if dt is None:
                dt = dims_dt
        size = dtype_size(dt)
        group = str(a.get("Process Group Name", "0"))
        gsize = _num(a.get("Group size"), 1, MAX_WORLD + 1)
        if gsize is None:
            gsize = _group_size(group, pgs, di)
        r = _row(op=op, bytes=(nel * size if nel is not None else np.nan), dtype=dt, group=group,
                 group_size=gsize, call_ns=r_start[i], return_ns=r_end[i], timing="kernel", _tid=r_tid[i],
                 _name=name)
        if i in span:
            s_, e_, st = span[i]
            r.update(start_ns=s_, end_ns=e_, stream=st)
            stream_group.setdefault(st, group)
        rows.append(r)
    if impossible:
        problems.append(f"{impossible} record_param_comms op(s) record a message size (`In/Out msg nelems`, "
                        f"2^58 elements or more) or `Group size` (outside 1…{MAX_WORLD}) that no collective has: "
                        "taken as not recorded (the size from the op's shapes, the group size from pg_config or "
                        "the world size)")
    if anonymous:
        problems.append(f"{anonymous} record_param_comms op(s) name no collective (no 'Collective "
                        "name', no c10d/nccl op around or inside them) and launched no kernel in the trace: not "
                        "counted as collectives")
    return rows, stream_group


def _launch_wrappers(k: pd.DataFrame, rows: np.ndarray, ops_all: pd.DataFrame, op_args: list,
                     annotations: pd.DataFrame, ann_shapes: dict) -> dict:
    """Row of `k` (communication kernels with their launch, _with_launch) → the enclosing `c10d::<op>` /
    `nccl:<op>` op or range of its launch (_wrapper_names' tuple), for the `rows` whose launch is known."""
    ts = pd.to_numeric(k["ts_ns"], errors="coerce").to_numpy(np.float64)
    rows = rows[~np.isnan(ts[rows])]
    if not len(rows):
        return {}
    at = ts[rows].astype(np.int64)
    calls = pd.DataFrame({"tid": k["tid"].to_numpy(dtype=object)[rows], "start_ns": at, "end_ns": at})
    found = _wrapper_names(calls, np.ones(len(rows), dtype=bool), ops_all, op_args, annotations, ann_shapes,
                           prefer_c10d=True)
    return {int(rows[i]): w for i, w in found.items()}


def _largest_size(dims, types) -> tuple[int | None, str | None]:
    """Elements and dtype of the largest tensor among a c10d op's arguments: its output for an all_gather,
    its input for a reduce_scatter, the one tensor of an all_reduce (nccl-tests' bytes of each); None where
    no argument is a plain tensor shape."""
    if not isinstance(dims, list):
        return None, None
    sizes = [math.prod(d) if is_tensor_shape(d) else -1 for d in dims]
    if not sizes or max(sizes) <= 0:
        return None, None
    i = int(np.argmax(sizes))
    return sizes[i], _known_dtype(types, i)


def _with_launch(comm_k: pd.DataFrame, pos: np.ndarray, launches: pd.DataFrame) -> pd.DataFrame:
    """Communication kernels with the `tid` and `ts_ns` of their launch (row `pos`, −1: none, then NaN)."""
    found = pos >= 0
    k = comm_k.reset_index(drop=True)
    tid = np.full(len(k), np.nan, dtype=object)
    tid[found] = launches["tid"].to_numpy(dtype=object)[pos[found]]
    ts = np.zeros(len(k), dtype=np.int64)
    ts[found] = launches["ts_ns"].to_numpy()[pos[found]]
    k["tid"] = pd.array(tid, dtype=launches["tid"].dtype) if found.all() else tid
    k["ts_ns"] = ts if found.all() else pd.Series(np.where(found, ts, 0), dtype=np.float64).where(found)
    return k


def _numels(dims) -> list[int]:
    """Element counts of every tensor in an `Input Dims` entry (tensor lists flattened)."""
    out = []

    def ints(x) -> bool:
        return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in x)

    for d in dims if isinstance(dims, list) else []:
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            out.extend(math.prod(x) for x in d if ints(x))
        elif d and ints(d):
            out.append(math.prod(d))
    return out


def _dtype_of(args: dict) -> str | None:
    """The first known dtype among an op's recorded input types."""
    types = args.get("Input type")
    return next((t for t in types if isinstance(t, str) and not np.isnan(dtype_size(t))), None) \
        if isinstance(types, list) else None


def _gloo(rank, di, pgs, ops_all, op_args, problems) -> list[dict]:
    names = ops_all["name"]
    is_launch = names.str.startswith("c10d::").to_numpy()
    is_exec = names.str.startswith("gloo:").to_numpy()
    ex = ops_all[is_exec].sort_values("start_ns")
    ex_op = [normalize_op(n.split(":", 1)[1]) for n in ex["name"]]
    ex_numel = [sum(_numels(d)) if d else None for d in ex["dims"]]
    used = np.zeros(len(ex), dtype=bool)
    ex_start = ex["start_ns"].to_numpy()
    group = next(iter(pgs)) if len(pgs) == 1 else GLOO_GROUP
    # gloo's ops name no process group: its size is known where every group of pg_config has the same one
    sizes = {p.get("pg_size") for p in pgs.values()}
    gsize = _group_size(group, pgs, di) if group in pgs else (sizes.pop() if len(sizes) == 1 else np.nan)
    gsize = np.nan if gsize is None else gsize
    rows = []
    untyped = 0
    la = ops_all[is_launch]
    la_args = [op_args[i] for i in np.flatnonzero(is_launch)]
    for i in np.argsort(la["start_ns"].to_numpy(), kind="stable"):
        name = la["name"].iat[i]
        short = name.split("::", 1)[1].rstrip("_")
        op = normalize_op(short)
        if op == "unknown" or short in ("wait", "work_wait"):
            continue
        dims = la["dims"].iat[i]
        numels = _numels(dims)
        compat = {op, "all_reduce"} if op == "reduce_scatter" else {op}
        pick = -1
        for j in np.flatnonzero(~used & (ex_start >= la["start_ns"].iat[i])):
            if ex_op[j] in compat and (ex_numel[j] is None or not numels or ex_numel[j] in numels):
                pick = j
                break
        # full-array bytes: reduce_scatter input, all_gather output, all_to_all input, else the (summed) tensor(s)
        dt = _dtype_of(la_args[i])
        if la_args[i].get("Input type") is not None and not isinstance(la_args[i].get("Input type"), list):
            untyped += 1
        if dt is None and pick >= 0:  # a TensorList launch records "TensorList"; its gloo execution the dtype
            dt = _dtype_of(op_args[int(ex.index[pick])])
        if op == "all_to_all" and pick >= 0 and ex_numel[pick]:
            nel = ex_numel[pick]  # the input its gloo execution records; the launch lists output and input
        elif numels:
            nel = max(numels) if op in ("reduce_scatter", "all_gather", "all_to_all") else sum(numels)
        else:
            nel = None
        r = _row(op=op, bytes=(nel * dtype_size(dt) if nel and dt else np.nan), dtype=dt, group=group,
                 group_size=gsize, call_ns=la["start_ns"].iat[i], return_ns=la["end_ns"].iat[i],
                 timing="gloo_thread", _tid=la["tid"].iat[i], _name=short)
        if pick >= 0:
            used[pick] = True
            r.update(start_ns=ex_start[pick], end_ns=ex["end_ns"].iat[pick], stream=ex["tid"].iat[pick])
        rows.append(r)
    if untyped:
        problems.append(f"{untyped} c10d collective launch(es) record an `Input type` that is not a list: their "
                        "dtype is taken from their gloo execution, else unknown")
    return rows


def _label(names: list, tids: list, calls: list, ann: pd.DataFrame,
           py_frames: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Label, phase and label source per collective: the innermost enclosing `commscope:<label>:<phase>`
    range on its launch thread (source `scope`), else the innermost enclosing user-code Python frame there
    (`stack`: `model.py:88 forward`, commscope.load.stack_labels), else its own name and no phase
    (`name`)."""
    labels = np.array(names, dtype=object)
    phases = np.full(len(names), None, dtype=object)
    sources = np.full(len(names), "name", dtype=object)
    cs = ann[ann["name"].str.startswith(LABEL_PREFIX)] if len(ann) else ann
    if len(cs):
        c_name = cs["name"].to_numpy()
        for i, inner in enumerate(_innermost(tids, calls, cs)):
            if inner >= 0:
                body = c_name[inner][len(LABEL_PREFIX):]
                lab, _, ph = body.rpartition(":") if ":" in body else (body, "", "")
                labels[i] = lab or None  # `commscope::<phase>`: the recorder's unlabelled collective
                phases[i] = ph or None
                sources[i] = "scope"
    if py_frames is not None and len(py_frames):
        p_name = py_frames["name"].to_numpy()
        for i, inner in enumerate(_innermost(tids, calls, py_frames)):
            if inner >= 0 and sources[i] == "name":
                labels[i] = frame_label(p_name[inner])
                sources[i] = "stack"
    return labels, phases, sources


def _innermost(tids: list, calls: list, ranges: pd.DataFrame) -> np.ndarray:
    """Per launch (thread `tids[i]`, time `calls[i]`, NaN: none), the row of `ranges` (name, tid, start_ns,
    end_ns) that encloses it on its thread and starts last (ranges nest: the innermost), −1 if none.
    Only ranges that hold some launch are searched one by one (a with_stack trace's frames are many)."""
    out = np.full(len(tids), -1, dtype=np.int64)
    r_tid = ranges["tid"].to_numpy(dtype=object)
    r_s, r_e = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    launched = [i for i, t in enumerate(calls) if not pd.isna(t)]
    if not launched:
        return out
    by_tid: dict = {}
    for i in launched:
        by_tid.setdefault(tids[i], []).append(i)
    for tid, idx in by_tid.items():
        rows = np.flatnonzero(r_tid == tid)
        if not len(rows):
            continue
        idx = np.asarray(idx, dtype=np.intp)
        t = np.array([int(calls[i]) for i in idx], dtype=np.int64)
        st = np.sort(t)
        # ranges holding at least one of this thread's launches
        rows = rows[np.searchsorted(st, r_e[rows], side="right") > np.searchsorted(st, r_s[rows], side="left")]
        if not len(rows):
            continue
        s_, e_ = r_s[rows], r_e[rows]
        for i, ti in zip(idx, t):
            hit = np.flatnonzero((s_ <= ti) & (e_ >= ti))
            if len(hit):
                out[i] = rows[hit[np.argmax(s_[hit])]]
    return out
