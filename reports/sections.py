"""The report's sections: each is a renderer `ReportContext -> HTML fragment | None`, listed in SECTIONS.

Why a list of renderers: other features (layout findings, the doctor's verdict, ...) add their own section
by writing one function and adding one `Section(...)` line to SECTIONS, without touching page assembly or
the other sections. `order` places it; `open` sections form the first screens (summary, heatmap, timeline),
the others are details, collapsed until clicked (configuration is last at 90).
A renderer returns None to leave its section out (e.g. no HTA data); it must not raise for missing data.
At scale (ctx.at_scale) the per-rank tables list `ctx.listed_ranks` only (the representative ranks and the
ranks that made the others wait most), each saying so; `report --json` keeps every rank.

Invariant: renderers only render; numbers come from the `commscope.analyze.report_context.ReportContext`
(summarize()'s document, the timeline bars, the layout findings, the diagnosis) or the Trace's facts.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Callable

from commscope.analyze.layout_report import readable_kernel
from commscope.analyze.report_context import ReportContext
from commscope.analyze.summary import comm_overlap_note, comm_overlap_rows, undefined_overlap_note
from commscope.analyze.timeline_inflight import IN_FLIGHT_DRAWN
from commscope.util.text import steps_said
from reports import tables
from reports.tables import listed, listed_note
from reports.layout_section import render_layout
from reports.doctor_section import render_doctor
from reports.overview_section import render_heatmap, render_summary
from reports.scale_section import render_lateness, render_top_waiting

LABEL_COLUMNS = ["op", "count", "bytes", "mean_ms", "exposed_ms", "hidden_pct", "busbw_gbps"]
# Per-label fields keyed by other labels, not ranks: one cell each ("attn: 119.047"), not a table by rank.
BY_LABEL_FIELDS = {"queued_behind_ms"}
# Per-label reasons, not numbers: said once in a note under the table, where a column would repeat the
# sentence on every row.
NOTE_FIELDS = {"bandwidth_withheld"}
CONFIG_ITEMS = 16  # at scale: entries shown per list or mapping of the run configuration


@dataclass
class Section:
    id: str
    title: str
    order: int
    render: Callable[[ReportContext], str | None]
    open: bool = False  # shown expanded; the others are collapsed details


def render_overview(ctx: ReportContext) -> str:
    t, s = ctx.trace, ctx.summary
    facts = {"Input": str(t.path), "Source": t.source, "World size": t.world_size, "Ranks loaded": len(t.ranks),
             "Backend": t.backend, "Device": t.device,
             "Timeline steps": "all" if ctx.window is None else f"{ctx.window[0]} ≤ step < {ctx.window[1]}"}
    out = [tables.scalar_table(facts, "fact", "value", "overview-table")]
    rows = comm_overlap_rows(s)
    if rows:
        rows, which = listed(ctx, rows)
        out.append(f'<h3>Communication overlap by rank</h3><p class="note">{html.escape(comm_overlap_note(s))}</p>'
                   + which + tables.records_table(rows, table_id="overlap-by-rank"))
        note = undefined_overlap_note(s)
        if note:
            out.append(f'<p class="note">{html.escape(note)}</p>')
    # how ranks that did not complete ended, as the run's files say; what the loader could not read. Both
    # summarize()'s: what several ranks share is one line
    for title, key in (("Ranks that did not complete", "run_reports"), ("Problems while loading", "problems")):
        lines = s.get(key) or []
        if lines:
            out.append(f'<h3>{title}</h3><ul class="problems">' +
                       "".join(f"<li>{html.escape(tables.step_words(str(p)))}</li>" for p in lines) + "</ul>")
    return "\n".join(out)


def _undrawn_note(bars) -> str:
    n = bars.undrawn
    if not n:
        return ""
    return (f"{n:,} collective{'s' if n != 1 else ''} of these ranks and steps {'have' if n != 1 else 'has'} no "
            "execution start or end in the input (e.g. a host-side trace of a GPU job): not drawn, though the "
            "tables count them. ")


def render_timeline(ctx: ReportContext) -> str:
    from reports.timeline import timeline_figure  # plotly import kept off the path of --json

    if isinstance(ctx.timeline, Exception):
        raise ctx.timeline
    bars = ctx.drawn if ctx.at_scale and ctx.drawn is not None else ctx.timeline
    if not bars.ranks:  # an empty figure with axes would read as a timeline with nothing in it
        return ('<p class="empty" id="timeline-caption">No rank recorded anything to draw (the notes under the '
                "summary say why).</p>")
    on_cpu = cpu_threads(ctx)
    fig = timeline_figure(bars, cpu_threads=on_cpu)
    # the caption explains what this figure draws: hooks, gaps and host-timed bars only where there are some
    hooks = "Diamonds: gradient-hook firings. " if any(len(rb.hooks) for rb in bars.ranks) else ""
    gaps = "Yellow bands: time between two steps. " if any(g is not None for g in bars.gap_before) else ""
    what = "ops" if on_cpu else "kernels"
    note = (f'<p class="note" id="timeline-caption">{drawn_steps(bars, ctx.window)} Per rank: one grey row per '
            f'compute {"thread" if on_cpu else "stream"} (hover: its {what}), one comm row '
            'with each collective coloured by label, split into lanes where collectives overlap; <b>hatched in '
            f'black</b>: the exposed part, which compute does not hide. {hooks}{gaps}'
            'The legend entry "one call across ranks" links each collective '
            'call across ranks. A collective\'s hover gives its launch to start time, "–" where the input does '
            'not record the launch or the execution start'
            + (" (a run timed on the CPU: its bars start at the launch). " if on_cpu else ". ")
            + stopped_note(bars) + _undrawn_note(bars) +
            'Drag to zoom, double-click to reset; <code>--steps A:B</code> draws other steps.</p>')
    from reports.page import figure_html

    plot = figure_html(fig, "timeline-plot", {"displaylogo": False, "responsive": True, "scrollZoom": True})
    if ctx.at_scale and ctx.drawn is not None:
        return rank_picker(ctx) + note + plot
    return note + plot


def drawn_steps(bars, window) -> str:
    """The caption's first sentence: which steps the figure draws. It stays true while the step menu or
    a heatmap cell zooms the figure to one step, and says so where the input marks no steps at all."""
    unfinished = _unfinished(bars)
    marked = list(bars.step_marks["step"]) + unfinished
    if not marked:
        return "The input marks no steps: the figure draws all of its time."
    lo, hi = int(min(marked)), int(max(marked))
    steps = steps_said(lo, hi)
    which = f"every step of the input ({steps})" if window is None else steps
    zoom = "" if lo == hi else "; the step menu or a heatmap cell zooms to one of them"
    return f"The figure draws {which}{zoom}."


def _unfinished(bars) -> list[int]:
    u = getattr(bars, "unfinished", None)
    return [] if u is None else [int(s) for s in u["step"]]


def stopped_note(bars) -> str:
    """The caption's words for a run that did not complete (analyze.timeline_inflight), where it shows one."""
    stuck = any(rb.inflight is not None and len(rb.inflight) for rb in bars.ranks)
    unfinished = _unfinished(bars)
    out = ""
    if stuck:
        out += ('<b>Outlined in red, striped</b>: collectives that never completed, from their launch to their '
                "rank's last sign of life or the figure's edge (the hover gives the whole time). A rank without "
                "such a bar where the others have one did not leave that collective in flight: it may never have "
                "launched it (the doctor's verdict says). ")
        more = {r: n for r, n in (bars.inflight_more or {}).items() if n}
        if more:  # each bar takes a lane of its own: the oldest launches are drawn, the later ones queue behind them
            said = ", ".join(f"rank {r} {n}" for r, n in sorted(more.items())[:8]) + (" …" if len(more) > 8 else "")
            out += (f"At most {IN_FLIGHT_DRAWN} a rank are drawn, its oldest launches (the later ones queue behind "
                    f"them); not drawn: {said} (<code>commscope export --perfetto</code> draws every one). ")
    if unfinished:
        out += (f'A red dotted line: a step with records but no end recorded ({", ".join(map(str, unfinished))}), '
                "at its earliest record. ")
    return out


def cpu_threads(ctx: ReportContext) -> bool:
    """Without device kernels a compute row's stream is the thread id of CPU ops (docs/frames.md)."""
    return ctx.trace is not None and not len(ctx.trace.kernels)


def rank_picker(ctx: ReportContext) -> str:
    """At scale: which ranks the figure draws and why, and the selector that adds any rank's rows below them
    (drawn by report.js from every rank's rows, reports.timeline_ranks)."""
    from reports.page import data_html
    from reports.timeline_ranks import rank_rows, style

    why = "; ".join(f"<b>r{r['rank']}</b>: {html.escape(', '.join(r['why']))}" for r in ctx.representative)
    return (f'<p class="note" id="timeline-drawn">{len(ctx.trace.ranks)} ranks: drawn are the representative ranks '
            f"({why}).</p>"
            '<p class="note"><label for="rank-select">Show any rank below them:</label> '
            '<select id="rank-select" disabled><option value="">loading…</option></select> '
            '<span id="rank-shown"></span></p>'
            + data_html(rank_rows(ctx.timeline), "rank-rows-gz")
            # why each drawn rank is drawn: its option in the selector, and the sentence beside it when chosen
            + data_html({**style(ctx.timeline, cpu_threads(ctx)),
                         "why": {str(r["rank"]): ", ".join(r["why"]) for r in ctx.representative}}, "timeline-style"))


def render_collectives_by_label(ctx: ReportContext) -> str:
    """Scalar columns in one table (most exposed first, as summarize() orders them); each per-rank
    breakdown (dict-valued field such as exposed_ms_by_rank) as its own label × rank table."""
    labels = ctx.summary.get("labels") or {}
    scalar_cols, dict_cols = [], []
    for v in labels.values():
        for k, x in v.items():
            target = dict_cols if isinstance(x, dict) and k not in BY_LABEL_FIELDS else scalar_cols
            if k not in LABEL_COLUMNS and k not in NOTE_FIELDS and k not in scalar_cols + dict_cols:
                target.append(k)
    scalars = {lab: {k: x for k, x in v.items() if not isinstance(x, dict) or k in BY_LABEL_FIELDS}
               for lab, v in labels.items()}
    # The columns mix per-call, per-rank and all-rank aggregates; say which is which where they are read.
    basis = ctx.summary.get("duration_basis") or "no collective has one"
    out = ['<p class="note">Calls: all ranks together; exposed: per rank (mean over the ranks with the label); '
           'bytes per call: full-array bytes of one call (median); bytes per rank: total; mean duration: '
           f'{html.escape(basis)}; hidden by compute: share of the duration over all ranks; bandwidths '
           'total bytes over total transfer time (docs/analysis.md). Calls per rank: the mean of each rank\'s calls over the ranks '
           'with the label, a fraction where ranks made different numbers. The queueing split (per rank, as '
           'exposed): queued is the part of the exposed time spent behind earlier collectives of the same '
           'process group (a group runs them in launch order); own exposed the rest; queue charged the other '
           'labels\' queued time spent behind this one; attributed exposed = own exposed + queue charged, the '
           'stall the label is responsible for; queued behind, by label splits queued by the label it waited '
           'behind; wake delay: a blocked wait\'s time after the collective had completed (host-timed runs). '
           'Hover a column header for its definition.</p>',
           tables.keyed_table(scalars, "label", LABEL_COLUMNS + scalar_cols, "labels-table")]
    out += withheld_notes(labels)
    keep = None if ctx.listed_ranks is None else {str(r) for r in ctx.listed_ranks}
    for col in dict_cols:
        title = tables.humanize(col)
        title = title if title.endswith("by rank") else f"{title} by rank"  # exposed_ms_by_rank says it already
        out.append(f"<h3>{html.escape(title)}</h3>" + (listed_note(ctx) if keep else "") +
                   tables.keyed_table({lab: {r: x for r, x in (v.get(col) or {}).items() if keep is None or r in keep}
                                       for lab, v in labels.items()}, "label", table_id=f"labels-{col}"))
    return "\n".join(out)


def withheld_notes(labels: dict[str, dict]) -> list[str]:
    """One note per distinct reason (summarize()'s `bandwidth_withheld`) naming the labels whose
    bandwidth cells show a dash for it: a dash alone reads as "size unknown"."""
    by_why: dict[str, list[str]] = {}
    for lab, v in labels.items():
        if v.get("bandwidth_withheld"):
            by_why.setdefault(str(v["bandwidth_withheld"]), []).append(str(lab))
    return [f'<p class="note bandwidth-withheld">Bandwidth withheld for {html.escape(", ".join(labs))} (a dash '
            f"in the table): {html.escape(why)}.</p>" for why, labs in by_why.items()]


# summarize()'s `skew` and `launch_skew`: spreads over collective instances, not durations
SKEW_LABELS = {"collectives": "Collective instances", "mean_ms": "Mean spread (ms)", "max_ms": "Largest spread (ms)"}


def render_stragglers(ctx: ReportContext) -> str:
    out = ['<p class="note">Who made whom wait (docs/analysis.md): for every collective reached by all its '
           "members, each rank's arrival is when it became ready on the device (GPU: its NCCL kernel's start; "
           "CPU: its launch, not before the group's previous collective); the last one made the others wait. "
           "The doctor's straggler verdict reads the same numbers, leaving out warm-up and profiler steps.</p>"]
    reason = ctx.summary.get("stragglers_reason")
    if reason:
        # nobody was judged: the sentence replaces the tables, whose zeros would read as measured
        out.append(f'<p class="empty" id="stragglers-unjudged">Stragglers, arrival skew and launch skew '
                   f"{html.escape(reason)}.</p>")
        return "\n".join(out)
    if ctx.summary.get("skew"):
        out.append("<h3>Arrival skew</h3>" + tables.scalar_table(ctx.summary["skew"], table_id="skew",
                                                                 labels=SKEW_LABELS))
    rows, which = listed(ctx, ctx.summary.get("stragglers") or [])
    out.append("<h3>Stragglers (worst first)</h3>" + which + tables.records_table(rows, table_id="stragglers-table"))
    d = ctx.diagnosis
    if getattr(d, "verdict", None) == "straggler":
        out.append(f'<p class="note">doctor: {html.escape(d.summary)} (<a href="#doctor">details</a>)</p>')
    if ctx.summary.get("launch_skew"):
        out.append('<h3>Launch skew (host side)</h3><p class="note">When the hosts queued each collective: on '
                   "GPUs the host runs ahead of the device, so this says little about who made whom wait.</p>"
                   + tables.scalar_table(ctx.summary["launch_skew"], table_id="launch-skew", labels=SKEW_LABELS))
    return "\n".join(out)


def render_steps(ctx: ReportContext) -> str | None:
    steps = ctx.summary.get("steps")
    if steps is None:
        return None
    out = []
    bounds = ctx.summary.get("step_boundaries")
    if bounds:
        bounds, which = listed(ctx, bounds)
        run = ctx.summary.get("source") in (None, "run")  # a profiler trace's gaps are its device's idle
        if run:
            note = ("gap: from one step\'s end to the next one's start; start delay: from a step's start to its "
                    "first compute. Neither is inside compute, and after a step-end synchronization (a recorder's, "
                    "a loss read) the device has nothing queued there: "
                    f"&ldquo;{html.escape(tables.humanize('host_pct'))}&rdquo; is their share of the wall time "
                    "(docs/analysis.md). Steps of the profiler window and the step after it (the trace's export) "
                    f"are left out (&ldquo;{html.escape(tables.humanize('excluded_steps'))}&rdquo;): their "
                    "boundary time is the profiler's.")
        else:  # device windows of a profiler trace: the device's idle between them, no start delay
            bounds = [{k: v for k, v in r.items() if k != "start_delay_median_ms"} for r in bounds]
            note = ("gap: between one step's last device work and the next one's first, the time no kernel, "
                    "memcpy or memset ran on the rank's device: it waited for the host to launch the next step "
                    f"(a loss read, data loading). &ldquo;{html.escape(tables.humanize('host_pct'))}&rdquo; is "
                    "its share of the step's period, end to end; the step rows leave it out (docs/analysis.md).")
        title = "Host time at step boundaries" if run else "Device idle at step boundaries (waiting for the host)"
        out.append(f'<h3>{title}</h3><p class="note">{note}</p>'
                   + which + tables.records_table(bounds, table_id="step-boundaries"))
    steps, which = listed(ctx, steps)
    if ctx.at_scale and ctx.window is not None:
        # bounded at scale: the listed ranks' rows of the steps the timeline draws (every step of every rank
        # is in the heatmap above and in report --json); all their steps would grow the page with the run
        lo, hi = ctx.window
        steps = [r for r in steps if lo <= int(r["step"]) < hi]
        which += (f'<p class="note">At scale this table lists {steps_said(lo, hi - 1)}, the steps the timeline '
                  "draws (the heatmap shows every step; <code>--steps A:B</code> draws and lists others).</p>")
    # a column unknown in every row is said once, not a column of dashes: a profiler trace has no host step
    # records (no start delay; no gap either where no two steps have device windows)
    gone = [k for k in ("gap_before_ms", "start_delay_ms") if steps and all(r.get(k) is None for r in steps)]
    if gone:
        steps = [{k: v for k, v in r.items() if k not in gone} for r in steps]
        which += ('<p class="note">' + ("No gap before a step or delay to its first compute: they are measured "
                                        "between a run directory's host step records, which this input does not "
                                        "have." if len(gone) == 2 else
                  "No delay to a step's first compute: a device window starts with the step's first device work."
                  ) + "</p>")
    out.append(which + tables.records_table(steps, table_id="steps-table"))
    return "\n".join(out)


HTA_VIEWS = [  # (key in summary["hta"], heading, note)
    ("kernel_breakdown", "Kernel types", "HTA's get_gpu_kernel_breakdown: time by kernel type, all ranks."),
    ("top_kernels", "Per-kernel breakdown", "HTA's per-kernel frame, costliest first (per rank)."),
    ("idle_time", "GPU idle time by cause", "HTA's get_idle_time_breakdown: host wait (the CPU did not enqueue "
     "work in time), kernel wait (gaps between back-to-back kernels), other."),
    ("queue_length", "Queue length per stream", "HTA's get_queue_length_summary: outstanding CUDA operations."),
    ("launch_delay", "CUDA launch delay", "HTA's get_cuda_kernel_launch_stats: from the launch call's end to "
     "the kernel's start, per rank."),
]


def render_hta_views(ctx: ReportContext) -> str | None:
    hta = ctx.summary.get("hta") or {}
    parts = []
    for key, title, note in HTA_VIEWS:
        v = hta.get(key)
        if not v:
            continue
        if key == "top_kernels":  # the kernels' names as the timeline shows them
            v = [{**r, "name": readable_kernel(str(r["name"]))} if "name" in r else r for r in v]
        which = ""
        # at scale, the ranks every per-rank table lists (HTA's hold every rank); not the per-kernel table,
        # already the costliest kernels over every rank (hta_bridge), which a rank filter would empty
        if _rows_by_rank(v) and key != "top_kernels":
            v, which = listed(ctx, v)
        body = (tables.records_table(v["kernel_types"], table_id="hta-kernel-types") if key == "kernel_breakdown"
                else tables.records_table(v, table_id=f"hta-{key}"))
        parts.append(f'<h3>{html.escape(title)}</h3><p class="note">{html.escape(note)}</p>{which}{body}')
    return "\n".join(parts) if parts else None


def _rows_by_rank(v) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], dict) and "rank" in v[0]


# HTA's results keyed by rank (a mapping of rank → value, or of rank → row): shown as tables with a rank
# column, so the value's key names its header and unit ("Idle time (%)"), not the rank ("0").
HTA_BY_RANK = {"hta_comm_overlap_pct_by_rank": "hta_comm_overlap_pct_from_hta", "temporal_breakdown": None}


def _by_rank_rows(by_rank: dict, column: str | None) -> list[dict]:
    """{rank: value} as rows {"rank", column: value}; {rank: {...}} as rows {"rank", ...}."""
    def rank(r):
        return int(r) if str(r).isdigit() else r
    return [{"rank": rank(r), **(v if isinstance(v, dict) else {column: v})} for r, v in by_rank.items()]


def render_hta(ctx: ReportContext) -> str:
    hta = ctx.summary.get("hta")
    if not hta:
        return '<p class="empty">HTA was not run or produced nothing for this input.</p>'
    shown = {k for k, _, _ in HTA_VIEWS}
    rest = {k: (_by_rank_rows(v, HTA_BY_RANK[k]) if k in HTA_BY_RANK and isinstance(v, dict) and v else v)
            for k, v in hta.items() if k not in shown or k == "kernel_breakdown"}
    which = ""
    for k, v in rest.items():
        if _rows_by_rank(v):  # at scale, the ranks every per-rank table lists
            rest[k], which = listed(ctx, v)
    return which + tables.nested(rest)


def setting(v):
    """A configuration value for the page: a small non-zero float (below 0.1: an Adam eps of 1e-08, a
    learning rate of 0.0036) with 6 significant digits, where the page's 3 decimals would print "<0.001"
    or drop its digits; containers entry by entry; anything else as it is, formatted as every number."""
    if isinstance(v, float) and math.isfinite(v) and 0 < abs(v) < 0.1:
        return f"{v:.6g}"
    if isinstance(v, dict):
        return {k: setting(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [setting(x) for x in v]
    return v


def render_config(ctx: ReportContext) -> str:
    # at scale a run's configuration holds per-rank entries (files, status) by the thousand
    return tables.nested(setting(ctx.trace.config or {}), limit=CONFIG_ITEMS if ctx.at_scale else None)


SECTIONS: list[Section] = [
    Section("summary", "Summary", -20, render_summary, open=True),
    Section("heatmap", "Exposed communication by rank and step", -15, render_heatmap, open=True),
    Section("lateness", "Arrival lateness", -14, render_lateness, open=True),
    Section("top-waiting", "Ranks that made the others wait", -13, render_top_waiting, open=True),
    Section("timeline", "Timeline", -10, render_timeline, open=True),
    Section("doctor", "Diagnosis (commscope doctor)", 0, render_doctor),
    Section("labels", "Collectives by label", 20, render_collectives_by_label),
    Section("stragglers", "Skew and stragglers", 30, render_stragglers),
    Section("steps", "Step breakdown", 40, render_steps),
    Section("layout", "Layout mismatches and SM contention", 45, render_layout),
    Section("hta-views", "Kernels, idle time, queues and launch delay (HTA)", 48, render_hta_views),
    Section("hta", "HTA side by side", 50, render_hta),
    Section("overview", "Run facts and communication overlap by rank", 60, render_overview),
    Section("config", "Run configuration", 90, render_config),
]
