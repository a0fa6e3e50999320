"""The per-rank overlap timeline of the HTML report (a plotly figure).

Rows, top to bottom, per rank: one `rN compute sS` row per stream the rank computes on (merged blocks
named by their kernels; on a trace without device kernels the rows are CPU threads, `rN compute (CPU
thread T)`), then one `rN comm` row: every collective is a bar coloured by its label; where
collectives run at the same time the row splits into lanes, and the row grows with its lanes (`comm_row_span`):
each lane keeps LANE_PX px up to COMM_ROW_MAX_PX px of lanes, so 13 overlapping labels stay 13 readable lanes
and the page scrolls past a tall figure; only past 40 lanes do lanes get thinner. A collective's exposed part is overlaid with a black hatch, which reads
on every label colour. Gradient-hook firings are diamonds along the top of the comm row, in their label's
colour and legend group (a legend entry of their own only for a label without collectives). Step starts are
dotted vertical lines; the first rank's time between two steps is a yellow band. A legend entry, off by
default, links one collective call across ranks (the same (group, seq): analyze.flows).

A run that did not complete (analyze.timeline_inflight): a collective left in flight is a bar in its
label's colour with a red outline and red stripes, from its launch to the rank's last sign of life or the
figure's right edge, whichever comes first (a bar cut there ends where the x axis does, marked ▶; its hover
gives the whole time); a step the first rank began
but recorded no end of is a red dotted line at its earliest record, "step N · no end recorded".

Why bars (plotly `Bar`, horizontal, `base` = start): hover works anywhere on a bar, and bar fills take
patterns. They are SVG, so the number of bars is bounded upstream: compute arrives merged per (rank,
stream) row (commscope.analyze.timeline_bars), a block keeping the names of its costliest kernels.
Launch → start time is not drawn, only said in the hover ("launch to start"): thin lines across whole steps made
communication look always active. Times on the x axis are milliseconds since the window start; data goes
to plotly as numpy arrays (embedded as binary).

The figure only uses trace types of plotly.js's "basic" bundle (bar, scatter), the one the page inlines.

Invariant: the figure only draws: every position, lane and exposed span comes from
commscope.analyze.timeline_bars.TimelineBars.
"""
from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from commscope.analyze.layout_report import readable_kernel
from commscope.analyze.timeline_bars import TimelineBars
from commscope.analyze.timeline_inflight import NO_END
from reports.tables import byte_size

EXPOSED_COLOR = "#000000"
GAP_COLOR = "#f2c14e"  # time between two steps
COMPUTE_COLOR = "#c8c8c8"
# Qualitative, colour-blind-safe: Okabe & Ito's eight (black left out: it marks exposure) then Paul Tol's
# muted and dark hues that none of them repeats; 16 colours before one repeats.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#332288", "#117733", "#882255", "#999933", "#44AA99", "#DDCC77", "#AA4499", "#6699CC", "#661100"]
ROW_H = 22        # px per row (a comm row: per row it spans, comm_row_span)
LANE_PX = 8       # px of a comm row's bar thickness per lane, at least (the bar itself: 90 % of it)
COMM_ROW_MAX_PX = 320  # a comm row's lanes grow to this thickness (40 lanes of LANE_PX), then get thinner
# customdata: rank, step, seq, bytes, running ms, exposed ms. The step is said in the text ("step 5", or
# "outside every step" for step −1); the hovertext holds the bytes, in the page's one byte format
# (reports.tables.byte_size), then the host's launch to the collective's start (launch_to_start), named
# apart from the labels table's "Queued" (exposed time spent behind earlier collectives of its group:
# analyze.exposure.queue_split), a different quantity. It is text, not a number, because it is often
# unknown: a run directory timed on the CPU records no execution start, and its bar starts at the launch.
COLL_HOVER = ("<b>LABEL</b> · %{text} · seq %{customdata[2]}"
              "<br>running %{customdata[4]:.3f} ms<br>exposed %{customdata[5]:.3f} ms<br>%{hovertext}<extra></extra>")
L2S_UNKNOWN = "launch to start –"  # the page's mark of an unknown; the timeline caption says why
BAR = 0.72        # bar thickness, in rows
# the exposed overlay: transparent fill and a black hatch, no outline: on a GPU step's many sub-millisecond
# collectives outlines alone would fill the bars black and hide their labels' colours
EXPOSED_MARKER = dict(color="rgba(0,0,0,0)", line=dict(color=EXPOSED_COLOR, width=0),
                      pattern=dict(shape="x", fgcolor=EXPOSED_COLOR, size=5, solidity=0.35))
HOOK_MARKER = dict(symbol="diamond", size=8, line=dict(color="#000", width=0.5))  # plus the label's colour
INFLIGHT_COLOR = "#d62728"
INFLIGHT_NAME = "never completed (in flight)"
INFLIGHT_MARKER = dict(line=dict(color=INFLIGHT_COLOR, width=1.5),
                       pattern=dict(shape="/", fgcolor=INFLIGHT_COLOR, size=6, solidity=0.3))
# the legend's entry: one trace of no bars, white under the stripes (each label's bars are a trace of their
# own in the label's colour: a bar pattern takes one background colour per trace)
INFLIGHT_LEGEND = dict(INFLIGHT_MARKER, color="#ffffff")
# at the end of a bar cut at the figure's edge: the collective went on past it
CUT_MARKER = dict(symbol="triangle-right", size=9, color=INFLIGHT_COLOR)
UNFINISHED_STEP = NO_END  # after "step N · " on the mark of a step begun but not ended
FLOW_NAME = "one call across ranks"  # the legend entry of the lines linking one collective call across ranks
FLOW_LINE = dict(color="#444", width=1)


def label_colors(labels: list[str]) -> dict[str, str]:
    """A stable label → colour map (sorted labels, one palette), shared by bars and hook markers."""
    return {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(sorted(set(labels)))}


def step_text(step: Any) -> str:
    """A collective's step as its hover says it: "step 5", or "outside every step" (step −1)."""
    return "outside every step" if step is None or pd.isna(step) or int(step) < 0 else f"step {int(step)}"


def ms(v: float) -> str:
    return f"{v:.3f} ms"


def launch_to_start(queued_ns: float) -> str:
    """The hover's launch → start line (timeline_bars.RankBars.queued); L2S_UNKNOWN where it is unknown (NaN)."""
    return L2S_UNKNOWN if np.isnan(queued_ns) else f"launch to start {ms(queued_ns / 1e6)}"


def _or(v: Any) -> str:
    return "–" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def span_text(ns: float) -> str:
    """A duration as the in-flight hover says it: seconds from 1 s, else milliseconds."""
    return f"{ns / 1e9:.1f} s" if ns >= 1e9 else ms(ns / 1e6)


def inflight_text(r: Any, rank: int, more: int) -> str:
    """The hover of a collective left in flight (`r`: a row of RankBars.inflight)."""
    until = "when the watchdog fired" if r.watchdog_fired else "at its rank's last record"
    return (f"<b>{_or(r.label)}</b> · {_or(r.op)} · group {_or(r.group)} · seq {_or(r.seq)}<br>rank {rank} · "
            f"{step_text(r.step)}"
            f"<br><b>never completed</b>: still in flight {span_text(r.in_flight_ns)} after its launch, {until}"
            + (f"<br>its rank ended: {html.escape(r.ended)}" if r.ended and not r.watchdog_fired else "")
            + ("" if np.isnan(r.waited_after_ns) else
               f"<br>its rank blocked waiting on it from {span_text(r.waited_after_ns)} after its launch")
            + ("<br>(cut at the figure's right edge ▶)" if r.cut else "")
            + "<br>" + byte_size(None if pd.isna(r.bytes) else r.bytes)
            + (f"<br>rank {rank} has {more} more in flight, not drawn" if more else ""))


def _kernel_text(names: list[tuple[str, int, float]], n: int) -> str:
    listed = "<br>".join(f"{readable_kernel(name)} ×{k} ({ns / 1e6:.3f} ms)"
                         for name, k, ns in names)
    more = n - sum(k for _, k, _ in names)
    return listed + (f"<br>+{more} more" if more > 0 else "")


class _Bars:
    """Horizontal bars collected one by one, handed to plotly as arrays. `data`: per bar, numbers for the
    hover template (binary customdata, much smaller than a string per bar); `hover`: per bar, a second text."""

    def __init__(self) -> None:
        self.base, self.length, self.y, self.width, self.text, self.data, self.hover = [], [], [], [], [], [], []

    def add(self, start_ns: float, end_ns: float, y: float, width: float, text: str = "",
            data: tuple = (), hover: str = "") -> None:
        self.hover.append(hover)
        self.base.append(start_ns / 1e6)
        self.length.append((end_ns - start_ns) / 1e6)
        self.y.append(y)
        self.width.append(width)
        self.text.append(text)
        self.data.append(data)

    def trace(self, template: str | None = None, **kw) -> go.Bar:
        arrays = dict(orientation="h", base=np.asarray(self.base, np.float64),
                      x=np.asarray(self.length, np.float64), y=np.asarray(self.y, np.float64),
                      width=np.asarray(self.width, np.float64))
        if template is None:
            return go.Bar(**arrays, hoverinfo="skip", **kw)
        if self.data and self.data[0]:
            arrays["customdata"] = np.asarray(self.data, np.float64)
        if any(self.hover):
            arrays["hovertext"] = self.hover
        return go.Bar(**arrays, text=self.text, textposition="none", hovertemplate=template, **kw)


def _step_spans(bars: TimelineBars, unfinished: pd.DataFrame) -> list[tuple[int, str, float, float]]:
    """(step, menu entry, start ms, end ms) of each step marked, by start: the first rank's steps, and
    those it recorded no end of, which reach the figure's right edge (its in-flight bars with them)."""
    t0 = bars.t0
    out = [(int(s.step), f"step {s.step}", (int(s.start_ns) - t0) / 1e6, (int(s.end_ns) - t0) / 1e6)
           for s in bars.step_marks.itertuples(index=False)]
    out += [(int(s.step), f"step {s.step} ({UNFINISHED_STEP})", (int(s.start_ns) - t0) / 1e6, bars.t_edge / 1e6)
            for s in unfinished.itertuples(index=False)]
    return sorted(out, key=lambda x: x[2])


def _add_step_selector(fig: go.Figure, steps: list[tuple[int, str, float, float]], every_step: bool = True,
                       max_buttons: int = 40, x_range: list[float] | None = None) -> None:
    """`steps`: _step_spans'. A dropdown that zooms the x axis to one step (the first rank's step bounds)
    or back to every step drawn: the in-page step selector for traces with many steps (more steps: use
    --steps). `every_step`: the figure draws all of the trace's steps, else a window of them, which the
    first entry names so it is not read as the whole run. `x_range`: the whole figure's range where it is
    set (bars cut at its edge), else autorange."""
    if len(steps) < 2 or len(steps) > max_buttons:
        return
    numbers = [step for step, _, _, _ in steps]
    label = f"{'all' if every_step else 'drawn'} steps ({min(numbers)}–{max(numbers)})"
    whole = {"xaxis.autorange": True} if x_range is None else {"xaxis.range": x_range, "xaxis.autorange": False}
    buttons = [dict(label=label, method="relayout", args=[whole])]
    for _, name, lo, hi in steps:
        pad = 0.02 * (hi - lo)
        buttons.append(dict(label=name, method="relayout",
                            args=[{"xaxis.range": [lo - pad, hi + pad], "xaxis.autorange": False}]))
    fig.update_layout(updatemenus=[dict(type="dropdown", buttons=buttons, x=0, xanchor="left", y=1.0,
                                        yanchor="bottom", pad=dict(b=30), showactive=True)])


def compute_row_name(rank: int, stream: str | None, cpu_threads: bool = False) -> str:
    """A compute row's name: `r0 compute s7` for a CUDA stream, `r0 compute (CPU thread 3113936)` where
    the trace has no device kernels and a row is a thread's CPU ops (a bare `s3113936` reads as a stream)."""
    if stream is None:
        return f"r{rank} compute"
    return f"r{rank} compute (CPU thread {stream})" if cpu_threads else f"r{rank} compute s{stream}"


def comm_row_span(n_lanes: int) -> float:
    """A comm row's height in rows of ROW_H px: one, or as many as give each of its `n_lanes` lanes LANE_PX
    px of the row's bar thickness (BAR of the row), up to COMM_ROW_MAX_PX px of lanes. reports/static/report.js
    (csRowSpan) sizes the rows it adds at scale by the same rule, from timeline_ranks.style's numbers."""
    return max(1.0, min(max(int(n_lanes), 1) * LANE_PX, COMM_ROW_MAX_PX) / (BAR * ROW_H))


def row_layout(bars: TimelineBars, cpu_threads: bool = False) -> list[tuple[str, int, str | None, float]]:
    """The rows top to bottom: (name, rank, stream or "comm", height in rows)."""
    rows = []
    for rb in bars.ranks:
        for cr in rb.compute:
            rows.append((compute_row_name(rb.rank, cr.stream, cpu_threads), rb.rank, cr.stream, 1.0))
        rows.append((f"r{rb.rank} comm", rb.rank, "comm", comm_row_span(rb.n_lanes)))
    return rows


def row_centres(spans: list[float]) -> tuple[list[float], float]:
    """Each row's y centre, rows stacked top down from y = -0.5 (a row of height one is centred on a whole
    number, as plotly's bar `width` counts in y units), and the y of the last row's bottom edge."""
    top, centres = -0.5, []
    for h in spans:
        centres.append(top + h / 2)
        top += h
    return centres, top


def figure_height(total_span: float) -> int:
    """The figure's height in px for rows of `total_span` rows in all: ROW_H px a row plus the margins.
    Where the browser's margins come out larger (a legend wrapping on a narrow window), the page's script
    grows the figure until a row has ROW_H px again (report.js csKeepRowPx, reading layout.meta.row_px)."""
    return int(round(ROW_H * total_span)) + 200


class _Layers:
    """The figure's bars and markers, collected rank by rank before any trace is built (one trace per
    kind and label keeps the figure small)."""

    def __init__(self) -> None:
        self.compute, self.exposed = _Bars(), _Bars()
        self.per_label: dict[str, _Bars] = {}
        self.stuck: dict[str, _Bars] = {}  # collectives left in flight, by label
        self.cut_x: list[float] = []  # where a bar is cut at the window's edge
        self.cut_y: list[float] = []
        self.hooks: dict[str, tuple[list, list, list]] = {}  # label -> (x, y, hover)


def timeline_figure(bars: TimelineBars, cpu_threads: bool = False) -> go.Figure:
    """Draw `bars` (commscope.analyze.timeline_bars.timeline_bars): one figure, rows per rank.
    `cpu_threads`: the trace has no device kernels, so a compute row's stream is a CPU thread id."""
    colors = label_colors(bars.labels)
    rows = row_layout(bars, cpu_threads)
    centres, bottom = row_centres([r[3] for r in rows])
    y_of = {(rank, key): y for (_, rank, key, _), y in zip(rows, centres)}
    layers = _Layers()
    for rb in bars.ranks:
        _collect_rank(layers, rb, y_of, cpu_threads, (bars.inflight_more or {}).get(rb.rank, 0))
    fig = go.Figure()
    _add_layers(fig, layers, colors)
    _add_flows(fig, bars.flows, y_of)
    unfinished = bars.unfinished if bars.unfinished is not None else pd.DataFrame(columns=["step", "start_ns"])
    shapes, notes = _step_marks(bars, unfinished)
    # bars cut at the edge end where the axis does (autorange would pad past them, and a cut bar would read
    # as a collective that ended there); "all steps" and a double-click come back to this range. A rank the
    # page's selector adds may have such bars when no drawn rank does: the axis ends at the edge then too.
    x_range = [-0.01 * bars.t_edge / 1e6, bars.t_edge / 1e6] if layers.cut_x or bars.cut_anywhere else None
    _add_step_selector(fig, _step_spans(bars, unfinished), every_step=bars.window is None, x_range=x_range)
    if x_range is not None:
        fig.update_xaxes(range=x_range, autorange=False)
    fig.update_yaxes(tickmode="array", tickvals=centres, ticktext=[r[0] for r in rows],
                     range=[bottom, -0.5], zeroline=False, showgrid=False, fixedrange=True)
    fig.update_xaxes(title_text="ms since window start", zeroline=False)
    fig.update_layout(height=figure_height(bottom + 0.5), margin=dict(l=130, r=20, t=60, b=110), barmode="overlay",
                      template="plotly_white", hovermode="closest", dragmode="zoom", shapes=shapes,
                      annotations=notes, bargap=0, legend=dict(orientation="h", x=0, yref="container", y=0.005, yanchor="bottom"),
                      hoverlabel=dict(align="left"), meta=dict(row_px=ROW_H))
    return fig


def _collect_rank(layers: _Layers, rb: Any, y_of: dict, cpu_threads: bool, more: int) -> None:
    """One rank's compute rows, collectives (lane by lane in its comm row), exposed parts, collectives
    left in flight and hook markers, into `layers`; `more`: its in-flight collectives not drawn."""
    for cr in rb.compute:
        y = y_of[(rb.rank, cr.stream)]
        where = f"rank {rb.rank}" + ("" if cr.stream is None else
                                      f" CPU thread {cr.stream}" if cpu_threads else f" stream {cr.stream}")
        what = "op(s)" if cpu_threads else "kernel(s)"
        for a, b, n, names in zip(cr.starts, cr.ends, cr.counts, cr.names):
            layers.compute.add(a, b, y, BAR, f"<b>{where}</b>: {int(n)} {what} in {ms((b - a) / 1e6)}<br>"
                                             + _kernel_text(names, int(n)))
    yc = y_of[(rb.rank, "comm")]
    bar = BAR * comm_row_span(rb.n_lanes)  # the comm row's bar thickness, in y units
    lane_h = bar / max(rb.n_lanes, 1)
    for j, r in enumerate(rb.coll.itertuples(index=False)):
        if not rb.drawn[j]:
            continue
        lab = str(r.label)
        y = yc - bar / 2 + lane_h * (rb.lanes[j] + 0.5)
        start, end = rb.start[j], rb.end[j]
        phase = "" if r.phase is None or pd.isna(r.phase) else f" · {r.phase}"
        layers.per_label.setdefault(lab, _Bars()).add(
            start, end, y, lane_h * 0.9, f"{r.op}{phase} · group {r.group}<br>rank {rb.rank} · {step_text(r.step)}",
            (rb.rank, r.step, r.seq, np.nan if pd.isna(r.bytes) else float(r.bytes), (end - start) / 1e6,
             rb.exposed_ns[j] / 1e6),
            byte_size(r.bytes if not pd.isna(r.bytes) else None) + "<br>"
            + launch_to_start(rb.queued[j]))
        for a, b in rb.exposed[j]:
            layers.exposed.add(a, b, y, lane_h * 0.9)
    for r in (rb.inflight.itertuples(index=False) if rb.inflight is not None else ()):
        y = yc - bar / 2 + lane_h * (r.lane + 0.5)
        layers.stuck.setdefault(str(r.label), _Bars()).add(r.start, r.end, y, lane_h * 0.9,
                                                            inflight_text(r, rb.rank, more))
        if r.cut:
            layers.cut_x.append(r.end / 1e6)
            layers.cut_y.append(y)
    for h, t in zip(rb.hooks.itertuples(index=False), rb.hook_t):
        hx, hy, ht = layers.hooks.setdefault(str(h.label), ([], [], []))
        hx.append(t / 1e6)
        hy.append(yc - bar / 2)
        ht.append(f"hook {h.label}<br>rank {rb.rank} · step {h.step} · micro-step {h.micro_step} · "
                  f"position {h.position}")


def _add_layers(fig: go.Figure, layers: _Layers, colors: dict) -> None:
    """One trace per kind and label, in drawing order: compute, collectives, their exposed parts (hatched
    over them), collectives left in flight, their cut ends, hooks."""
    if layers.compute.base:
        fig.add_trace(layers.compute.trace("%{text}<extra></extra>", name="compute",
                                           marker=dict(color=COMPUTE_COLOR, line=dict(width=0))))
    for lab in sorted(layers.per_label):
        fig.add_trace(layers.per_label[lab].trace(COLL_HOVER.replace("LABEL", lab), name=lab, legendgroup=lab,
                                                  marker=dict(color=colors[lab], line=dict(width=0))))
    if layers.exposed.base:  # hover passes through to the collective's own bar, which states its exposed time
        fig.add_trace(layers.exposed.trace(name="exposed (hatched)", marker=EXPOSED_MARKER))
    if layers.stuck:
        fig.add_trace(go.Bar(orientation="h", x=[None], base=[None], y=[None], name=INFLIGHT_NAME,
                             legendgroup=INFLIGHT_NAME, hoverinfo="skip", marker=INFLIGHT_LEGEND))
        for lab in sorted(layers.stuck):
            fig.add_trace(layers.stuck[lab].trace("%{text}<extra></extra>", name=INFLIGHT_NAME,
                                                  legendgroup=INFLIGHT_NAME, showlegend=False,
                                                  marker=dict(INFLIGHT_MARKER, color=colors[lab])))
    if layers.cut_x:
        fig.add_trace(go.Scatter(x=np.asarray(layers.cut_x, np.float64), y=np.asarray(layers.cut_y, np.float64),
                                 mode="markers", name=INFLIGHT_NAME, legendgroup=INFLIGHT_NAME, showlegend=False,
                                 hoverinfo="skip", marker=CUT_MARKER, cliponaxis=False))
    for lab in sorted(layers.hooks):
        hx, hy, ht = layers.hooks[lab]
        fig.add_trace(go.Scatter(x=np.asarray(hx, np.float64), y=np.asarray(hy, np.float64), hovertext=ht,
                                 hovertemplate="%{hovertext}<extra></extra>", mode="markers", name=f"hook {lab}",
                                 legendgroup=lab, showlegend=lab not in layers.per_label,
                                 marker=dict(HOOK_MARKER, color=colors.get(lab))))


def _add_flows(fig: go.Figure, flows: pd.DataFrame | None, y_of: dict) -> None:
    """Lines joining the members of each collective instance across the ranks' comm rows (hidden until
    the legend shows them)."""
    if flows is None or not len(flows):
        return
    xs, ys = [], []
    for _, f in flows.groupby("flow", sort=True):
        xs += list(f["t"].to_numpy(np.float64) / 1e6) + [np.nan]
        ys += [y_of[(int(r), "comm")] for r in f["rank"]] + [np.nan]
    fig.add_trace(go.Scatter(x=np.asarray(xs, np.float64), y=np.asarray(ys, np.float64), mode="lines",
                             name=FLOW_NAME, visible="legendonly", hoverinfo="skip", line=dict(FLOW_LINE)))


def _step_marks(bars: TimelineBars, unfinished: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """The step boundaries (a dotted line and its name each, the host gap before a step shaded) and the
    steps a rank began but did not finish, as layout shapes and annotations."""
    t0 = bars.t0
    shapes, notes = [], []
    for s, gap_from in zip(bars.step_marks.itertuples(index=False), bars.gap_before):
        x = (int(s.start_ns) - t0) / 1e6
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color="#888", dash="dot", width=1)))
        notes.append(dict(x=x, y=1, xref="x", yref="paper", text=f"step {s.step}", showarrow=False,
                          xanchor="left", yanchor="bottom", font=dict(size=11, color="#555")))
        if gap_from is not None:
            shapes.append(dict(type="rect", xref="x", yref="paper", x0=(gap_from - t0) / 1e6, x1=x, y0=0, y1=1,
                               fillcolor=GAP_COLOR, opacity=0.35, line=dict(width=0), layer="below"))
    for s in unfinished.itertuples(index=False):
        x = (int(s.start_ns) - t0) / 1e6
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color=INFLIGHT_COLOR, dash="dot", width=1)))
        notes.append(dict(x=x, y=1, xref="x", yref="paper", text=f"step {s.step} · {UNFINISHED_STEP}",
                          showarrow=False, xanchor="left", yanchor="bottom", font=dict(size=11, color=INFLIGHT_COLOR)))
    return shapes, notes
