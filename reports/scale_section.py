"""The sections a page at scale shows in place of every rank (commscope.analyze.report_context: more than
PAGE_ALL_RANKS ranks): the distribution of arrival lateness and the ranks that made the others wait most.

`render_lateness`: analyze.lateness' histogram as a plotly bar chart (one bar per 1-2-5 bucket, counts on a
log axis, so the one late arrival of a stalled rank shows beside a million on-time ones), hover giving
each bucket's share, distinct ranks and latest arrival; its quantiles as a table. `render_top_waiting`:
summarize()'s stragglers (waiting.by_rank), the TOP_WAITING first, as a table. Both return None below the
threshold, where the page shows every rank instead.

Invariant: only renders ctx.lateness and ctx.top_waiting; bucket names and units are display.
"""
from __future__ import annotations

import html

import numpy as np

from reports import tables

QUANTILE_NAMES = {0.5: "median", 0.9: "p90", 0.99: "p99", 0.999: "p99.9", 1.0: "max"}


def duration(ns: float) -> str:
    """A bucket edge: 500 µs, 1 ms, 2 s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns:g} ns"


def bucket_name(lo: float, hi: float) -> str:
    return f"< {duration(hi)}" if lo == 0 else f"{duration(lo)}–{duration(hi)}"


def lateness_figure(hist):
    import plotly.graph_objects as go

    names = [bucket_name(lo, hi) for lo, hi in zip(hist["lo_ns"], hist["hi_ns"])]
    worst_ms = hist["worst_ns"].to_numpy(np.float64, na_value=np.nan) / 1e6
    data = np.column_stack([hist["share"].to_numpy(np.float64) * 100, hist["ranks"].to_numpy(np.float64),
                            hist["worst_rank"].to_numpy(np.float64, na_value=np.nan), worst_ms,
                            hist["worst_step"].to_numpy(np.float64, na_value=np.nan)])
    labels = [str(x) if isinstance(x, str) else "" for x in hist["worst_label"]]
    fig = go.Figure(go.Bar(
        x=names, y=hist["arrivals"].to_numpy(np.int64), customdata=data, text=labels, textposition="none",
        marker=dict(color="#0072B2"), name="arrivals",
        hovertemplate=("<b>%{x}</b> after the first arrival<br>%{y:,} arrivals (%{customdata[0]:.3f}%) "
                       "of %{customdata[1]:,} ranks<br>latest: rank %{customdata[2]} at %{customdata[3]:.3f} ms "
                       "(step %{customdata[4]}, %{text})<extra></extra>")))
    fig.update_yaxes(type="log", title_text="arrivals (log)")
    fig.update_xaxes(title_text="how late after the instance's first arrival", type="category")
    fig.update_layout(height=330, margin=dict(l=70, r=20, t=20, b=60), template="plotly_white", bargap=0.15)
    return fig


def render_lateness(ctx) -> str | None:
    if not ctx.at_scale:
        return None
    if isinstance(ctx.lateness, Exception):
        raise ctx.lateness
    hist, q = ctx.lateness
    if not len(hist):
        return '<p class="empty">No collective reached by every member of its group: no arrivals to compare.</p>'
    from reports.page import figure_html

    arrivals = int(hist["arrivals"].sum())
    last = hist[hist["arrivals"] > 0].iloc[-1]
    rows = [{"quantile": QUANTILE_NAMES.get(float(x), f"q{float(x):g}"), "lateness_ms": float(ns) / 1e6}
            for x, ns in zip(q["quantile"], q["lateness_ns"])]
    latest = (f"The latest arrival: rank {int(last['worst_rank'])}, {tables.fmt(float(last['worst_ns']) / 1e6)} ms "
              f"after the first, at step {last['worst_step']} ({html.escape(str(last['worst_label']))}).")
    return ('<p class="note">For every collective reached by all members of its group, how late each member '
            "arrived after the first one (GPU: its kernel's start; CPU: its launch, not before the group's "
            f"previous collective): {arrivals:,} arrivals, each first arrival counted as 0. {latest}</p>"
            '<div class="cols"><div style="flex:3">'
            + figure_html(lateness_figure(hist), "lateness-plot", {"displaylogo": False, "responsive": True}) +
            '</div><div style="flex:1">' + tables.records_table(rows, table_id="lateness-quantiles") + "</div></div>")


def render_top_waiting(ctx) -> str | None:
    if not ctx.at_scale:
        return None
    if ctx.summary.get("stragglers_reason"):  # nobody judged: "no rank made the others wait" is unmeasured
        return f'<p class="empty">Who made whom wait {html.escape(ctx.summary["stragglers_reason"])}.</p>'
    if not ctx.top_waiting:
        return '<p class="empty">No rank made the others wait.</p>'
    why = {r["rank"]: "; ".join(r["why"]) for r in ctx.representative}
    rows = [{**s, "in_timeline": why.get(int(s["rank"]), "")} for s in ctx.top_waiting]
    return (f'<p class="note">The {len(rows)} ranks whose late arrivals made the others wait longest '
            "(wait caused: the others' waiting summed over the collectives the rank came last to, and its "
            "share of all waiting caused). In the timeline: why a rank is drawn there.</p>"
            + tables.records_table(rows, ["rank", "wait_caused_ms", "score", "times_last", "last_share",
                                          "in_timeline"], table_id="top-waiting-table"))
