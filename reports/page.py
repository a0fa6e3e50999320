"""Assemble the self-contained HTML report from the sections in `reports.sections.SECTIONS`.

Self-contained means it opens offline: plotly.js is embedded once in <head> (no CDN), figures are
rendered with include_plotlyjs=False, CSS is inline, and nothing references http(s) resources.
A section whose renderer fails is replaced by a one-line error box so one broken analysis does not
cost the whole report.
"""
from __future__ import annotations

import html
from pathlib import Path

from commscope.analyze.report_context import ReportContext
from reports.sections import SECTIONS

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0 24px 40px;color:#222}
h1{margin:16px 0 4px} nav{margin:0 0 12px} nav a{margin-right:14px}
section{margin-top:28px} table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left} th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums} .note{color:#555;font-size:13px}
.empty{color:#888} .error{background:#fee;border:1px solid #d62728;padding:6px}
"""


def render_html(ctx: ReportContext) -> str:
    """The whole page as a string."""
    from plotly.offline import get_plotlyjs

    title = f"commscope report — {Path(str(ctx.trace.path)).name}"
    parts, nav = [], []
    for sec in sorted(SECTIONS, key=lambda s: s.order):
        try:
            body = sec.render(ctx)
        except Exception as e:  # a failing section is reported in place, the rest of the page stays useful
            body = f'<p class="error">{html.escape(sec.title)} failed: {html.escape(type(e).__name__)}: {html.escape(str(e))}</p>'
        if body is None:
            continue
        nav.append(f'<a href="#{sec.id}">{html.escape(sec.title)}</a>')
        parts.append(f'<section id="{sec.id}"><h2>{html.escape(sec.title)}</h2>\n{body}\n</section>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>\n<body>"
            f"<h1>{html.escape(title)}</h1><nav>{''.join(nav)}</nav>\n" + "\n".join(parts) + "\n</body></html>\n")


def write_report(ctx: ReportContext, out: str | Path) -> Path:
    out = Path(out)
    out.write_text(render_html(ctx), encoding="utf-8")
    return out
