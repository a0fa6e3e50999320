"""Every rank's timeline rows as compact data, for the page's rank selector at scale.

Above commscope.analyze.report_context.PAGE_ALL_RANKS ranks the timeline figure draws the representative
ranks only; the page also carries the rows of every rank in the timeline's window as one JSON document
(gzip-compressed, base64, like the plotly.js bundle: reports.page), and reports/static/report.js draws a
chosen rank's rows from it on demand, with the figure's own styles (`style`). A plotly figure of every
rank would weigh ~50 MB at 1024 ranks (its hover texts and per-bar arrays); this document weighs ~0.1 KB
a rank compressed on the generated 1024-rank job (docs/benchmarks.md).

The document (`rank_rows(bars)`), all lists in the order of `ranks`, each rank's items after the previous
rank's (`n`: how many a rank has):
- `unit_ns`: times are integers in this unit since TimelineBars.t0 (1 µs: the hovers' resolution);
  every start (`s`, `t`) is delta-coded within its rank (the first since t0, the others since the
  previous item's), a length (`d`) is end − start after rounding each;
- `strings`: every name (stream, label, op, phase, group, kernel) is an index into it, -1 for none;
- `lanes`: per rank, the lanes of its comm row;
- `compute`: merged blocks row by row (`row`: the stream), `k` kernels each, `nn` names kept per block
  (`name`, `nk` kernels, `nd` busy time), long kernel names shortened as the figure's hover does;
- `coll`: the drawn collectives: `q` launch → start (null where either is not recorded), `label`, `lane`, `step`, `seq`,
  `bytes` (null: unknown), `op`, `phase`, `group`, `ne` exposed spans each (`es`: from the bar's start
  for the first, from the previous span's end for the others; `ed` long; spans shorter than a unit are
  left out, as they add nothing at this resolution);
- `hooks`: firings: `t`, `label`, `step`, `micro`, `pos`;
- `inflight`: the collectives left in flight (analyze.timeline_inflight): `s` launch (delta-coded), `d` drawn
  length, `lane`, `label`, `op`, `group`, `seq`, `step`, `bytes`, `t` the whole time in flight, `wt` when
  after its launch its rank blocked waiting on it (null: never), `w` 1 where the watchdog's firing ends it,
  `ended` how its rank ended (a string index, -1: not said), `cut` 1 where the bar stops at the figure's edge; `more` per rank: how
  many it has in flight that are not drawn;
- `flows`: the rank's points of the lines linking one collective call across ranks (TimelineBars.flows):
  `f` the call's flow id, `t` its execution start on the rank, both delta-coded within the rank, by
  flow id. A rank added to the figure joins the lines of the calls it shares with the drawn ranks: per
  flow, its members among the drawn ranks and it, in rank order, as reports.timeline links the drawn ones.

Invariant: only packs TimelineBars' numbers (rounded to `unit_ns`); the rows drawn from it are the ones
reports.timeline draws for the same rank, with the exposed time summed from the packed spans, and the flow
lines drawn with a chosen rank are the ones reports.timeline draws for TimelineBars.subset(drawn + [rank]).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze.layout_report import readable_kernel
from commscope.analyze.timeline_bars import TimelineBars
from reports.timeline import (BAR, COLL_HOVER, COMM_ROW_MAX_PX, COMPUTE_COLOR, CUT_MARKER, EXPOSED_MARKER, FLOW_LINE,
                              FLOW_NAME, HOOK_MARKER, INFLIGHT_LEGEND, INFLIGHT_MARKER, INFLIGHT_NAME, L2S_UNKNOWN,
                              LANE_PX, ROW_H, label_colors)

UNIT_NS = 1000


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, v) -> int:
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            return -1
        return self.index.setdefault(str(v), len(self.index))

    def many(self, parts: list[np.ndarray]) -> list[int]:
        """Indices of the values of `parts` (arrays, concatenated), one factorization for all."""
        if not parts:
            return []
        codes, uniq = pd.factorize(np.concatenate(parts), use_na_sentinel=True)
        at = np.array([self(u) for u in uniq] + [-1], dtype=np.int64)  # code -1 (missing) → -1
        return at[codes].tolist()


def _units(ns) -> np.ndarray:
    return np.rint(np.asarray(ns, np.float64) / UNIT_NS).astype(np.int64)


def _delta(a: np.ndarray) -> list[int]:
    return np.diff(a, prepend=0).tolist() if len(a) else []


def _ints(parts: list[np.ndarray]) -> list[int | None]:
    """Whole numbers of the values of `parts` (concatenated); None where missing."""
    if not parts:
        return []
    v = pd.to_numeric(pd.Series(np.concatenate([np.asarray(p, dtype=object) for p in parts])),
                      errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return [None if x != x else int(x) for x in v.tolist()]


def rank_rows(bars: TimelineBars) -> dict:
    """The compact document of every rank in `bars` (module docstring)."""
    name = _Strings()
    doc = {"unit_ns": UNIT_NS, "ranks": [], "lanes": [],
           "compute": {k: [] for k in ("n", "row", "s", "d", "k", "nn", "name", "nk", "nd")},
           "coll": {k: [] for k in ("n", "s", "d", "q", "label", "lane", "step", "seq", "bytes", "op", "phase",
                                    "group", "ne", "es", "ed")},
           "hooks": {k: [] for k in ("n", "t", "label", "step", "micro", "pos")},
           "inflight": _inflight(bars, name),
           "flows": _flow_points(bars)}
    comp, coll, hooks = doc["compute"], doc["coll"], doc["hooks"]
    # per column, the ranks' arrays: converted once, after the loop
    cols = {k: [] for k in ("label", "op", "phase", "group", "step", "seq", "bytes")}
    hcols = {k: [] for k in ("label", "step", "micro_step", "position")}
    for rb in bars.ranks:
        doc["ranks"].append(int(rb.rank))
        doc["lanes"].append(int(rb.n_lanes))
        starts, n = [], 0
        for cr in rb.compute:
            s, e = _units(cr.starts), _units(cr.ends)
            starts.append(s)
            comp["row"] += [name(cr.stream)] * len(s)
            comp["d"] += (e - s).tolist()
            comp["k"] += cr.counts.astype(np.int64).tolist()
            for names in cr.names:
                comp["nn"].append(len(names))
                for kernel, k, ns in names:
                    comp["name"].append(name(readable_kernel(kernel)))
                    comp["nk"].append(int(k))
                    comp["nd"].append(int(round(ns / UNIT_NS)))
            n += len(s)
        comp["n"].append(n)
        comp["s"] += _delta(np.concatenate(starts)) if starts else []
        drawn = np.flatnonzero(rb.drawn)
        s, e = _units(rb.start[drawn]), _units(rb.end[drawn])
        queued = rb.queued[drawn]
        known = ~np.isnan(queued)  # else the hover says L2S_UNKNOWN (timeline.launch_to_start)
        queued = np.nan_to_num(queued)
        coll["n"].append(len(drawn))
        coll["s"] += _delta(s)
        coll["d"] += (e - s).tolist()
        coll["q"] += [q if k else None for q, k in zip(_units(queued).tolist(), known.tolist())]
        coll["lane"] += rb.lanes[drawn].astype(np.int64).tolist()
        if len(drawn):
            for k in cols:
                cols[k].append(rb.coll[k].to_numpy(dtype=object)[drawn])
        for j, bar_start in zip(drawn, s):
            at, ne = int(bar_start), 0
            for a, b in rb.exposed[j]:
                ua, ub = int(round(a / UNIT_NS)), int(round(b / UNIT_NS))
                if ub > ua:  # shorter than a unit: nothing to draw, nothing to add
                    coll["es"].append(ua - at)
                    coll["ed"].append(ub - ua)
                    at, ne = ub, ne + 1
            coll["ne"].append(ne)
        hooks["n"].append(len(rb.hook_t))
        hooks["t"] += _delta(_units(rb.hook_t))
        if len(rb.hooks):
            for k in hcols:
                hcols[k].append(rb.hooks[k].to_numpy(dtype=object))
    cols["label"] = [x.astype(str) for x in cols["label"]]
    for k in ("label", "op", "phase", "group"):
        coll[k] = name.many(cols[k])
    for k in ("step", "seq", "bytes"):
        coll[k] = _ints(cols[k])
    hooks["label"] = name.many([x.astype(str) for x in hcols["label"]])
    hooks["step"], hooks["micro"], hooks["pos"] = (_ints(hcols[k]) for k in ("step", "micro_step", "position"))
    doc["strings"] = list(name.index)
    return doc


def _inflight(bars: TimelineBars, name: _Strings) -> dict:
    """The `inflight` block (module docstring), in the order of `bars.ranks`."""
    out = {k: [] for k in ("n", "more", "s", "d", "lane", "label", "op", "group", "seq", "step", "bytes", "t", "wt",
                           "w", "ended", "cut")}
    more = bars.inflight_more or {}
    for rb in bars.ranks:
        f = rb.inflight if rb.inflight is not None else pd.DataFrame(columns=["start", "end"])
        s, e = _units(f["start"]), _units(f["end"])
        out["n"].append(len(f))
        out["more"].append(int(more.get(rb.rank, 0)))
        out["s"] += _delta(s)
        out["d"] += (e - s).tolist()
        if not len(f):
            continue
        out["lane"] += f["lane"].astype(np.int64).tolist()
        out["t"] += _units(f["in_flight_ns"]).tolist()
        waited = f["waited_after_ns"].to_numpy(np.float64)
        out["wt"] += [None if np.isnan(w) else int(u) for w, u in zip(waited, _units(np.nan_to_num(waited)))]
        out["w"] += f["watchdog_fired"].astype(int).tolist()
        out["cut"] += f["cut"].astype(int).tolist()
        for k in ("label", "op", "group", "ended"):
            out[k] += [name(v) for v in f[k]]
        for k in ("seq", "step", "bytes"):
            out[k] += _ints([f[k].to_numpy(dtype=object)])
    return out


def _flow_points(bars: TimelineBars) -> dict:
    """The `flows` block (module docstring): every rank's flow points, in the order of `bars.ranks`."""
    out = {"n": [], "f": [], "t": []}
    fl = bars.flows
    if fl is None or not len(fl):
        fl = pd.DataFrame({"flow": np.zeros(0, np.int64), "rank": np.zeros(0, np.int64), "t": np.zeros(0)})
    rank = fl["rank"].to_numpy(np.int64)
    order = np.argsort(rank, kind="stable")  # flows come by flow then rank: by rank, then flow
    rank, flow, t = rank[order], fl["flow"].to_numpy(np.int64)[order], _units(fl["t"].to_numpy(np.float64)[order])
    for rb in bars.ranks:
        a, b = np.searchsorted(rank, rb.rank, "left"), np.searchsorted(rank, rb.rank, "right")
        out["n"].append(int(b - a))
        out["f"] += _delta(flow[a:b])
        out["t"] += _delta(t[a:b])
    return out


def style(bars: TimelineBars, cpu_threads: bool = False) -> dict:
    """The figure's styles (reports.timeline), for the rows report.js draws: one colour map for the page,
    and whether compute rows are CPU threads (named as timeline.compute_row_name names them); `lane_px` and
    `comm_row_max_px` size a comm row by its lanes as timeline.comm_row_span does."""
    return {"row_h": ROW_H, "bar": BAR, "lane_px": LANE_PX, "comm_row_max_px": COMM_ROW_MAX_PX, "compute_color": COMPUTE_COLOR, "exposed_marker": EXPOSED_MARKER,
            "hook_marker": HOOK_MARKER, "colors": label_colors(bars.labels), "coll_hover": COLL_HOVER, "l2s_unknown": L2S_UNKNOWN,
            "flow_name": FLOW_NAME, "flow_line": FLOW_LINE, "cpu_threads": cpu_threads,
            "inflight_marker": INFLIGHT_MARKER, "inflight_legend": INFLIGHT_LEGEND, "inflight_name": INFLIGHT_NAME,
            "cut_marker": CUT_MARKER}
