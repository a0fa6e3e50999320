"""The per-rank overlap timeline of the HTML report (a plotly figure).

Rows, top to bottom, per rank: `rN compute` (compute regions/kernels, merged when dense), `rN comm`
(one bar per collective, coloured by label: thick while it runs, a thin line from its launch to its start
when it was queued; the exposed part drawn on top in red; extra lanes `rN comm 2`, … when running
collectives overlap in time), `rN hooks` (hook firings as markers,
coloured by label). Step starts are vertical lines; the first rank's time between two steps is a yellow
band (after a step-end sync the device idles there: analyze.step_gaps).

Why this shape: the question the report answers is "which collective is exposed, where": seeing the launch
→ completion bar next to the compute it should hide behind answers it directly.

Scaling: bars are drawn as WebGL line segments (`Scattergl`, one trace per label, segments separated by
NaN), so tens of thousands of kernels stay interactive; compute intervals are merged per rank across gaps
smaller than span / `max_compute_per_rank` so a rank never contributes more than that many blocks.
Trace data goes to plotly as numpy arrays: plotly validates Python lists element by element but takes
arrays whole and embeds them as binary, which also shrinks the page (timeline_figure on the 8×H100
fixture: 0.215 s with lists, 0.131 s with arrays; bench/bench_revs.py).
Times on the x axis are milliseconds since the window start.

Invariant: the figure only draws; every number shown in the tables comes from summarize(), not from here.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from commscope.analyze import intervals as iv
from commscope.analyze.intervals import assign_lanes
from commscope.analyze.exposure import collective_span, compute_sets, exposed_spans, to_rel
from commscope.load.frames import rel

EXPOSED_COLOR = "#d62728"
GAP_COLOR = "#f2c14e"  # time between two steps
COMPUTE_COLOR = "#7f7f7f"
# Label colours: Dark24 without its reds (red means "exposed"), then Light24 without reds and pale tints.
_REDS_AND_PALES = {"#FB0D0D", "#AF0038", "#862A16", "#FD3216", "#FC6955", "#FED4C4", "#C9FBE5", "#E3EE9E",
                   "#F6F926"}
PALETTE = [c for c in qualitative.Dark24 + qualitative.Light24 if c not in _REDS_AND_PALES]


def label_colors(labels: list[str]) -> dict[str, str]:
    """A stable label → colour map (sorted labels, one palette), shared by bars and hook markers."""
    return {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(sorted(set(labels)))}


def select_window(trace: Any, steps: tuple[int, int] | None, default_steps: int = 3,
                  max_full_steps: int = 6) -> tuple[int, int] | None:
    """Steps to draw, half-open [lo, hi) like Trace.select_steps. Explicit `steps` wins; otherwise a few
    steps around the middle when the trace has more than `max_full_steps` steps (long timelines stay
    readable), else None = everything."""
    if steps is not None:
        return steps
    known = sorted(int(s) for s in trace.steps["step"].unique() if s >= 0) if len(trace.steps) else []
    if len(known) <= max_full_steps:
        return None
    first = max(0, len(known) // 2 - default_steps // 2)
    chosen = known[first:first + default_steps]
    return (chosen[0], chosen[-1] + 1)


def _in_window(df: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    if window is None or len(df) == 0 or "step" not in df:
        return df
    return df[(df["step"] >= window[0]) & (df["step"] < window[1])]


def merge_intervals(starts: np.ndarray, ends: np.ndarray, max_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge sorted-by-start intervals across gaps < span / max_blocks; returns (starts, ends, counts)
    where counts is how many input intervals each block holds. Overlapping intervals always merge."""
    if len(starts) == 0:
        return starts, ends, np.zeros(0, dtype=np.int64)
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
    return s[first], e[last], np.bincount(block)


def exposed_intervals(coll: pd.DataFrame, compute_set: tuple[np.ndarray, np.ndarray], base: int = 0
                      ) -> list[list[tuple[float, float]]]:
    """Per collective row, the exposed sub-intervals to highlight, in ns since `base` (`compute_set`: the
    rank's compute intervals from exposure.compute_sets, absolute ns): exposure.exposed_spans, so the
    red drawn length equals the exposed time in the tables."""
    return exposed_spans(coll, to_rel({0: compute_set}, base)[0], base)


class Segments:
    """Bars (ns) on named rows, collected one by one and handed to plotly as one line trace: x in ms with a
    NaN after each segment (a gap), y the row names with None at the gaps."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.rows: list[str] = []

    def add(self, starts, ends, row: str) -> None:
        self.starts += list(starts)
        self.ends += list(ends)
        self.rows += [row] * (len(self.starts) - len(self.rows))

    def __bool__(self) -> bool:
        return bool(self.starts)

    def xy(self) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.starts)
        x = np.full((n, 3), np.nan)
        x[:, 0] = np.asarray(self.starts, dtype=np.float64) / 1e6
        x[:, 1] = np.asarray(self.ends, dtype=np.float64) / 1e6
        y = np.empty((n, 3), dtype=object)
        y[:, 0] = y[:, 1] = self.rows
        return x.ravel(), y.ravel()


def _points(xs: list, ys: list, texts: list) -> dict:
    return dict(x=np.asarray(xs, dtype=np.float64), y=np.asarray(ys, dtype=object),
                text=np.asarray(texts, dtype=object))


def _add_step_selector(fig: go.Figure, steps: pd.DataFrame, t0: int, max_buttons: int = 40) -> None:
    """A dropdown that zooms the x axis to one step (the first rank's step bounds) or back to everything:
    the in-page step selector for traces with many steps (more steps: use --steps)."""
    if len(steps) < 2 or len(steps) > max_buttons:
        return
    buttons = [dict(label="all steps", method="relayout", args=[{"xaxis.autorange": True}])]
    for s in steps.sort_values("start_ns").itertuples(index=False):
        lo, hi = (int(s.start_ns) - t0) / 1e6, (int(s.end_ns) - t0) / 1e6
        pad = 0.02 * (hi - lo)
        buttons.append(dict(label=f"step {s.step}", method="relayout",
                            args=[{"xaxis.range": [lo - pad, hi + pad], "xaxis.autorange": False}]))
    fig.update_layout(updatemenus=[dict(type="dropdown", buttons=buttons, x=0, xanchor="left", y=1.0,
                                        yanchor="bottom", pad=dict(b=24), showactive=True)])


def timeline_figure(trace: Any, window: tuple[int, int] | None = None, max_compute_per_rank: int = 1500) -> go.Figure:
    """Build the timeline for the ranks of `trace`, restricted to steps in [window[0], window[1]) if given."""
    coll = _in_window(trace.collectives, window)
    comp = _in_window(trace.compute, window)
    hooks = _in_window(trace.hooks, window)
    steps = _in_window(trace.steps, window)
    t_cands = [pd.to_numeric(df[c], errors="coerce").min() for df, c in ((steps, "start_ns"), (coll, "call_ns"),
               (coll, "start_ns"), (comp, "start_ns"), (hooks, "t_ns")) if len(df)]
    t_cands = [int(t) for t in t_cands if not pd.isna(t)]
    t0 = min(t_cands) if t_cands else 0
    colors = label_colors(list(coll["label"].astype(str)) + list(hooks["label"].astype(str)))

    comp_sets = compute_sets(trace)  # over the whole trace: a window edge must not expose anything
    rows: list[str] = []
    compute_bars, exposed_bars = Segments(), Segments()
    comp_hx, comp_hy, comp_text = [], [], []
    bars: dict[str, Segments] = {}
    queued: dict[str, Segments] = {}
    bar_hover: dict[str, tuple[list, list, list]] = {}
    hook_pts: dict[str, tuple[list, list, list]] = {}
    for rank in trace.ranks:
        rc = comp[comp["rank"] == rank]
        rows.append(f"r{rank} compute")
        if len(rc):
            s, e, n = merge_intervals(rel(rc["start_ns"], t0), rel(rc["end_ns"], t0), max_compute_per_rank)
            compute_bars.add(s, e, f"r{rank} compute")
            comp_hx += list((s + e) / 2e6)
            comp_hy += [f"r{rank} compute"] * len(s)
            comp_text += [f"rank {rank}: {k} compute interval(s)<br>{(b - a) / 1e6:.3f} ms" for a, b, k in zip(s, e, n)]

        cc = coll[coll["rank"] == rank]
        if len(cc):
            # Thick bar: execution (start→end) where measured, else launch→completion (all a wall clock
            # knows). Thin line on the same row: launch→execution start (queued behind earlier work).
            # Lanes are assigned on the thick bars only, so queued launches don't multiply the rows.
            launch, start, end = collective_span(cc, t0)
            ok = ~(np.isnan(start) | np.isnan(end))
            lanes = np.zeros(len(cc), dtype=np.int64)
            if ok.any():
                lanes[ok] = assign_lanes(start[ok], end[ok])
            n_lanes = int(lanes.max()) + 1 if len(lanes) else 1
            lane_rows = [f"r{rank} comm" if k == 0 else f"r{rank} comm {k + 1}" for k in range(n_lanes)]
            rows += lane_rows
            exposed = exposed_intervals(cc, comp_sets.get(rank, iv.empty()), t0)
            for j, r in enumerate(cc.itertuples(index=False)):
                if not ok[j]:
                    continue
                row, lab = lane_rows[lanes[j]], str(r.label)
                bars.setdefault(lab, Segments()).add([start[j]], [end[j]], row)
                if launch[j] < start[j]:
                    queued.setdefault(lab, Segments()).add([launch[j]], [start[j]], row)
                exp_ms = sum(b - a for a, b in exposed[j]) / 1e6
                if exposed[j]:
                    exposed_bars.add([a for a, _ in exposed[j]], [b for _, b in exposed[j]], row)
                hx, hy, ht = bar_hover.setdefault(lab, ([], [], []))
                hx.append((start[j] + end[j]) / 2e6)
                hy.append(row)
                ht.append(f"rank {rank} · {lab} ({r.op}, {r.phase})<br>step {r.step} seq {r.seq} group {r.group}"
                          f"<br>bytes {float(r.bytes):,.0f}<br>running {(end[j] - start[j]) / 1e6:.3f} ms"
                          + (f"<br>launch→complete {(end[j] - launch[j]) / 1e6:.3f} ms" if launch[j] < start[j] else "")
                          + f"<br>exposed {exp_ms:.3f} ms")
        else:
            rows.append(f"r{rank} comm")

        rh = hooks[hooks["rank"] == rank]
        if len(rh):
            rows.append(f"r{rank} hooks")
            for h in rh.itertuples(index=False):
                hx, hy, ht = hook_pts.setdefault(str(h.label), ([], [], []))
                hx.append((int(h.t_ns) - t0) / 1e6)
                hy.append(f"r{rank} hooks")
                ht.append(f"rank {rank} hook {h.label}<br>step {h.step} micro {h.micro_step} position {h.position}")

    fig = go.Figure()
    if compute_bars:
        x, y = compute_bars.xy()
        fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", line=dict(color=COMPUTE_COLOR, width=12),
                                   name="compute", hoverinfo="skip", legendgroup="compute"))
        fig.add_trace(go.Scattergl(**_points(comp_hx, comp_hy, comp_text), mode="markers",
                                   marker=dict(size=2, color=COMPUTE_COLOR), hoverinfo="text", showlegend=False,
                                   legendgroup="compute"))
    for lab in sorted(bars):
        x, y = bars[lab].xy()
        fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", line=dict(color=colors[lab], width=12), name=lab,
                                   legendgroup=lab, hoverinfo="skip"))
        if lab in queued:
            x, y = queued[lab].xy()
            fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", opacity=0.45, line=dict(color=colors[lab], width=3),
                                       legendgroup=lab, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scattergl(**_points(*bar_hover[lab]), mode="markers", marker=dict(size=4, color=colors[lab]),
                                   hoverinfo="text", legendgroup=lab, showlegend=False))
    if exposed_bars:
        x, y = exposed_bars.xy()
        fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", line=dict(color=EXPOSED_COLOR, width=5),
                                   name="exposed", hoverinfo="skip"))
    for lab in sorted(hook_pts):
        fig.add_trace(go.Scattergl(**_points(*hook_pts[lab]), mode="markers", name=f"hook {lab}", legendgroup=lab,
                                   hoverinfo="text", marker=dict(symbol="diamond", size=9, color=colors.get(lab))))
    first_rank = steps[steps["rank"] == trace.ranks[0]] if len(steps) and trace.ranks else steps
    prev_end = None
    for s in first_rank.sort_values("start_ns").itertuples(index=False):
        fig.add_vline(x=(int(s.start_ns) - t0) / 1e6, line=dict(color="#bbbbbb", dash="dot", width=1),
                      annotation_text=f"step {s.step}", annotation_position="top left")
        if prev_end is not None and int(s.start_ns) > prev_end:  # between steps (analyze.step_gaps)
            fig.add_vrect(x0=(prev_end - t0) / 1e6, x1=(int(s.start_ns) - t0) / 1e6, fillcolor=GAP_COLOR,
                          opacity=0.35, line_width=0, layer="below")
        prev_end = int(s.end_ns) if pd.notna(s.end_ns) else None
    _add_step_selector(fig, first_rank, t0)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)), type="category")
    fig.update_xaxes(title_text="ms since window start", rangeslider=dict(visible=False))
    fig.update_layout(height=max(300, 26 * len(rows) + 140), margin=dict(l=110, r=20, t=40, b=50),
                      template="plotly_white", hovermode="closest", legend=dict(orientation="v"),
                      dragmode="zoom")
    return fig
