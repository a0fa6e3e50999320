"""The report's first section: `commscope doctor`'s verdict (ok / crash / hang / desync / straggler).

Renders `ctx.extras["doctor"]` (a `commscope.analyze.doctor.Diagnosis` the report command computed with the
run's watchdog/inflight reports); without it, diagnoses the loaded frames alone. Never raises: a report
must still be written for a run whose fault files cannot be read.
"""
from __future__ import annotations

import html

from reports import tables


def render_doctor(ctx) -> str | None:
    d = ctx.extras.get("doctor")
    if d is None:
        try:
            from commscope.analyze.doctor import diagnose

            d = diagnose(ctx.trace)
        except Exception:  # noqa: BLE001 - the rest of the report is still worth writing
            return None
    colour = "#2a7a2a" if d.verdict == "ok" else "#b00020"
    out = [f'<p><b style="color:{colour}">{html.escape(d.verdict.upper())}</b> {html.escape(d.summary)}</p>']
    if d.evidence:
        cols = list(dict.fromkeys(k for e in d.evidence for k in e))
        out.append(tables.records_table([{k: e.get(k) for k in cols} for e in d.evidence], cols))
    return "\n".join(out)
