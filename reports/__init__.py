"""HTML and terminal reports over a loaded commscope `Trace` and its summarize() document.

Modules: `timeline` (the per-rank overlap figure), `tables` (HTML tables from plain data), `sections`
(the list of section renderers; add a section there), `page` (self-contained page assembly),
`terminal` (rich summary). Reports only render: analysis lives in commscope.analyze.
"""
from reports.page import render_html, write_report
from reports.sections import SECTIONS, ReportContext, Section

__all__ = ["render_html", "write_report", "SECTIONS", "ReportContext", "Section"]
