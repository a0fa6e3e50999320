"""Every analysis result the HTML report draws, gathered in one `ReportContext` for reports/ to render.

`report_context(trace, summary, steps, diagnosis)` runs what the page's sections show beside summarize():
the first screen's highlights and the ranks × steps heatmap (analyze.report_overview), the timeline
window and its bars (analyze.timeline_bars), the layout findings (analyze.layout_report,
grouped like the terminal table; None when the input has no profiled ops or kernels) and, unless the
caller already has one, the doctor's verdict on the loaded frames (analyze.doctor.diagnose).

Why results may be exceptions: the page shows a failing section as an error box in its place and keeps
the rest (reports.page). An analysis that raises is stored as its exception, and its section re-raises
it while rendering, so one broken analysis still costs only its own section.

Invariant: renderers read only this object; nothing here imports reports/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from commscope.analyze.timeline_bars import TimelineBars, select_window, timeline_bars


@dataclass
class ReportContext:
    trace: Any                       # commscope.load.Trace
    summary: dict                    # commscope.analyze.summary.summarize(trace, steps)
    window: tuple[int, int] | None   # steps [lo, hi) drawn in the timeline (None = all)
    diagnosis: Any = None            # commscope.analyze.doctor.Diagnosis, or the exception diagnosing raised
    timeline: TimelineBars | Exception | None = None
    layout: Any = None               # LayoutReport, None (no profiled ops or kernels) or an exception
    layout_groups: pd.DataFrame | None = None  # layout_report.grouped(layout.findings)
    highlights: Any = None           # report_overview.Highlights, or the exception it raised
    heatmap: Any = None              # report_overview.Heatmap, None (no steps) or the exception it raised


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
    of a long run, else all), `diagnosis`: the caller's doctor verdict (None: diagnose the frames),
    `with_layout=False` leaves the layout section out (its analysis is the slowest on large traces)."""
    from commscope.analyze.doctor import diagnose

    window = select_window(trace, steps)
    if diagnosis is None:
        diagnosis = _attempt(diagnose, trace)
    layout = _attempt(_layout, trace) if with_layout else (None, None)
    layout, groups = (layout, None) if isinstance(layout, Exception) else layout
    from commscope.analyze.report_overview import heatmap, highlights

    bars = _attempt(timeline_bars, trace, window)
    return ReportContext(trace=trace, summary=summary, window=window, diagnosis=diagnosis, timeline=bars,
                         layout=layout, layout_groups=groups, highlights=_attempt(highlights, summary, diagnosis),
                         heatmap=_attempt(heatmap, summary, trace, bars))
