"""Every analysis result the HTML report draws, gathered in one `ReportContext` for reports/ to render.

`report_context(trace, summary, steps, diagnosis)` runs what the page's sections show beside summarize():
the first screen's highlights and the ranks × steps heatmap (analyze.report_overview), the timeline
window and its bars (analyze.timeline_bars), the layout findings (analyze.layout_report,
grouped like the terminal table; None when the input has no profiled ops or kernels) and, unless the
caller already has one, the doctor's verdict on the loaded frames and the run's fault evidence
(analyze.doctor.diagnose_trace, as `commscope report` gives it).

At scale (more than PAGE_ALL_RANKS ranks) a page cannot draw or list every rank. The context then also
holds what summarizes the ranks (the distribution of arrival lateness is summarize()'s own), the TOP_WAITING
ranks that made the others wait most (summarize()'s stragglers, from waiting.by_rank), the representative
ranks (summarize()'s, from analyze.representative) with the doctor's culprits first
(representative.culprits_first, as `report --json`'s `representative_ranks_culprits_first` lists them)
whose bars the timeline draws (`drawn`), and the ranks
per-rank tables list (`listed_ranks`: the representative ones and the top waiting ones). `timeline` keeps
every rank's bars: the page carries them compactly so that any rank can be shown on demand. The layout
section then covers the representative ranks (`layout_ranks`; a layout mismatch comes from the code, the
same on every rank): it reads their ops through `Trace.select_ranks`, so a trace loaded without ops parses
those ranks' files only.

Why results may be exceptions: the page shows a failing section as an error box in its place and keeps
the rest (reports.page). An analysis that raises is stored as its exception, and its section re-raises
it while rendering, so one broken analysis still costs only its own section.

Invariant: renderers read only this object; nothing here imports reports/.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from commscope.analyze.diagnosis import Diagnosis
from commscope.analyze.representative import culprits_first
from commscope.analyze.timeline_bars import TimelineBars, select_window, timeline_bars

# Up to this many ranks the page draws every rank's timeline rows and lists every rank in its per-rank
# tables (8 ranks × 2 rows fill a screen); above, it summarizes the ranks. The bound is the page's weight:
# every rank drawn costs ~50 kB of timeline and steps table at 40 steps, so a 16-rank page weighs about
# 1.45 MB, within the 1.5 MB budget of the 2-rank page, where drawing 32 ranks weighs 2.3 MB against 1.0 MB
# of the page that summarizes (tests/unit/test_report_scale.py weighs both sides of the bound).
PAGE_ALL_RANKS = 16
TOP_WAITING = 10  # ranks in the page's table of waiting caused, at scale


@dataclass
class ReportContext:
    trace: Any                       # commscope.load.Trace
    summary: dict                    # commscope.analyze.summary.summarize(trace, steps)
    window: tuple[int, int] | None   # steps [lo, hi) drawn in the timeline (None = all)
    diagnosis: Any = None            # commscope.analyze.diagnosis.Diagnosis, or the exception diagnosing raised
    timeline: TimelineBars | Exception | None = None
    layout: Any = None               # LayoutReport, None (no profiled ops or kernels) or an exception
    layout_groups: pd.DataFrame | None = None  # layout_report.grouped(layout.findings)
    layout_ranks: list | None = None  # the ranks the layout section covers above PAGE_ALL_RANKS (None: all)
    highlights: Any = None           # report_overview.Highlights, or the exception it raised
    heatmap: Any = None              # report_overview.Heatmap, None (no steps) or the exception it raised
    # at scale only (more than PAGE_ALL_RANKS ranks; module docstring)
    at_scale: bool = False
    representative: list[dict] = field(default_factory=list)  # [{"rank", "why"}], representative.culprits_first
    drawn: TimelineBars | None = None  # the representative ranks' bars, which the timeline figure draws
    top_waiting: list[dict] = field(default_factory=list)  # summarize()'s stragglers, the TOP_WAITING first
    listed_ranks: list[int] | None = None  # ranks per-rank tables list (None: every rank)


def fault_step(diagnosis: Any) -> int | None:
    """The step a verdict points at (a hang, crash, desync or straggler's worst step), for the timeline
    window; None for ok, insufficient or interrupted, or a verdict without a step."""
    if not isinstance(diagnosis, Diagnosis) or diagnosis.verdict in ("ok", "insufficient", "interrupted"):
        return None
    return None if diagnosis.step is None or diagnosis.step < 0 else int(diagnosis.step)


def _attempt(fn: Callable, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # shown in place of its section (module docstring)
        return e


def _layout(trace: Any) -> tuple[Any, pd.DataFrame | None]:
    from commscope.analyze.layout_report import grouped, layout_report

    if trace.ops.empty and trace.kernels.empty:
        return None, None
    rep = layout_report(trace)
    return rep, grouped(rep.findings)


def report_context(trace: Any, summary: dict, steps: tuple[int, int] | None = None, diagnosis: Any = None, *,
                   with_layout: bool = True) -> ReportContext:
    """The report's inputs for `trace`; `steps`: the --steps window (None: a few steps around the middle
    of a long run, else all), `diagnosis`: the caller's doctor verdict (None: diagnose the frames and fault evidence),
    `with_layout=False` leaves the layout section out (its analysis is the slowest on large traces)."""
    from commscope.analyze.doctor import diagnose_trace

    if diagnosis is None:
        diagnosis = _attempt(diagnose_trace, trace, tolerate_bad_files=True, selected=steps)
    window = select_window(trace, steps, focus=fault_step(diagnosis))
    layout_ranks = None
    if len(trace.ranks) > PAGE_ALL_RANKS:  # layout comes from code, the same on every rank: a few ranks tell
        layout_ranks = [r["rank"] for r in summary.get("representative_ranks") or []] or [min(trace.ranks)]
    layout = (_attempt(_layout, trace if layout_ranks is None else trace.select_ranks(layout_ranks))
              if with_layout else (None, None))
    layout, groups = (layout, None) if isinstance(layout, Exception) else layout
    from commscope.analyze.report_overview import heatmap, highlights

    bars = _attempt(timeline_bars, trace, window)
    ctx = ReportContext(trace=trace, summary=summary, window=window, diagnosis=diagnosis, timeline=bars,
                        layout=layout, layout_groups=groups, highlights=_attempt(highlights, summary, diagnosis),
                        heatmap=_attempt(heatmap, summary, trace, bars), layout_ranks=layout_ranks)
    if len(trace.ranks) > PAGE_ALL_RANKS:
        _at_scale(ctx)
    return ctx


def _at_scale(ctx: ReportContext) -> None:
    """The summaries of the ranks a page at scale shows instead of every rank (module docstring)."""
    ctx.at_scale = True
    # the ranks the verdict blames come first: the page's point. The same function, given the same verdict,
    # makes summarize()'s `representative_ranks_culprits_first`, so the page and report --json agree.
    reps = culprits_first(ctx.summary.get("representative_ranks") or [], ctx.trace.ranks, ctx.diagnosis)
    ctx.representative = reps
    if isinstance(ctx.timeline, TimelineBars):
        ctx.drawn = ctx.timeline.subset([r["rank"] for r in reps])
    waited = [s for s in ctx.summary.get("stragglers") or [] if (s.get("wait_caused_ms") or 0) > 0]
    ctx.top_waiting = waited[:TOP_WAITING]
    ctx.listed_ranks = list(dict.fromkeys([r["rank"] for r in reps] + [int(s["rank"]) for s in ctx.top_waiting]))
