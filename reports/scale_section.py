"""The sections a page at scale shows in place of every rank (commscope.analyze.report_context: more than
PAGE_ALL_RANKS ranks): the distribution of arrival lateness and the ranks that made the others wait most.

`render_lateness`: summarize()'s `arrival_lateness` (analyze.lateness' histogram and quantiles over the same
steps, so the page and `report --json` show one computation) as a plotly bar chart (one bar per 1-2-5
bucket, counts on a log axis, so the one late arrival of a stalled rank shows beside a million on-time
ones), hover giving each bucket's share, distinct ranks and latest arrival; its quantiles as a table.
`render_top_waiting`: summarize()'s stragglers (waiting.by_rank), the TOP_WAITING first, as a table. Both
return None below the threshold, where the page shows every rank instead.

Invariant: only renders ctx.summary's `arrival_lateness` and ctx.top_waiting; bucket names and units are
display.
"""
from __future__ import annotations

import html

import numpy as np

from reports import tables

QUANTILE_NAMES = {0.5: "median", 0.9: "p90", 0.99: "p99", 0.999: "p99.9", 1.0: "max"}


def duration(ms: float) -> str:
    """A bucket edge: 500 µs, 1 ms, 2 s."""
    for unit, scale in (("s", 1e3), ("ms", 1.0), ("µs", 1e-3)):
        if ms >= scale:
            return f"{ms / scale:g} {unit}"
    return f"{ms * 1e6:g} ns"


def bucket_name(lo_ms: float, hi_ms: float) -> str:
    return f"< {duration(hi_ms)}" if lo_ms == 0 else f"{duration(lo_ms)}–{duration(hi_ms)}"


def _floats(rows: list[dict], key: str) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=np.float64)


def lateness_figure(hist: list[dict]):
    import plotly.graph_objects as go

    names = [bucket_name(r["lo_ms"], r["hi_ms"]) for r in hist]
    data = np.column_stack([_floats(hist, "share") * 100, _floats(hist, "ranks"), _floats(hist, "worst_rank"),
                            _floats(hist, "worst_ms"), _floats(hist, "worst_step")])
    labels = [r["worst_label"] or "" for r in hist]
    fig = go.Figure(go.Bar(
        x=names, y=np.array([r["arrivals"] for r in hist], dtype=np.int64), customdata=data, text=labels,
        textposition="none",
        marker=dict(color="#0072B2"), name="arrivals",
        hovertemplate=("<b>%{x}</b> after the first arrival<br>%{y:,} arrivals (%{customdata[0]:.3f}%) "
                       "from %{customdata[1]:,} ranks<br>latest: rank %{customdata[2]} at %{customdata[3]:.3f} ms "
                       "(step %{customdata[4]}, %{text})<extra></extra>")))
    fig.update_yaxes(type="log", title_text="arrivals (log)")
    fig.update_xaxes(title_text="how late after the instance's first arrival", type="category")
    fig.update_layout(height=330, margin=dict(l=70, r=20, t=20, b=60), template="plotly_white", bargap=0.15)
    return fig


def render_lateness(ctx) -> str | None:
    if not ctx.at_scale:
        return None
    late = ctx.summary["arrival_lateness"]
    hist = late["histogram"]
    if not hist:
        return '<p class="empty">No collective reached by every member of its group: no arrivals to compare.</p>'
    from reports.page import figure_html

    last = [r for r in hist if r["arrivals"] > 0][-1]
    rows = [{"quantile": QUANTILE_NAMES.get(float(q["quantile"]), f"q{float(q['quantile']):g}"),
             "lateness_ms": q["lateness_ms"]} for q in late["quantiles"]]
    latest = (f"The latest arrival: rank {last['worst_rank']}, {tables.fmt(last['worst_ms'])} ms "
              f"after the first, at step {last['worst_step']} ({html.escape(str(last['worst_label']))}).")
    return ('<p class="note">For every collective reached by all members of its group, how late each member '
            "arrived after the first one (GPU: its kernel's start; CPU: its launch, not before the group's "
            f"previous collective): {late['arrivals']:,} arrivals, each first arrival counted as 0. {latest}</p>"
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
