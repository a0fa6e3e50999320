"""Merge a loaded `Trace` (all ranks) into one Chrome-JSON trace that Perfetto / chrome://tracing open.

Why: Perfetto is the viewer people already know; one file with every rank side by side shows skew and
exposed communication at a glance, with commscope's labels attached to each slice.

Layout of the output
- one process per rank (`pid` = rank, `process_name` "rank N", sorted by rank);
- tracks (threads) per rank: `steps` (with a step the rank began but recorded no end of, from its
  earliest to its latest record, "step N (no end recorded)", where the caller passes them:
  analyze.timeline_inflight.steps_begun), `compute stream <stream>` (kernels per CUDA stream), `compute (CPU
  thread <tid>)` (a CPU trace's top-level ops per thread) or `compute` (a run's regions),
  `regions`, `comm <label>` (one per collective label), `hooks` (instant events);
- a track whose slices would overlap is split into extra lanes (`comm attn #2`, ...) so that no two
  complete slices on one (pid, tid) overlap — Perfetto drops or mis-nests partially overlapping slices;
- every collective slice carries label, phase, op, bytes, dtype, group, seq and its host-side times in
  `args`;
- collectives a hung or failed run left in flight (watchdog.json / inflight.json) are drawn from their
  launch to the rank's last sign of life (the watchdog firing, else its latest record) on an `in flight
  (never completed)` track; the caller passes them in, computed by commscope.analyze.left_in_flight;
- one collective call across ranks (the same (group, seq): commscope.analyze.flows) is linked by flow
  arrows (flow v1 events `s` → `t` … → `f`), so clicking a slice in Perfetto follows the call to every
  other rank. The chain runs in the order the ranks' slices start: an arrow goes from one rank's slice to
  the slice of the rank that started the same call next, the first (`s`) is the earliest start and the
  last (`f`) the latest, the rank the others waited for. Each event sits just inside its slice's start
  (FLOW_INSET_US), so no arrow points back in time.

`write_perfetto` writes gzip when the output name ends in `.gz` (Perfetto opens both), plain JSON else,
atomically (a failed write leaves what was there and no partial file), streaming: events are encoded and
written CHUNK_EVENTS at a time, so memory beyond the loaded trace stays bounded, and the bytes are those
of one orjson.dumps of `build_perfetto`'s document. The document's first key is
`otherData` (which Perfetto and chrome://tracing ignore) with `"producer": "commscope"`: the marker by
which `export` recognises a trace it wrote and may replace (commscope.util.outputs.check_output, own_trace).

A collective without a label (a run directory's record of `"label": null`) is drawn on the
`comm (no label)` track (commscope.analyze.labels.NO_LABEL); its `args.label` stays null.

Why in reports/: a Perfetto trace is another rendering of the loaded frames, like the HTML timeline. It
draws recorded intervals as they are and runs no analysis: a collective's slice is its recorded execution
(exposure.collective_span, the same rule the timeline uses: measured start, else launch → end) and lanes
exist only because the viewer mis-draws overlapping slices. `build_perfetto` shapes the document,
`write_perfetto` writes it.

Invariants: timestamps are microseconds relative to the earliest event of the trace (`otherData.t0_ns`
keeps the absolute origin), so float precision stays sub-nanosecond-safe; slices on one track never
overlap; the input `Trace` is not modified.
"""
from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence

import numpy as np
import orjson
import pandas as pd

from commscope.analyze.exposure import collective_span
from commscope.analyze.flows import instance_ids
from commscope.analyze.labels import shown_label
from commscope.analyze.timeline_inflight import NO_END
from commscope.util.outputs import check_output, output_stream, own_trace
from commscope.util.num import whole
from commscope.util.text import printable
from commscope.analyze.intervals import assign_lanes
from commscope.load.frames import rel

NO_END_WHY = "no step record: the run stopped inside this step; the slice spans the rank's records of it"

# Stable tid blocks so tracks sort the same way in every process: steps, compute, regions, comm, hooks.
_TID_BASE = {"steps": 1, "compute": 100, "regions": 300, "comm": 1000, "hooks": 5000}


def _num(v: Any) -> Any:
    """JSON-safe scalar: NaN/None → None, numpy scalars → Python."""
    if v is None:
        return None
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return v


class _Emitter:
    """Emits one rank's events in order (to `emit`: a list's append, or the streaming writer), naming
    tracks and splitting overlapping slices into lanes. It keeps no event itself."""

    def __init__(self, rank: int, emit: Callable[[dict], None]):
        self.rank = rank
        self.emit = emit
        self.next_tid = dict(_TID_BASE)

    def track(self, kind: str, name: str) -> int:
        tid = self.next_tid[kind]
        self.next_tid[kind] += 1
        self.emit({"ph": "M", "name": "thread_name", "pid": self.rank, "tid": tid, "args": {"name": name}})
        self.emit({"ph": "M", "name": "thread_sort_index", "pid": self.rank, "tid": tid,
                   "args": {"sort_index": tid}})
        return tid

    def slices(self, kind: str, name: str, starts: np.ndarray, ends: np.ndarray,
               make: Callable[[int], tuple[str, dict]], cat: str,
               on_slice: Callable[[int, dict], None] | None = None) -> None:
        """Emit one slice per row with a start and an end; `make(i)` gives row position i's name and args
        (built one row at a time, so a rank of millions of rows never exists as dicts all at once), and
        `on_slice(i, event)` sees each slice emitted."""
        ok = ~(np.isnan(starts) | np.isnan(ends))
        idx = np.flatnonzero(ok)
        if len(idx) == 0:
            return
        s, e = starts[idx], np.maximum(ends[idx], starts[idx])
        lanes = assign_lanes(s, e)
        tids = [self.track(kind, name if k == 0 else f"{name} #{k + 1}") for k in range(int(lanes.max()) + 1)]
        # Round both ends (monotonic), then take the difference, so rounding can never create an overlap.
        ts, te = np.round(s / 1e3, 3), np.round(e / 1e3, 3)
        for j, i in enumerate(idx.tolist()):
            label, args = make(i)
            ev = {"ph": "X", "cat": cat, "name": label, "pid": self.rank, "tid": tids[lanes[j]],
                  "ts": float(ts[j]), "dur": round(float(te[j] - ts[j]), 3), "args": args}
            self.emit(ev)
            if on_slice is not None:
                on_slice(i, ev)


def _col(s: pd.Series) -> Any:
    """A column to index row by row, its values as the Series holds them: a nullable Int64 column's stay
    integers (or NA), not the floats its to_numpy() would give."""
    return s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array


_PLAIN = (int, str, bool, type(None))


# Columns that count or number something: whole numbers in JSON (36, not 36.0), though a frame may hold them
# as float64 (bytes NaN where a Kineto collective has no size; group_size, seq, step, micro_step NaN where
# unknown).
_COUNTS = ("bytes", "group_size", "seq", "step", "micro_step")


def _json_values(s: pd.Series) -> list:
    """Column `s` as the JSON values `_num` gives its cells, converted once: a slice's args then look each
    value up instead of converting it (at 1024 ranks, 17 M conversions through pandas' scalar access).
    A _COUNTS column's whole floats become ints."""
    a = s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array.to_numpy(dtype=object, na_value=None)
    if s.name in _COUNTS:
        return [v if v.__class__ in _PLAIN else whole(_num(v)) for v in a.tolist()]
    return [v if v.__class__ in _PLAIN else _num(v) for v in a.tolist()]


class _ByRank:
    """A frame's rows of each rank: their positions found once (a scan of the whole frame per rank costs
    ranks × rows), each rank's rows taken when asked for, so that only one rank's copy is held at a time
    (splitting the frame up front would hold a second copy of the whole trace)."""

    def __init__(self, df: pd.DataFrame | None):
        self.df = df
        self.rows = df.groupby("rank", sort=False).indices if df is not None and len(df) else {}

    def __call__(self, rank: int) -> pd.DataFrame:
        pos = self.rows.get(rank)
        return self.df.iloc[pos] if pos is not None else pd.DataFrame()


def _t0(trace: Any) -> int:
    cands = []
    for frame, cols in (("steps", ("start_ns",)), ("collectives", ("call_ns", "start_ns", "end_ns")),
                        ("compute", ("start_ns",)), ("regions", ("start_ns",)), ("hooks", ("t_ns",))):
        df = getattr(trace, frame, None)
        if df is None or len(df) == 0:
            continue
        for col in cols:
            v = pd.to_numeric(df[col], errors="coerce").min()
            if not pd.isna(v):
                cands.append(int(v))
    return min(cands) if cands else 0


# A flow event binds to the slice that encloses it: at a slice's exact start the viewer may bind it to the
# slice before on the track, so each event sits this far inside (1 ns, or half of a shorter slice).
FLOW_INSET_US = 0.001


def _flow_point(ev: dict) -> float:
    return round(ev["ts"] + min(FLOW_INSET_US, ev["dur"] / 2), 3)


# One collective slice as its flow events need it: (flow point, rank, pid, tid, flow name). Kept instead
# of the slice's event, so the events already written are not held for the flows at the end.
_FlowMember = tuple[float, int, int, int, str]


def _flow_events(slices: dict[int, list[_FlowMember]], emit: Callable[[dict], None]) -> None:
    """Flow v1 events chaining each instance's slices in the order they start (module docstring); ties
    by rank, so the file is the same on every export."""
    for flow, members in sorted(slices.items()):
        members = sorted(members, key=lambda m: (m[0], m[1]))
        if len(members) < 2:
            continue
        for k, (point, _, pid, tid, name) in enumerate(members):
            ph = "s" if k == 0 else "f" if k == len(members) - 1 else "t"
            fe = {"ph": ph, "id": int(flow), "cat": "collective", "name": name, "pid": pid, "tid": tid,
                  "ts": point}
            if ph == "f":
                fe["bp"] = "e"
            emit(fe)


def _other_data(trace: Any, t0: int, run_reports: Sequence[str] = (), not_drawn: int | None = None,
                problems: Sequence[str] | None = None) -> dict:
    """The document's otherData: the producer marker first (own_trace reads it from the first bytes), the
    time origin, what the loader could not read (`problems`, as the caller lists them, grouped by rank as
    `report` does (analyze.problems.loading_problems); else the trace's own, one per line: a trace missing a
    rank must say so where it is opened, not only in the terminal that wrote it) and the ranks that did
    not complete (`run_reports`, analyze.problems.run_reports, as `report` lists them), and, where the
    caller counted them (analyze.exposure.spanless), the collectives that have no slice for want of an
    execution start or end (`collectives_not_drawn`)."""
    return {"producer": "commscope", "t0_ns": int(t0), "world_size": _num(trace.world_size),
            "source": printable(str(getattr(trace, "source", ""))),
            "path": printable(str(getattr(trace, "path", ""))),
            "problems": [printable(str(p)) for p in
                         (getattr(trace, "problems", None) or [] if problems is None else problems)],
            "run_reports": [printable(str(p)) for p in run_reports],
            **({} if not_drawn is None else {"collectives_not_drawn": int(not_drawn)})}


def _emit_events(trace: Any, t0: int, emit: Callable[[dict], None], in_flight: pd.DataFrame,
                 begun: pd.DataFrame | None = None) -> None:
    """Every event of the document for `trace`, in the document's order, one at a time to `emit`: each
    rank's tracks and slices (rank by rank), then the flow events."""
    all_coll = trace.collectives
    flow_of = pd.Series(instance_ids(all_coll), index=all_coll.index) if len(all_coll) else pd.Series(dtype=int)
    flow_slices: dict[int, list[_FlowMember]] = {}
    steps_of, compute_of = _ByRank(trace.steps), _ByRank(trace.compute)
    begun_of = _ByRank(begun)
    regions_of, coll_of, hooks_of = _ByRank(getattr(trace, "regions", None)), _ByRank(all_coll), _ByRank(
        getattr(trace, "hooks", None))
    for rank in trace.ranks:
        em = _Emitter(int(rank), emit)
        emit({"ph": "M", "name": "process_name", "pid": em.rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        emit({"ph": "M", "name": "process_sort_index", "pid": em.rank, "tid": 0, "args": {"sort_index": em.rank}})
        _emit_steps(em, steps_of(rank), begun_of(rank), t0)
        _emit_compute(em, compute_of(rank), t0)
        reg = regions_of(rank)
        if len(reg):
            rnames, rsteps, micro = _col(reg["name"]), _json_values(reg["step"]), _json_values(reg["micro_step"])
            em.slices("regions", "regions", rel(reg["start_ns"], t0), rel(reg["end_ns"], t0),
                      lambda i: (str(rnames[i]), {"step": rsteps[i], "micro_step": micro[i]}),
                      "region")
        _emit_collectives(em, coll_of(rank), t0, flow_of, flow_slices)
        _emit_inflight(in_flight, int(rank), t0, em)
        hooks = hooks_of(rank)
        if len(hooks):
            tid = em.track("hooks", "hooks")
            for h in hooks.itertuples(index=False):
                emit({"ph": "i", "s": "t", "cat": "hook", "name": f"hook {h.label}", "pid": em.rank,
                      "tid": tid, "ts": round((int(h.t_ns) - t0) / 1e3, 3),
                      "args": {"label": h.label, "position": _num(h.position), "step": _num(h.step),
                               "micro_step": _num(h.micro_step)}})
    _flow_events(flow_slices, emit)


def _emit_steps(em: "_Emitter", st: pd.DataFrame, bg: pd.DataFrame, t0: int) -> None:
    """One rank's steps track: its ended steps (`st`), then the steps it began and never ended (`bg`)."""
    if not (len(st) or len(bg)):
        return
    n, none = len(st), np.zeros(0)
    step_no = np.r_[_col(st["step"]) if n else none, _col(bg["step"]) if len(bg) else none].astype(np.int64)
    loss = _json_values(st["loss"]) if n else []

    def step_slice(i: int) -> tuple[str, dict]:
        if i < n:
            return f"step {step_no[i]}", {"step": int(step_no[i]), "loss": loss[i]}
        return (f"step {step_no[i]} ({NO_END})", {"step": int(step_no[i]), "end": NO_END_WHY})

    def times(col: str) -> np.ndarray:
        return np.r_[rel(st[col], t0) if n else none, rel(bg[col], t0) if len(bg) else none]

    em.slices("steps", "steps", times("start_ns"), times("end_ns"), step_slice, "step")


def _emit_compute(em: "_Emitter", comp: pd.DataFrame, t0: int) -> None:
    """One rank's compute: a track per stream (per thread on a CPU trace, where compute is each thread's
    top-level ops)."""
    if not len(comp):
        return
    streams = comp["stream"].astype("object").where(comp["stream"].notna(), None)
    for stream in sorted(set(streams), key=lambda x: (x is None, str(x))):
        sub = comp[(streams == stream).to_numpy()] if stream is not None else comp[streams.isna().to_numpy()]
        thread = "kind" in sub and bool((sub["kind"] == "cpu_op").all())
        label = ("compute" if stream is None else f"compute (CPU thread {stream})" if thread
                 else f"compute stream {stream}")
        names, kinds, steps = _col(sub["name"]), _json_values(sub["kind"]), _json_values(sub["step"])
        em.slices("compute", label, rel(sub["start_ns"], t0), rel(sub["end_ns"], t0),
                  lambda i, n=names, k=kinds, s=steps: (str(n[i]), {"kind": k[i], "step": s[i]}),
                  "compute")


def _emit_collectives(em: "_Emitter", coll: pd.DataFrame, t0: int, flow_of: pd.Series,
                      flow_slices: dict[int, list[_FlowMember]]) -> None:
    """One rank's collectives, a track per label; each slice of a collective instance that other ranks
    share joins that instance's flow (`flow_slices`)."""
    if not len(coll):
        return
    _, start, end = collective_span(coll, t0)
    keys = [k for k in _COLL_ARGS if k in coll.columns]
    cols = {k: _json_values(coll[k]) for k in keys}
    ops = _col(coll["op"])
    names = np.array([shown_label(lab) for lab in coll["label"]], dtype=object)
    for label in sorted(set(names)):
        rows = np.flatnonzero(names == label)
        flows = flow_of.loc[coll.index[rows]].to_numpy()

        def make(i: int, rows=rows, label=label) -> tuple[str, dict]:
            r = rows[i]
            return f"{label}:{ops[r]}", {k: cols[k][r] for k in keys}

        def member(i: int, ev: dict, flows=flows) -> None:
            if flows[i] >= 0:
                flow_slices.setdefault(int(flows[i]), []).append(
                    (_flow_point(ev), em.rank, ev["pid"], ev["tid"], ev["args"].get("label") or ev["name"]))

        em.slices("comm", f"comm {label}", start[rows], end[rows], make, "comm", member)


def _emit_inflight(in_flight: pd.DataFrame, rank: int, t0: int, em: "_Emitter") -> None:
    """The collectives a hung or failed run left in flight (commscope.analyze.left_in_flight), each drawn
    from its launch to its rank's last sign of life (`until_ns`) on an `in flight (never completed)`
    track, so the export shows where every rank was stuck."""
    if not len(in_flight):
        return
    fl = in_flight[in_flight["rank"] == rank]
    if not len(fl):
        return
    fired = bool(fl["watchdog_fired"].iloc[0])
    starts = rel(fl["call_ns"], t0)
    ends = (fl["until_ns"].to_numpy(np.int64) - t0) / 1.0
    cols = {k: _col(fl[k]) for k in ("label", "op")}
    values = {k: _json_values(fl[k]) for k in ("label", "op", "bytes", "dtype", "group", "group_size", "seq",
                                               "step", "call_ns", "wait_ns", "source") if k in fl}

    def make(i: int) -> tuple[str, dict]:
        args = {k: v[i] for k, v in values.items()}
        args["until"] = "the hang watchdog fired" if fired else "the rank's last record"
        return f"{shown_label(cols['label'][i])}:{cols['op'][i]} (in flight)", args

    em.slices("comm", "in flight (never completed)", starts, ends, make, "inflight")


# A collective slice's args: the record's fields, those the frame has.
_COLL_ARGS = ("label", "phase", "op", "bytes", "dtype", "group", "group_size", "seq", "step", "stream", "timing",
              "call_ns", "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns")


def build_perfetto(trace: Any, in_flight: pd.DataFrame, run_reports: Sequence[str] = (),
                   begun: pd.DataFrame | None = None, not_drawn: int | None = None,
                   problems: Sequence[str] | None = None) -> dict:
    """The Chrome-JSON document (dict) for `trace`, all in memory; see the module docstring for the track
    layout. `in_flight` is commscope.analyze.left_in_flight(trace) and `begun` (optional)
    commscope.analyze.timeline_inflight.steps_begun(trace), `not_drawn` analyze.exposure.spanless of its
    collectives: the renderer draws and states them and never computes them. `write_perfetto` writes the
    same document without building it."""
    t0 = _t0(trace)
    events: list[dict] = []
    _emit_events(trace, t0, events.append, in_flight, begun)
    # otherData first: its producer is the marker own_trace reads from the file's first bytes
    return {"otherData": _other_data(trace, t0, run_reports, not_drawn, problems), "traceEvents": events,
            "displayTimeUnit": "ns"}


# Events encoded and written together: the writer holds at most this many events (as dicts, then as JSON)
# at a time, a few MiB, whatever the trace's size.
CHUNK_EVENTS = 20_000
_OPTS = orjson.OPT_SERIALIZE_NUMPY


def _encode_chunk(events: list[dict]) -> bytes:
    """`events` as the JSON array's items, comma-separated (orjson's array without its brackets)."""
    return orjson.dumps(events, option=_OPTS)[1:-1]


class _ChunkWriter:
    """Takes events one at a time and writes them to `f` as traceEvents items, CHUNK_EVENTS at a time."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.buf: list[dict] = []
        self.first = True

    def __call__(self, ev: dict) -> None:
        self.buf.append(ev)
        if len(self.buf) >= CHUNK_EVENTS:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        data = _encode_chunk(self.buf)
        self.buf = []
        if not self.first:
            self.f.write(b",")
        self.f.write(data)
        self.first = False


def _write_document(trace: Any, f: BinaryIO, in_flight: pd.DataFrame, run_reports: Sequence[str] = (),
                    begun: pd.DataFrame | None = None, not_drawn: int | None = None,
                    problems: Sequence[str] | None = None) -> None:
    """The document build_perfetto returns, byte for byte as orjson.dumps writes it, streamed to `f`."""
    t0 = _t0(trace)
    # otherData first: its producer is the marker own_trace reads from the file's first bytes
    other = orjson.dumps(_other_data(trace, t0, run_reports, not_drawn, problems), option=_OPTS)
    f.write(b'{"otherData":' + other + b',"traceEvents":[')
    w = _ChunkWriter(f)
    _emit_events(trace, t0, w, in_flight, begun)
    w.flush()
    f.write(b'],"displayTimeUnit":"ns"}')


def write_perfetto(trace: Any, out: str | Path, in_flight: pd.DataFrame, run_reports: Sequence[str] = (),
                   begun: pd.DataFrame | None = None, not_drawn: int | None = None,
                   problems: Sequence[str] | None = None) -> Path:
    """Write the trace's document to `out` atomically under commscope's output rule (check_output: never
    into the trace's input directory, an existing file only when it is a trace commscope wrote), gzip
    when the name ends in `.gz`; an unwritable or refused path is one UserError line. The events are
    encoded and written CHUNK_EVENTS at a time (and compressed as they go), so the export's memory beyond
    the loaded trace stays bounded; a failure or a signal mid-write leaves no partial file. `in_flight` and
    `run_reports`, `begun`, `not_drawn` and `problems` as for build_perfetto."""
    out = Path(out)
    path = getattr(trace, "path", None)
    check_output(out, str(path) if path else None, own_trace)
    with output_stream(out) as f:
        if out.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=f, mtime=0) as g:
                _write_document(trace, g, in_flight, run_reports, begun, not_drawn, problems)
        else:
            _write_document(trace, f, in_flight, run_reports, begun, not_drawn, problems)
    return out
