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
NaN), so tens of thousands of kernels stay interactive; compute intervals arrive merged per rank
(commscope.analyze.timeline_bars) so a rank never contributes more than a bounded number of blocks.
Trace data goes to plotly as numpy arrays: plotly validates Python lists element by element but takes
arrays whole and embeds them as binary, which also shrinks the page (timeline_figure on the 8×H100
fixture: 0.215 s with lists, 0.131 s with arrays; bench/bench_revs.py).
Times on the x axis are milliseconds since the window start.

Invariant: the figure only draws: every position, lane and exposed span comes from
commscope.analyze.timeline_bars.TimelineBars, every number in the tables from summarize().
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from commscope.analyze.timeline_bars import TimelineBars

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
    """`steps`: sorted by start. A dropdown that zooms the x axis to one step (the first rank's step bounds) or back to everything:
    the in-page step selector for traces with many steps (more steps: use --steps)."""
    if len(steps) < 2 or len(steps) > max_buttons:
        return
    buttons = [dict(label="all steps", method="relayout", args=[{"xaxis.autorange": True}])]
    for s in steps.itertuples(index=False):
        lo, hi = (int(s.start_ns) - t0) / 1e6, (int(s.end_ns) - t0) / 1e6
        pad = 0.02 * (hi - lo)
        buttons.append(dict(label=f"step {s.step}", method="relayout",
                            args=[{"xaxis.range": [lo - pad, hi + pad], "xaxis.autorange": False}]))
    fig.update_layout(updatemenus=[dict(type="dropdown", buttons=buttons, x=0, xanchor="left", y=1.0,
                                        yanchor="bottom", pad=dict(b=24), showactive=True)])


def timeline_figure(bars: TimelineBars) -> go.Figure:
    """Draw `bars` (commscope.analyze.timeline_bars.timeline_bars): one figure, rows per rank."""
    t0 = bars.t0
    colors = label_colors(bars.labels)
    rows: list[str] = []
    compute_bars, exposed_bars = Segments(), Segments()
    comp_hx, comp_hy, comp_text = [], [], []
    bar_segs: dict[str, Segments] = {}
    queued: dict[str, Segments] = {}
    bar_hover: dict[str, tuple[list, list, list]] = {}
    hook_pts: dict[str, tuple[list, list, list]] = {}
    for rb in bars.ranks:
        rank = rb.rank
        rows.append(f"r{rank} compute")
        s, e, n = rb.compute
        if len(s):
            compute_bars.add(s, e, f"r{rank} compute")
            comp_hx += list((s + e) / 2e6)
            comp_hy += [f"r{rank} compute"] * len(s)
            comp_text += [f"rank {rank}: {k} compute interval(s)<br>{(b - a) / 1e6:.3f} ms" for a, b, k in zip(s, e, n)]

        if len(rb.coll):
            # Thick bar: execution (start→end) where measured, else launch→completion (all a wall clock
            # knows). Thin line on the same row: launch→execution start (queued behind earlier work).
            launch, start, end = rb.launch, rb.start, rb.end
            lane_rows = [f"r{rank} comm" if k == 0 else f"r{rank} comm {k + 1}" for k in range(rb.n_lanes)]
            rows += lane_rows
            for j, r in enumerate(rb.coll.itertuples(index=False)):
                if not rb.drawn[j]:
                    continue
                row, lab = lane_rows[rb.lanes[j]], str(r.label)
                bar_segs.setdefault(lab, Segments()).add([start[j]], [end[j]], row)
                if launch[j] < start[j]:
                    queued.setdefault(lab, Segments()).add([launch[j]], [start[j]], row)
                exp_ms = rb.exposed_ns[j] / 1e6
                if rb.exposed[j]:
                    exposed_bars.add([a for a, _ in rb.exposed[j]], [b for _, b in rb.exposed[j]], row)
                hx, hy, ht = bar_hover.setdefault(lab, ([], [], []))
                hx.append((start[j] + end[j]) / 2e6)
                hy.append(row)
                ht.append(f"rank {rank} · {lab} ({r.op}, {r.phase})<br>step {r.step} seq {r.seq} group {r.group}"
                          f"<br>bytes {float(r.bytes):,.0f}<br>running {(end[j] - start[j]) / 1e6:.3f} ms"
                          + (f"<br>launch→complete {(end[j] - launch[j]) / 1e6:.3f} ms" if launch[j] < start[j] else "")
                          + f"<br>exposed {exp_ms:.3f} ms")
        else:
            rows.append(f"r{rank} comm")

        if len(rb.hooks):
            rows.append(f"r{rank} hooks")
            for h, t in zip(rb.hooks.itertuples(index=False), rb.hook_t):
                hx, hy, ht = hook_pts.setdefault(str(h.label), ([], [], []))
                hx.append(t / 1e6)
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
    for lab in sorted(bar_segs):
        x, y = bar_segs[lab].xy()
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
    for s, gap_from in zip(bars.step_marks.itertuples(index=False), bars.gap_before):
        fig.add_vline(x=(int(s.start_ns) - t0) / 1e6, line=dict(color="#bbbbbb", dash="dot", width=1),
                      annotation_text=f"step {s.step}", annotation_position="top left")
        if gap_from is not None:
            fig.add_vrect(x0=(gap_from - t0) / 1e6, x1=(int(s.start_ns) - t0) / 1e6, fillcolor=GAP_COLOR,
                          opacity=0.35, line_width=0, layer="below")
    _add_step_selector(fig, bars.step_marks, t0)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)), type="category")
    fig.update_xaxes(title_text="ms since window start", rangeslider=dict(visible=False))
    fig.update_layout(height=max(300, 26 * len(rows) + 140), margin=dict(l=110, r=20, t=40, b=50),
                      template="plotly_white", hovermode="closest", legend=dict(orientation="v"),
                      dragmode="zoom")
    return fig
