"""What the report's timeline draws, per rank, as numbers: merged compute blocks, collective bars in lanes
with their exposed parts, hook firings, step starts and the gaps between steps.

`select_window(trace, steps)` picks the steps to draw; `timeline_bars(trace, window)` returns a
`TimelineBars` that `reports.timeline` turns into a figure without computing anything itself.

Rules (the figure's legend explains them to the reader):
- times are ns since `t0`, the earliest step start, launch, execution start, compute start or hook firing
  inside the window;
- compute intervals are merged per (rank, stream) row across gaps smaller than span / `max_compute_per_rank`
  (`merge_intervals`), so a row never contributes more than that many blocks; each block keeps the names
  of the kernels (or regions) it holds, the most time-consuming first (`BLOCK_NAMES` of them);
- a collective's bar is its execution (exposure.collective_span: measured start, else launch → end);
  lanes (intervals.assign_lanes) are assigned on those bars only, so queued launches don't add rows;
- exposed parts are exposure.exposed_spans against the rank's compute set over the whole trace (a window
  edge must not expose anything), so their drawn length equals the exposed time in the tables;
- step marks and the gaps between steps are the first rank's step windows: device time on GPU traces
  (load.device_steps: a step's mark is where its first launched kernel starts, a gap is time its device
  ran no step's work), the host's step records elsewhere (after a step-end sync the device idles in a
  gap: analyze.step_gaps); compute rows and collectives are in the window by the step that launched them;
- one collective instance across ranks (the same (group, seq) on two or more ranks, analyze.flows) is a
  flow: its execution start on each rank, in rank order, for the lines that link them;
- a run that did not complete: the collectives left in flight are bars in their rank's comm row, sharing
  its lanes with the completed ones, and a step the first rank began but recorded no end of is marked at
  its earliest record (analyze.timeline_inflight); `t_end` is the right edge of everything else drawn.

Invariant: pure function of the trace's frames; the trace is not modified.
"""
from __future__ import annotations

import bisect

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze import intervals as iv
from commscope.analyze.exposure import collective_span, compute_sets, exposed_spans, to_rel
from commscope.analyze.flows import instance_ids
from commscope.analyze.intervals import assign_lanes
from commscope.analyze.labels import with_shown_labels
from commscope.analyze.timeline_inflight import inflight_bars, steps_begun, unfinished_steps
from commscope.load.frames import rel


def select_window(trace: Any, steps: tuple[int, int] | None, default_steps: int = 3,
                  max_full_steps: int = 6, focus: int | None = None) -> tuple[int, int] | None:
    """Steps to draw, half-open [lo, hi) like Trace.select_steps. Explicit `steps` wins; otherwise, when the
    trace has more than `max_full_steps` steps (long timelines stay readable), a few steps around `focus`
    (the step the doctor's verdict names: a hang or crash is where a reader must look; it may be a step
    no rank finished, drawn up to it) or, without one, around the middle; else None = everything."""
    if steps is not None:
        return steps
    known = sorted(int(s) for s in trace.steps["step"].unique() if s >= 0) if len(trace.steps) else []
    if len(known) <= max_full_steps:
        return None
    at = len(known) // 2 if focus is None else bisect.bisect_left(known, focus)
    first = min(max(0, at - default_steps // 2), len(known) - default_steps)
    chosen = known[first:first + default_steps]
    if focus is None:
        return (chosen[0], chosen[-1] + 1)
    return (min(chosen[0], focus), max(chosen[-1], focus) + 1)


def _in_window(df: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    if window is None or len(df) == 0 or "step" not in df:
        return df
    return df[(df["step"] >= window[0]) & (df["step"] < window[1])]


def merge_intervals(starts: np.ndarray, ends: np.ndarray, max_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge sorted-by-start intervals across gaps < span / max_blocks; returns (starts, ends, counts)
    where counts is how many input intervals each block holds. Overlapping intervals always merge."""
    s, e, counts, _ = merge_blocks(starts, ends, max_blocks)
    return s, e, counts


def merge_blocks(starts: np.ndarray, ends: np.ndarray, max_blocks: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """merge_intervals plus each input interval's block index (in input order)."""
    if len(starts) == 0:
        return starts, ends, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    e = np.maximum.accumulate(e)  # running end, so a long kernel covers the short ones inside it
    span = e[-1] - s[0]
    gap = span / max_blocks if len(s) > max_blocks else 0.0
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > e[:-1] + gap
    block = np.cumsum(new_block) - 1
    first = np.flatnonzero(new_block)
    last = np.r_[first[1:] - 1, len(s) - 1]
    member = np.empty(len(s), dtype=np.int64)
    member[order] = block
    return s[first], e[last], np.bincount(block), member


def exposed_intervals(coll: pd.DataFrame, compute_set: tuple[np.ndarray, np.ndarray], base: int = 0
                      ) -> list[list[tuple[float, float]]]:
    """Per collective row, the exposed sub-intervals to highlight, in ns since `base` (`compute_set`: the
    rank's compute intervals from exposure.compute_sets, absolute ns): exposure.exposed_spans."""
    return exposed_spans(coll, to_rel({0: compute_set}, base)[0], base)


BLOCK_NAMES = 3  # kernel names kept per compute block, most time-consuming first


@dataclass
class ComputeRow:
    """One rank's compute on one stream (None: no stream, e.g. CPU regions), merged into blocks. Arrays
    are ns since TimelineBars.t0, aligned with each other."""
    stream: str | None
    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray                          # kernels (or regions) per block
    names: list[list[tuple[str, int, float]]]   # per block: (name, count, busy ns), at most BLOCK_NAMES


@dataclass
class RankBars:
    """One rank's rows. Arrays are ns since TimelineBars.t0; collective arrays are aligned with `coll`."""
    rank: int
    compute: list[ComputeRow]                            # one row per stream, by stream
    coll: pd.DataFrame                                   # the rank's collectives in the window
    launch: np.ndarray
    start: np.ndarray                                    # the bar's start: the execution start, else the launch
    end: np.ndarray
    measured_start: np.ndarray                           # the execution start where recorded, else NaN
    queued: np.ndarray                                   # launch → execution start, ns; NaN where either is not
                                                         # recorded; a start before the launch (the clocks of
                                                         # two threads) is 0
    drawn: np.ndarray                                    # start and end known: the collective has a bar
    lanes: np.ndarray                                    # lane of each bar (0 for rows without one)
    n_lanes: int
    exposed: list[list[tuple[float, float]]]             # exposed sub-intervals per collective
    exposed_ns: list[float]                              # their summed length per collective
    hooks: pd.DataFrame                                  # the rank's hook firings in the window
    hook_t: list[int]                                    # firing times
    inflight: pd.DataFrame | None = None                 # collectives left in flight (timeline_inflight.INFLIGHT_COLS
                                                         # plus `lane`), by launch


@dataclass
class TimelineBars:
    t0: int                            # absolute ns of the axis origin
    ranks: list[RankBars]
    labels: list[str]                  # collective and hook labels (for one colour map)
    step_marks: pd.DataFrame           # the first rank's steps in the window, by start: step, start_ns, end_ns
    gap_before: list[int | None]       # per step mark: the previous step's end when it ended before this
                                       # one started (a gap, absolute ns), else None
    flows: pd.DataFrame | None = None  # flow, label, rank, t (ns since t0): one collective call's execution
                                       # start on each rank, by flow then rank (analyze.flows)
    window: tuple[int, int] | None = None
    t_end: float = 0.0                 # ns since t0 of the right edge of what is drawn, in-flight bars aside
    t_edge: float = 0.0                # ns since t0 where the in-flight bars stop (timeline_inflight): the
                                       # figure's right edge when one is cut there, else t_end
    cut_anywhere: bool = False         # some rank's in-flight bar is cut at t_edge, drawn or not: a subset
                                       # keeps it, so the page's axis ends there before any rank is added
    unfinished: pd.DataFrame | None = None  # the first rank's steps with records but no end: step, start_ns (absolute)
    inflight_more: dict[int, int] | None = None  # per rank, its in-flight collectives in the window not drawn
    begun: pd.DataFrame | None = None  # the whole run's steps begun and never ended (timeline_inflight.steps_begun)

    @property
    def undrawn(self) -> int:
        """Collectives of the drawn ranks in the window without a bar: no execution start or end in the input
        (a host-side trace of a GPU job, an end never recorded). The page says how many, since the tables
        count them and the rows would otherwise look empty."""
        return int(sum(int((~rb.drawn.astype(bool)).sum()) for rb in self.ranks))

    def subset(self, ranks: list[int]) -> "TimelineBars":
        """The same bars for `ranks` only, in that order (ranks without bars left out); flows keep the
        members among them, a call linking at least two."""
        at = {rb.rank: rb for rb in self.ranks}
        keep = [at[r] for r in ranks if r in at]
        flows = self.flows
        if flows is not None and len(flows):
            flows = flows[flows["rank"].isin([rb.rank for rb in keep])]
            flows = flows[flows.groupby("flow")["rank"].transform("size") >= 2].reset_index(drop=True)
        return replace(self, ranks=keep, flows=flows)


def _block_names(names: np.ndarray, dur: np.ndarray, member: np.ndarray, n_blocks: int
                 ) -> list[list[tuple[str, int, float]]]:
    """Per block (`member`: each interval's block, 0..n_blocks-1), its BLOCK_NAMES costliest names."""
    df = pd.DataFrame({"block": member, "name": names, "ns": dur})
    agg = df.groupby(["block", "name"], sort=False).agg(n=("ns", "size"), ns=("ns", "sum")).reset_index()
    agg = agg.sort_values(["block", "ns"], ascending=[True, False], kind="stable")
    agg = agg.groupby("block", sort=False).head(BLOCK_NAMES)
    out: list[list[tuple[str, int, float]]] = [[] for _ in range(n_blocks)]
    for b, name, n, ns in zip(agg["block"].to_numpy(), agg["name"].to_numpy(), agg["n"].to_numpy(),
                              agg["ns"].to_numpy(np.float64)):
        out[int(b)].append((str(name), int(n), float(ns)))
    return out


def _stream_order(key: str | None) -> tuple:
    return (key is None, len(key or ""), key or "")


def _compute_rows(comp: pd.DataFrame, t0: int, max_blocks: int) -> dict[int, list[ComputeRow]]:
    """Per rank, its compute rows (one per stream, by _stream_order). One pass over all ranks: the rows of a
    (rank, stream) are merged on their own, the kernel names of all blocks are ranked in one groupby."""
    if not len(comp):
        return {}
    if "stream" in comp:
        st = comp["stream"].astype("object")
        keys = [None if pd.isna(x) else str(x) for x in st.to_numpy()]
    else:
        keys = [None] * len(comp)
    uniq = sorted(set(keys), key=_stream_order)
    place = {u: i for i, u in enumerate(uniq)}
    codes = np.array([place[k] for k in keys], dtype=np.int64)  # the rows' stream, in row order
    rank = comp["rank"].to_numpy()
    # stable: within a (rank, stream) the rows keep the frame's order, as a per-rank filter would
    order = np.lexsort((codes, rank))
    s_all, e_all = rel(comp["start_ns"], t0)[order], rel(comp["end_ns"], t0)[order]
    r_sorted, c_sorted = rank[order], codes[order]
    cut = np.flatnonzero((r_sorted[1:] != r_sorted[:-1]) | (c_sorted[1:] != c_sorted[:-1])) + 1
    bounds = np.r_[0, cut, len(order)]
    segs, members, offset = [], np.empty(len(order), dtype=np.int64), 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        bs, be, counts, member = merge_blocks(s_all[a:b], e_all[a:b], max_blocks)
        members[a:b] = member + offset
        segs.append((int(r_sorted[a]), uniq[c_sorted[a]], bs, be, counts, offset))
        offset += len(bs)
    names = _block_names(comp["name"].astype(str).to_numpy()[order], e_all - s_all, members, offset)
    out: dict[int, list[ComputeRow]] = {}
    for rank_, stream, bs, be, counts, off in segs:
        out.setdefault(rank_, []).append(ComputeRow(stream=stream, starts=bs, ends=be, counts=counts,
                                                    names=names[off:off + len(bs)]))
    return out


def _rank_bars(rank: int, rows: list[ComputeRow], cc: pd.DataFrame, rh: pd.DataFrame, comp_set, t0: int,
               stuck: pd.DataFrame) -> RankBars:
    launch, start, end = collective_span(cc, t0) if len(cc) else (np.zeros(0),) * 3
    drawn = ~(np.isnan(start) | np.isnan(end))
    lanes = np.zeros(len(cc), dtype=np.int64)
    # the in-flight bars share the lanes: one assignment over both, so that none covers another
    both = assign_lanes(np.r_[start[drawn], stuck["start"].to_numpy(np.float64)],
                        np.r_[end[drawn], stuck["end"].to_numpy(np.float64)])
    lanes[drawn] = both[:int(drawn.sum())]
    stuck = stuck.assign(lane=both[int(drawn.sum()):])
    exposed = exposed_intervals(cc, comp_set, t0) if len(cc) else []
    measured = rel(cc["start_ns"], t0) if len(cc) else np.zeros(0)
    with np.errstate(invalid="ignore"):  # NaN stays NaN: an unknown end is an unknown wait
        queued = np.maximum(measured - launch, 0.0)
    return RankBars(rank=rank, compute=rows, coll=cc, launch=launch, start=start, end=end,
                    measured_start=measured, queued=queued, drawn=drawn,
                    lanes=lanes, n_lanes=int(both.max()) + 1 if len(both) else 1, exposed=exposed,
                    exposed_ns=[sum(b - a for a, b in x) for x in exposed], hooks=rh,
                    hook_t=[int(t) - t0 for t in rh["t_ns"]] if len(rh) else [], inflight=stuck)


def _by_rank(df: pd.DataFrame) -> dict:
    """Per rank, its rows of `df` in frame order: one stable sort and a slice per rank, instead of a
    filter per rank."""
    if not len(df):
        return {}
    rank = df["rank"].to_numpy()
    order = np.argsort(rank, kind="stable")
    df, rank = df.take(order), rank[order]
    cut = np.r_[0, np.flatnonzero(rank[1:] != rank[:-1]) + 1, len(rank)]
    return {int(rank[a]): df.iloc[a:b] for a, b in zip(cut[:-1], cut[1:])}


def _gap_before(steps: pd.DataFrame) -> list[int | None]:
    out, prev_end = [], None
    for s in steps.itertuples(index=False):
        out.append(prev_end if prev_end is not None and int(s.start_ns) > prev_end else None)
        prev_end = int(s.end_ns) if pd.notna(s.end_ns) else None
    return out


def _flows(coll: pd.DataFrame, t0: int) -> pd.DataFrame:
    ids = instance_ids(coll)
    keep = ids >= 0
    _, start, _ = collective_span(coll, t0) if len(coll) else (None, np.zeros(0), None)
    df = pd.DataFrame({"flow": ids[keep], "label": coll["label"].astype(str).to_numpy()[keep],
                       "rank": coll["rank"].to_numpy()[keep], "t": start[keep]})
    df = df[~np.isnan(df["t"].to_numpy(np.float64))]
    return df.sort_values(["flow", "rank"], kind="stable").reset_index(drop=True)


def timeline_bars(trace: Any, window: tuple[int, int] | None = None, max_compute_per_rank: int = 400
                  ) -> TimelineBars:
    """The timeline's numbers for the ranks of `trace`, restricted to steps in [window[0], window[1])."""
    # one name per label everywhere on the page (bars, legend, colours): an unlabelled row reads NO_LABEL
    coll = with_shown_labels(_in_window(trace.collectives, window))
    comp = _in_window(trace.compute, window)
    hooks = with_shown_labels(_in_window(trace.hooks, window))
    steps = _in_window(trace.steps, window)
    t_cands = [pd.to_numeric(df[c], errors="coerce").min() for df, c in ((steps, "start_ns"), (coll, "call_ns"),
               (coll, "start_ns"), (comp, "start_ns"), (hooks, "t_ns")) if len(df)]
    t_cands = [int(t) for t in t_cands if not pd.isna(t)]
    t0 = min(t_cands) if t_cands else 0
    t_end = _right_edge(steps, coll, comp, hooks, t0)
    stuck, more, t_edge = inflight_bars(trace, window, t0, t_end)
    stuck = with_shown_labels(stuck)
    comp_sets = compute_sets(trace)
    rows, coll_of, hooks_of = _compute_rows(comp, t0, max_compute_per_rank), _by_rank(coll), _by_rank(hooks)
    stuck_of = _by_rank(stuck)
    ranks = [_rank_bars(rank, rows.get(rank, []), coll_of.get(rank, coll.iloc[:0]), hooks_of.get(rank, hooks.iloc[:0]),
                        comp_sets.get(rank, iv.empty()), t0, stuck_of.get(rank, stuck.iloc[:0]))
             for rank in trace.ranks]
    first_rank = steps[steps["rank"] == trace.ranks[0]] if len(steps) and trace.ranks else steps
    first_rank = first_rank.sort_values("start_ns") if len(first_rank) else first_rank
    labels = (list(coll["label"].astype(str)) + (list(hooks["label"].astype(str)) if len(hooks) else [])
              + list(stuck["label"].astype(str)))
    begun = steps_begun(trace)
    unfinished = unfinished_steps(trace, trace.ranks[0], window, begun) if trace.ranks else None
    return TimelineBars(t0=t0, ranks=ranks, labels=labels, step_marks=first_rank,
                        gap_before=_gap_before(first_rank), flows=_flows(coll, t0), window=window, t_end=t_end,
                        t_edge=t_edge, cut_anywhere=bool(stuck["cut"].any()) if len(stuck) else False,
                        unfinished=unfinished, inflight_more=more, begun=begun)


def _right_edge(steps: pd.DataFrame, coll: pd.DataFrame, comp: pd.DataFrame, hooks: pd.DataFrame, t0: int) -> float:
    """ns since t0 of the latest end, completion or firing drawn (0.0 when nothing is)."""
    ends = [np.nanmax(v, initial=-np.inf) for v in (rel(df[c], t0) for df, c in (
        (steps, "end_ns"), (coll, "end_ns"), (comp, "end_ns"), (hooks, "t_ns")) if len(df) and c in df)]
    return float(max([e for e in ends if np.isfinite(e)], default=0.0))
