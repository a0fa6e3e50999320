"""The report's first section: `commscope doctor`'s verdict (ok / crash / hang / desync / straggler).

Renders `ctx.diagnosis` (a `commscope.analyze.doctor.Diagnosis`: the report command's, made with the run's
watchdog/inflight reports, or report_context's verdict on the loaded frames alone). A diagnosis that
failed is shown in place by the page, like any failing section.
"""
from __future__ import annotations

import html

from reports import tables


def render_doctor(ctx) -> str | None:
    d = ctx.diagnosis
    if isinstance(d, Exception):
        raise d
    colour = "#2a7a2a" if d.verdict == "ok" else "#b00020"
    out = [f'<p><b style="color:{colour}">{html.escape(d.verdict.upper())}</b> {html.escape(d.summary)}</p>']
    if d.evidence:
        out.append(tables.records_table(d.evidence))
    return "\n".join(out)
