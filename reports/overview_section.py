"""The report's first screen: the summary (verdict, headline, what the figures cannot tell, top exposed
labels and ranks with their why) and the ranks × steps heatmap of exposed communication, whose cells open
their steps in the timeline.

Renders `ctx.highlights` and `ctx.heatmap` (commscope.analyze.report_overview) as they are. The heatmap
is an HTML table, not a plot: it needs no plotting library, stays readable at any size, and each cell
carries its timeline window (`data-x0`/`data-x1`, ms on the timeline's axis) for reports/static/report.js.
Cell colours map exposed ms onto one sequential, colour-blind-safe scale (cividis) from 0 to the largest
cell, the only thing computed here, and that is display.

At scale (ctx.at_scale: more ranks than a table can show) the heatmap is a canvas that
reports/static/report.js paints from the same numbers, one pixel row per rank from 512 ranks on (so one
rank's row stays visible among a thousand), the representative ranks marked beside it; hovering names
the cell, a click shows its rank in the timeline. Its data travels compressed (reports.page.data_html):
a table of 1024 × 40 cells weighs ~6 MB, the canvas' data ~0.1 MB.
"""
from __future__ import annotations

import html
import math

import numpy as np

from commscope.analyze.summary import hta_note
from commscope.util.text import steps_said
from reports.tables import counted, fmt, step_words, verdict_line
from reports.timeline import label_colors

# cividis, 6 stops (plotly.colors.sequential.Cividis, thinned): dark blue → yellow, monotone in lightness
CIVIDIS = [(0, 34, 78), (54, 67, 110), (109, 106, 112), (155, 147, 117), (206, 191, 101), (254, 232, 56)]


# Cells above the ramp's top (report_overview.colour_top): a hue off the ramp, so that a column where every
# rank waited on a straggler stands apart from the ramp's darkest cells, and the straggler's own cell in it
# (at or under the top) stays distinct from its neighbours.
ABOVE = (178, 24, 43)


def _cell_colour(v: float, top: float) -> tuple[str, str]:
    """A cell's background and text colour: on the ramp up to `top`, ABOVE past it."""
    if top > 0 and v > top:
        return f"rgb({ABOVE[0]},{ABOVE[1]},{ABOVE[2]})", "#fff"
    return _scale(v / top if top > 0 else 0.0)


def _scale(x: float) -> tuple[str, str]:
    """Background (light = little exposure: reversed cividis) and a readable text colour."""
    t = 1.0 - min(max(x, 0.0), 1.0)
    pos = t * (len(CIVIDIS) - 1)
    i = min(int(pos), len(CIVIDIS) - 2)
    f = pos - i
    rgb = [round(a + (b - a) * f) for a, b in zip(CIVIDIS[i], CIVIDIS[i + 1])]
    light = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140
    return f"rgb({rgb[0]},{rgb[1]},{rgb[2]})", "#000" if light else "#fff"


CAVEATS_ON_PAGE = 12  # problems and notes in the box under the headline; the rest are counted


def render_caveats(summary: dict) -> str | None:
    """The box under the headline: what the figures above cannot conclude (the document's `notes`), what
    the run's own files say of ranks that did not complete (`run_reports`), what went wrong while loading
    (`problems`, also listed under Run facts) and whether HTA's analyses were left
    out for want of HTA. They qualify every number of the page, so they sit where it is read first."""
    items = [("note", step_words(str(n))) for n in summary.get("notes") or []]
    items += [("the run reports", step_words(str(p))) for p in summary.get("run_reports") or []]
    items += [("problem while loading", step_words(str(p))) for p in summary.get("problems") or []]
    hta = hta_note(summary)
    if hta:
        items.append(("note", hta))
    if not items:
        return None
    shown = "".join(f'<li class="{"problem" if kind != "note" else "note"}"><b>{kind}:</b> {html.escape(text)}</li>'
                    for kind, text in items[:CAVEATS_ON_PAGE])
    more = (f'<li>… {len(items) - CAVEATS_ON_PAGE} more: <a href="#overview">Run facts</a> lists every problem, '
            "<code>commscope report --json</code> every note.</li>" if len(items) > CAVEATS_ON_PAGE else "")
    return (f'<div class="caveats" id="caveats"><b>What these figures cannot tell</b><ul>{shown}{more}</ul></div>')


def render_summary(ctx) -> str:
    h = ctx.highlights
    if isinstance(h, Exception):
        raise h
    # the doctor section's colours: ok green, no verdict to be had (insufficient, interrupted) amber, a fault red
    kind = "ok" if h.verdict == "ok" else "unsure" if h.verdict in ("insufficient", "interrupted") else "bad"
    out = [f'<p class="verdict {kind}" id="verdict">{verdict_line(h.verdict, h.verdict_summary)}</p>']
    out += [f'<p class="verdict bad verdict-also">Also: {verdict_line(v, said)}</p>' for v, said in h.also]
    world = ctx.summary.get("world_size")
    # ranks of the job whose records are absent are said so: "0 ranks" beside a verdict naming 2 reads as a contradiction
    ranks = (f"{h.n_ranks} of {counted(world, 'rank')} recorded" if isinstance(world, int) and h.n_ranks < world
             else counted(h.n_ranks, "rank"))
    facts = [ranks, counted(h.n_steps, "step")]
    if h.step_ms_mean is not None:
        facts.append(f"mean step {fmt(h.step_ms_mean)} ms" + h.step_scope)  # what it is over (the analysis')
    if not ctx.summary.get("labels") and not h.exposed_unknown:
        facts.append("<b>no collectives in this input</b>")
    elif h.exposed_pct is not None:
        facts.append(f"<b>exposed communication {h.exposed_pct:.1f}% of step time</b>")
    elif h.exposed_unknown:
        facts.append("<b>exposed communication unknown</b>")
    out.append(f'<p class="headline">{" · ".join(facts)}</p>')
    caveats = render_caveats(ctx.summary)
    if caveats:
        out.append(caveats)
    bars = ctx.timeline
    # the timeline's colour map, so a swatch here is the bar colour there
    colors = label_colors(bars.labels if bars is not None and not isinstance(bars, Exception) else
                          list((ctx.summary.get("labels") or {}).keys()))
    cols = []
    items = "".join(
        f'<li><span class="swatch" style="background:{colors.get(f.name, "#888")}"></span><b>{html.escape(f.name)}</b> '
        f'{fmt(f.exposed_ms)} ms exposed per rank<ul>' + "".join(f"<li>{html.escape(w)}</li>" for w in f.why)
        + "</ul></li>" for f in h.labels)
    unknown = (f'<p class="empty">Exposed time unknown for {html.escape(", ".join(h.exposed_unknown))}: '
               "collectives without an end time in the trace.</p>" if h.exposed_unknown else "")
    cols.append('<div><h3>Most exposed collectives</h3>' + (f'<ol id="top-labels">{items}</ol>' if items else
                "" if unknown else '<p class="empty">No exposed communication.</p>') + unknown + "</div>")
    items = "".join(f"<li><b>{html.escape(f.name)}</b><ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in f.why)
                    + "</ul></li>" for f in h.ranks)
    # where nobody could be judged (a partial trace set), "no straggler" would claim a measurement: the
    # reason is said instead, and the rest speaks of exposed communication only
    reason = ctx.summary.get("stragglers_reason")
    if items:
        body = f'<ol id="top-ranks">{items}</ol>'
    elif reason:
        body = ('<p class="empty">Which rank\'s communication is exposed is unknown.</p>' if h.exposed_unknown
                else '<p class="empty">No rank stands out by its exposed communication.</p>')
    else:
        body = ('<p class="empty">No straggler; which rank\'s communication is exposed is unknown.</p>'
                if h.exposed_unknown else '<p class="empty">No rank stands out: no straggler, no exposed communication.</p>')
    unjudged = (f'<p class="empty" id="stragglers-unjudged-summary">Who made whom wait {html.escape(reason)}.</p>'
                if reason else "")
    cols.append('<div><h3>Ranks to look at</h3>' + unjudged + body + "</div>")
    out.append('<div class="cols">' + "".join(cols) + "</div>")
    return "\n".join(out)


def _ms(a: np.ndarray) -> list:
    """ms values for the canvas' data, to the µs the page prints (NaN: null)."""
    return [None if math.isnan(x) else x for x in np.round(a.astype(np.float64), 3).ravel().tolist()]


def _legend(hm, known: int) -> str:
    """The colour ramp and its range, and the cells above it (report_overview.colour_top); without a known
    cell (exposure unknown everywhere) it says so."""
    if not known:
        return "No cell has a known exposed time."
    above = (f'; <span class="ramp" style="width:1.2em;background:rgb{ABOVE}"></span> {hm.above_scale} cell(s) '
             f"above it, up to {fmt(hm.max_ms)} ms" if hm.above_scale else "")
    return (f'<span class="legend" id="heatmap-legend"><span class="ramp" style="background:linear-gradient('
            f'to right,{_scale(0)[0]},{_scale(0.5)[0]},{_scale(1)[0]})"></span> 0 … {fmt(hm.scale_ms)} ms{above}.</span>'
            + _no_end_note(hm))


def _no_end_note(hm) -> str:
    """The steps the heatmap has no column for although ranks began them (a run that stopped inside one)."""
    if not hm.no_end:
        return ""
    steps = "; ".join(f"step {s} ({counted(n, 'rank')} began it)" for s, n in sorted(hm.no_end.items()))
    return (f' <span id="heatmap-no-end">No column for {steps}: no rank recorded its end (the run stopped '
            "inside it).</span>")


def render_heatmap_canvas(ctx, hm) -> str:
    from reports.page import data_html

    finite = hm.exposed_ms[~np.isnan(hm.exposed_ms)]
    win = [[i * len(hm.columns) + j, round(w[0], 4), round(w[1], 4)]
           for i, row in enumerate(hm.window_ms) for j, w in enumerate(row) if w is not None]
    data = {"ranks": hm.ranks, "columns": [list(c) for c in hm.columns], "exposed": _ms(hm.exposed_ms),
            "step_ms": _ms(hm.step_ms), "top": hm.scale_ms, "above": list(ABOVE), "win": win,
            "marked": [{"rank": r["rank"], "why": "; ".join(r["why"])} for r in ctx.representative],
            "cividis": [list(c) for c in CIVIDIS]}  # report.js maps a cell onto it as _scale does
    legend = _legend(hm, finite.size)
    binned = len(hm.columns) != len({s for c in hm.columns for s in c}) and not all(c[0] == c[1] for c in hm.columns)
    return ('<p class="note">Exposed communication per rank (a row each, ' + f"{len(hm.ranks)} ranks" +
            ") and step (ms; the time a rank waits on collectives that compute does not hide" +
            ("; a column covers several steps: mean per step" if binned else "") +
            '). Marked on the right: the representative ranks the timeline draws. Hover for a cell\'s numbers; '
            f'click it to show its rank in the timeline. {legend}</p><p class="note" id="heatmap-note" style="min-height:2.6em"></p>'
            '<div class="heatmap-box"><canvas id="heatmap-canvas"></canvas></div>' + data_html(data, "heatmap-gz"))


def _click_note(columns: list[tuple[int, int]], drawn: list[bool], window: tuple[int, int] | None = None) -> str:
    """What a click on a cell does: open its steps in the timeline, for the columns the timeline draws
    (wholly: a column of several steps that the window cuts is not shaded, though part of it is drawn)."""
    if all(drawn):
        return "click it to open its steps in the timeline."
    steps = [s for c, d in zip(columns, drawn) if d for s in range(c[0], c[1] + 1)]
    whole = f"the timeline draws {steps_said(window[0], window[1] - 1)}" if window is not None else None
    if not steps:
        if whole:
            return (f"{whole}, which no column holds whole: <code>#step=N</code> in the address opens one of "
                    "its steps; <code>--steps A:B</code> draws the steps you choose.")
        return ("the timeline draws none of these columns' steps; <code>--steps A:B</code> draws the steps "
                "you choose.")
    which = steps_said(min(steps), max(steps))
    if whole is None or (window[0], window[1] - 1) == (min(steps), max(steps)):
        return (f"the timeline draws {which} (the shaded column headers): click a cell there to open it in the "
                "timeline; <code>--steps A:B</code> draws other steps.")
    return (f"{whole}; the shaded column headers are the columns wholly inside it ({which}): click a cell there "
            "to open it in the timeline, or give <code>#step=N</code> in the address for any step it draws; "
            "<code>--steps A:B</code> draws other steps.")


def render_heatmap(ctx) -> str | None:
    hm = ctx.heatmap
    if isinstance(hm, Exception):
        raise hm
    if hm is None:
        return None
    if ctx.at_scale:
        return render_heatmap_canvas(ctx, hm)
    finite = hm.exposed_ms[~np.isnan(hm.exposed_ms)]
    top = hm.scale_ms
    show_numbers = len(hm.columns) <= 16
    # the columns whose cells open in the timeline: those it draws (a cell there carries its window)
    drawn = [any(row[j] is not None for row in hm.window_ms) for j in range(len(hm.columns))]
    head = "".join(('<th class="drawn">' if d and not all(drawn) else "<th>") + (f"{c[0]}" if c[0] == c[1] else f"{c[0]}–{c[1]}")
                   + "</th>" for c, d in zip(hm.columns, drawn))
    rows = []
    for i, rank in enumerate(hm.ranks):
        cells = []
        for j, (lo, hi) in enumerate(hm.columns):
            v, st = hm.exposed_ms[i, j], hm.step_ms[i, j]
            steps = steps_said(lo, hi) + ("" if lo == hi else " (mean per step)")
            if math.isnan(v):
                cells.append(f'<td class="na" title="rank {rank}, {steps}: no data">–</td>')
                continue
            bg, fg = _cell_colour(v, top)
            win = hm.window_ms[i][j]
            where = f' data-x0="{win[0]:.4f}" data-x1="{win[1]:.4f}"' if win is not None else ""
            text = fmt(v) if show_numbers else ""
            cells.append(f'<td class="cell" style="background:{bg};color:{fg}" data-r="{rank}" data-s="{lo}:{hi + 1}" '
                         f'data-value="{float(v)!r}" data-step-ms="{float(st)!r}"{where}>{text}</td>')
        rows.append(f'<tr><th>r{rank}</th>{"".join(cells)}</tr>')
    legend = _legend(hm, finite.size)
    return ('<p class="note">Exposed communication per rank and step (ms; the time a rank waits on '
            'collectives that compute does not hide' + ("" if len(hm.columns) == len({s for c in hm.columns for s in c})
            or all(c[0] == c[1] for c in hm.columns) else "; a column covers several steps: mean per step") +
            '). Hover a cell for its numbers; ' + _click_note(hm.columns, drawn, ctx.window) +
            f' {legend}</p><p class="note" id="heatmap-note" style="min-height:2.6em"></p>'
            f'<div class="scroll"><table class="heatmap{"" if show_numbers else " dense"}" id="heatmap-table"><thead><tr><th>rank \\ step</th>{head}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
