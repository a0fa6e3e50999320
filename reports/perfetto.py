"""Merge a loaded `Trace` (all ranks) into one Chrome-JSON trace that Perfetto / chrome://tracing open.

Why: Perfetto is the viewer people already know; one file with every rank side by side shows skew and
exposed communication at a glance, with commscope's labels attached to each slice.

Layout of the output
- one process per rank (`pid` = rank, `process_name` "rank N", sorted by rank);
- tracks (threads) per rank: `steps`, `compute stream <stream>` (kernels per CUDA stream), `compute (CPU
  thread <tid>)` (a CPU trace's top-level ops per thread) or `compute` (a run's regions),
  `regions`, `comm <label>` (one per collective label), `hooks` (instant events);
- a track whose slices would overlap is split into extra lanes (`comm attn #2`, ...) so that no two
  complete slices on one (pid, tid) overlap — Perfetto drops or mis-nests partially overlapping slices;
- every collective slice carries label, phase, op, bytes, dtype, group, seq and its host-side times in
  `args`;
- one collective call across ranks (the same (group, seq): commscope.analyze.flows) is linked by flow
  arrows (flow v1 events `s` → `t` … → `f`), so clicking a slice in Perfetto follows the call to every
  other rank. The chain runs in the order the ranks' slices start: an arrow goes from one rank's slice to
  the slice of the rank that started the same call next, the first (`s`) is the earliest start and the
  last (`f`) the latest, the rank the others waited for. Each event sits just inside its slice's start
  (FLOW_INSET_US), so no arrow points back in time.

`write_perfetto` writes gzip when the output name ends in `.gz` (Perfetto opens both), plain JSON else,
atomically (a failed write leaves what was there and no partial file). The document's first key is
`otherData` (which Perfetto and chrome://tracing ignore) with `"producer": "commscope"`: the marker by
which `export` recognises a trace it wrote and may replace (commscope.util.atomic.check_output, own_trace).

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
from typing import Any

import numpy as np
import orjson
import pandas as pd

from commscope.analyze.exposure import collective_span
from commscope.analyze.flows import instance_ids
from commscope.analyze.labels import shown_label
from commscope.util.atomic import check_output, own_trace, write_output
from commscope.util.text import printable
from commscope.analyze.intervals import assign_lanes
from commscope.load.frames import rel

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
    """Accumulates events for one rank, naming tracks and splitting overlapping slices into lanes."""

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self.next_tid = dict(_TID_BASE)

    def track(self, kind: str, name: str) -> int:
        tid = self.next_tid[kind]
        self.next_tid[kind] += 1
        self.events.append({"ph": "M", "name": "thread_name", "pid": self.rank, "tid": tid, "args": {"name": name}})
        self.events.append({"ph": "M", "name": "thread_sort_index", "pid": self.rank, "tid": tid,
                            "args": {"sort_index": tid}})
        return tid

    def slices(self, kind: str, name: str, starts: np.ndarray, ends: np.ndarray, names: list[str],
               args: list[dict], cat: str) -> dict[int, dict]:
        """Emit one slice per row with a start and an end; returns row position → its event."""
        ok = ~(np.isnan(starts) | np.isnan(ends))
        idx = np.flatnonzero(ok)
        if len(idx) == 0:
            return {}
        s, e = starts[idx], np.maximum(ends[idx], starts[idx])
        lanes = assign_lanes(s, e)
        tids = [self.track(kind, name if k == 0 else f"{name} #{k + 1}") for k in range(int(lanes.max()) + 1)]
        # Round both ends (monotonic), then take the difference, so rounding can never create an overlap.
        ts, te = np.round(s / 1e3, 3), np.round(e / 1e3, 3)
        out = {}
        for j, i in enumerate(idx):
            ev = {"ph": "X", "cat": cat, "name": names[i], "pid": self.rank, "tid": tids[lanes[j]],
                  "ts": float(ts[j]), "dur": round(float(te[j] - ts[j]), 3), "args": args[i]}
            self.events.append(ev)
            out[int(i)] = ev
        return out


def _rank_frame(df: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return pd.DataFrame()
    return df[df["rank"] == rank]


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


def _flow_events(slices: dict[int, list[tuple[int, dict]]]) -> list[dict]:
    """Flow v1 events chaining each instance's slices in the order they start (module docstring); ties
    by rank, so the file is the same on every export."""
    out = []
    for flow, members in sorted(slices.items()):
        members = sorted(members, key=lambda m: (_flow_point(m[1]), m[0]))
        if len(members) < 2:
            continue
        for k, (_, ev) in enumerate(members):
            ph = "s" if k == 0 else "f" if k == len(members) - 1 else "t"
            fe = {"ph": ph, "id": int(flow), "cat": "collective", "name": ev["args"].get("label") or ev["name"],
                  "pid": ev["pid"], "tid": ev["tid"], "ts": _flow_point(ev)}
            if ph == "f":
                fe["bp"] = "e"
            out.append(fe)
    return out


def build_perfetto(trace: Any) -> dict:
    """The Chrome-JSON document (dict) for `trace`; see the module docstring for the track layout."""
    t0 = _t0(trace)
    events: list[dict] = []
    all_coll = trace.collectives
    flow_of = pd.Series(instance_ids(all_coll), index=all_coll.index) if len(all_coll) else pd.Series(dtype=int)
    flow_slices: dict[int, list[tuple[int, dict]]] = {}
    for rank in trace.ranks:
        em = _Emitter(int(rank))
        em.events.append({"ph": "M", "name": "process_name", "pid": em.rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        em.events.append({"ph": "M", "name": "process_sort_index", "pid": em.rank, "tid": 0, "args": {"sort_index": em.rank}})

        st = _rank_frame(trace.steps, rank)
        if len(st):
            em.slices("steps", "steps", rel(st["start_ns"], t0),
                      rel(st["end_ns"], t0), [f"step {int(s)}" for s in st["step"]],
                      [{"step": int(s), "loss": _num(l)} for s, l in zip(st["step"], st["loss"])], "step")

        comp = _rank_frame(trace.compute, rank)
        if len(comp):
            streams = comp["stream"].astype("object").where(comp["stream"].notna(), None)
            for stream in sorted(set(streams), key=lambda x: (x is None, str(x))):
                sub = comp[(streams == stream).to_numpy()] if stream is not None else comp[streams.isna().to_numpy()]
                # a CPU trace's compute is each thread's top-level ops: its "stream" is a thread id
                thread = "kind" in sub and bool((sub["kind"] == "cpu_op").all())
                label = ("compute" if stream is None else f"compute (CPU thread {stream})" if thread
                         else f"compute stream {stream}")
                em.slices("compute", label, rel(sub["start_ns"], t0),
                          rel(sub["end_ns"], t0), [str(n) for n in sub["name"]],
                          [{"kind": _num(k), "step": _num(s)} for k, s in zip(sub["kind"], sub["step"])], "compute")

        reg = _rank_frame(getattr(trace, "regions", None), rank)
        if len(reg):
            em.slices("regions", "regions", rel(reg["start_ns"], t0),
                      rel(reg["end_ns"], t0), [str(n) for n in reg["name"]],
                      [{"step": _num(s), "micro_step": _num(m)} for s, m in zip(reg["step"], reg["micro_step"])],
                      "region")

        coll = _rank_frame(trace.collectives, rank)
        if len(coll):
            _, start, end = collective_span(coll, t0)
            records = coll.to_dict("records")
            names = np.array([shown_label(lab) for lab in coll["label"]], dtype=object)
            for label in sorted(set(names)):
                sel = names == label
                recs = [r for r, k in zip(records, sel) if k]
                flows = flow_of.loc[coll.index[sel]].to_numpy()
                made = em.slices("comm", f"comm {label}", start[sel], end[sel],
                          [f"{label}:{r['op']}" for r in recs],
                          [{k: _num(r[k]) for k in ("label", "phase", "op", "bytes", "dtype", "group", "group_size",
                                                    "seq", "step", "stream", "timing", "call_ns", "return_ns",
                                                    "wait_ns", "wait_end_ns", "start_ns", "end_ns") if k in r}
                           for r in recs], "comm")
                for i, ev in made.items():
                    if flows[i] >= 0:
                        flow_slices.setdefault(int(flows[i]), []).append((int(rank), ev))

        hooks = _rank_frame(getattr(trace, "hooks", None), rank)
        if len(hooks):
            tid = em.track("hooks", "hooks")
            for h in hooks.itertuples(index=False):
                em.events.append({"ph": "i", "s": "t", "cat": "hook", "name": f"hook {h.label}", "pid": em.rank,
                                  "tid": tid, "ts": round((int(h.t_ns) - t0) / 1e3, 3),
                                  "args": {"label": h.label, "position": _num(h.position), "step": _num(h.step),
                                           "micro_step": _num(h.micro_step)}})
        events.extend(em.events)
    events.extend(_flow_events(flow_slices))
    # otherData first: its producer is the marker own_trace reads from the file's first bytes
    return {"otherData": {"producer": "commscope", "t0_ns": int(t0), "world_size": _num(trace.world_size),
                          "source": printable(str(getattr(trace, "source", ""))),
                          "path": printable(str(getattr(trace, "path", "")))},
            "traceEvents": events, "displayTimeUnit": "ns"}


def write_perfetto(trace: Any, out: str | Path) -> Path:
    """Write `build_perfetto(trace)` to `out` atomically under commscope's output rule (check_output: never
    into the trace's input directory, an existing file only when it is a trace commscope wrote), gzip
    when the name ends in `.gz`; an unwritable or refused path is one UserError line."""
    out = Path(out)
    path = getattr(trace, "path", None)
    check_output(out, str(path) if path else None, own_trace)
    data = orjson.dumps(build_perfetto(trace), option=orjson.OPT_SERIALIZE_NUMPY)
    if out.name.endswith(".gz"):
        data = gzip.compress(data, 6, mtime=0)
    write_output(out, data)
    return out
