"""The report's first section: `commscope doctor`'s verdict (ok / crash / hang / desync / straggler /
interrupted / insufficient).

Renders `ctx.diagnosis` (a `commscope.analyze.diagnosis.Diagnosis`: the report command's, made with the run's
watchdog/inflight reports, or report_context's verdict on the loaded frames alone). For a straggler: the
waiting per judged step, the collective instances it is based on, and a link to the timeline when the
steps are in the page's timeline window (else the `--steps` that draws them); when the loader met problems,
a note pointing at them (the page lists them under the headline and in Run facts). A diagnosis that failed
is shown in place by the page, like any failing section.
"""
from __future__ import annotations

import html
import shlex

from commscope.analyze.diagnosis import evidence_tables
from commscope.util.text import steps_said
from reports import tables

COLOURS = {"ok": "#2a7a2a", "insufficient": "#8a6d00", "interrupted": "#8a6d00"}
INSTANCE_COLUMNS = ["step", "sequence", "label", "op", "last_rank", "waiting_caused_ms", "mean_wait_ms",
                    "arrival_skew_ms", "launch_skew_ms", "launched_last_rank"]


def _timeline_link(ctx, steps: list[int]) -> str:
    lo, hi = min(steps), max(steps) + 1
    if ctx.window is None or (ctx.window[0] <= lo and hi <= ctx.window[1]):
        # #step=N zooms the timeline to the step (report.js), where #timeline would only scroll to it
        return f'<a href="#step={lo}">the timeline</a> ({steps_said(lo, hi - 1)})'
    return (f"the timeline of <code>commscope report {html.escape(shlex.quote(str(ctx.trace.path)))} --steps {lo}:{hi}</code> "
            f"(this page draws {steps_said(ctx.window[0], ctx.window[1] - 1)})")


CULPRIT_ROWS_AT_SCALE = 16  # a hang's culprits may be hundreds of ranks: the first ones, then a count


def _listed_evidence(ctx, rows: list[dict], culprits: list[int]) -> tuple[list[dict], str]:
    """At scale, an evidence table's rows of the culprits (the first CULPRIT_ROWS_AT_SCALE) and of the ranks
    the page's other per-rank tables list, with a note; every row below the threshold. A desync's evidence
    holds a launch of every rank (1024 rows, 190 kB of a 1024-rank page), most alike."""
    if getattr(ctx, "listed_ranks", None) is None or not rows or "rank" not in rows[0]:
        return rows, ""
    shown, _ = tables.listed(ctx, rows, also=culprits[:CULPRIT_ROWS_AT_SCALE])
    if len(shown) == len(rows):
        return rows, ""
    return shown, (f'<p class="note">{len(rows):,} rows, one a rank: this table lists the culprits\' (the first '
                   f"{CULPRIT_ROWS_AT_SCALE}) and the ranks the other tables list; <code>commscope doctor --json"
                   "</code> has every row.</p>")


def _worded(row: dict) -> dict:
    """An evidence row with a rank that finished no step said in words ("none"): its null there is an
    answer, not an unknown ("–"), and never a sentinel step."""
    if "last_finished_step" in row and row["last_finished_step"] is None:
        return {**row, "last_finished_step": "none"}
    return row


def render_doctor(ctx) -> str | None:
    d = ctx.diagnosis
    if isinstance(d, Exception):
        raise d
    colour = COLOURS.get(d.verdict, "#b00020")
    line = tables.verdict_line(d.verdict, d.summary).replace("<b>", f'<b style="color:{colour}">', 1)
    out = [f"<p>{line}</p>"]
    for other in getattr(d, "also", None) or []:  # a second fault beside the verdict (a straggler beside a desync)
        also = tables.verdict_line(other["verdict"], other["summary"]).replace(
            "<b>", f'<b style="color:{COLOURS.get(other["verdict"], "#b00020")}">', 1)
        out.append(f'<p class="doctor-also">Also: {also}</p>')
    if getattr(d, "injected", None):  # a drill: what was planted, beside what the records say (as the terminal)
        out.append(f'<p class="note" id="doctor-injected">This run was started with <code>--inject '
                   f'{html.escape(", ".join(d.injected))}</code>; not used for the verdict.</p>')
    det = d.details or {}
    problems = getattr(d, "problems", None) or []
    if problems:
        out.append(f'<p class="note">The loader met {len(problems)} problem(s) reading this input (listed under '
                   "Run facts, \"Problems while loading\"); the verdict is only as complete as the records "
                   "it kept.</p>")
    if d.verdict == "straggler":
        steps = sorted({e["step"] for e in d.evidence})
        median = det.get("median_step_ms")
        of = f" ({median:.1f} ms)" if median is not None else ""
        out.append('<p class="note">Waiting caused per judged step; "% of median step" is a share of the run\'s '
                   f"median step{of}, not of the step time beside it (that step's median over the ranks). "
                   f"See it in {_timeline_link(ctx, steps)}: the other ranks' collectives start early and wait "
                   "for the culprit's.</p>")
    if d.evidence:
        groups, origin = evidence_tables([_worded(e) for e in d.evidence])
        if origin is not None:
            out.append('<p class="note">Times (<code>_ms</code>) are ms since the earliest time in this evidence; '
                       "<code>commscope doctor --json</code> gives them as ns on the trace's clock.</p>")
        for i, rows in enumerate(groups):
            rows, which = _listed_evidence(ctx, rows, d.culprit_ranks)
            out.append(which + tables.records_table(rows, table_id="doctor-evidence" + (f"-{i + 1}" if i else "")))
    if d.verdict == "straggler" and det.get("instances"):
        out.append("<h3>Collective instances it is based on</h3><p class=\"note\">launch_skew: when the hosts "
                   "queued it (host side, for reference).</p>" +
                   tables.records_table(det["instances"], INSTANCE_COLUMNS, table_id="doctor-instances"))
    return "\n".join(out)
