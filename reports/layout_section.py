"""The report's "Layout and SM contention" section (`commscope layout` in the HTML report).

Renders `ctx.layout` (commscope.analyze.layout_report.LayoutReport) with its findings grouped like the
terminal table (`ctx.layout_groups`: same op, shapes, strides, place → one row with a count).
Returns None (section left out) when the input has no profiled ops or kernels (`ctx.layout` is None).
"""
from __future__ import annotations

import html

from reports import tables

FINDING_COLUMNS = ["kind", "op", "shapes", "strides", "kernel", "count", "duration_us", "achieved_gbps", "pct_of_peak",
                   "est_saving_us", "where", "confidence", "deliberate"]
CONTENTION_COLUMNS = ["rank", "step", "label", "op", "bytes", "duration_us", "alone_us", "inflation", "overlap_us",
                      "attributable_us", "evidence", "kernel", "kernel_blocks", "capacity_blocks"]
OUTSIDE_STEPS = "outside every step"  # the analysis' step −1: no step of the trace holds the collective
NOT_SEPARABLE = "not separable"
CONTENTION_NOTE = (
    '<p class="note">Collectives overlapped by a compute kernel on another stream whose grid fills every SM '
    "(commscope.analyze.contention, docs/analysis.md). Step: the step that holds the collective, "
    f"&ldquo;{OUTSIDE_STEPS}&rdquo; where none of the trace's steps does (it ran before, between or after "
    "them). Duration: the collective's kernel; alone: the median of its runs without such a kernel (the "
    "baseline); inflation: duration ÷ alone; overlap: the time the kernel overlaps it; attributable: the "
    "extra time charged to the kernel, min(duration − alone, overlap), only where the evidence separates it "
    f"from waiting for peers, &ldquo;{NOT_SEPARABLE}&rdquo; where it cannot (evidence says why). Kernel "
    "blocks: the overlapping kernel's grid; capacity blocks: how many blocks the device holds at once.</p>")


def contention_row(r, short_kernel) -> dict:
    """One row of the SM contention table, its step and unknown attribution in words."""
    row = {k: r.get(k) for k in CONTENTION_COLUMNS}
    row["kernel"] = short_kernel(r["kernel"])
    step = r.get("step")
    if step is not None and not (isinstance(step, float) and step != step) and int(step) < 0:
        row["step"] = OUTSIDE_STEPS
    if not bool(r.get("separable", True)):
        row["attributable_us"] = NOT_SEPARABLE
    row["evidence"] = str(r.get("evidence") or "").removeprefix("not separable: ") or None
    return row


def device_text(name: str | None, trace) -> str:
    """The device the findings were judged on: its model, else what the trace shows it to be (a GPU trace
    has device kernels or a CUDA device without deviceProperties naming the model)."""
    if name:
        return str(name)
    kernels = getattr(trace, "kernels", None)
    gpu = (kernels is not None and len(kernels) > 0) or str(getattr(trace, "device", "")).lower() == "cuda"
    return "GPU (model unknown)" if gpu else "CPU"


def render_layout(ctx) -> str | None:
    from commscope.analyze.layout import SLOWDOWN_FLAG
    from commscope.analyze.layout_report import short_kernel

    rep = ctx.layout
    if rep is None:
        return None
    if isinstance(rep, Exception):
        raise rep
    rows = []
    for _, r in ctx.layout_groups.iterrows():
        rows.append({"kind": r.get("kind"), "op": r["op"], "shapes": " ".join(str(d) for d in r["dims"] if d),
                     "strides": " ".join(str(s) for s in r["strides"] if s) if isinstance(r["strides"], list) else None,
                     "kernel": short_kernel(r["kernel"]), "count": int(r["count"]), "duration_us": r["duration_us"],
                     "achieved_gbps": r["achieved_gbps"], "pct_of_peak": r["pct_of_peak"],
                     "est_saving_us": r["est_saving_us"], "where": r["where"], "confidence": r["confidence"],
                     "deliberate": bool(r["deliberate"])})
    crow = [contention_row(r, short_kernel) for _, r in rep.contention.iterrows()]
    note = ('<p class="note">Elementwise/copy ops whose operands are laid out in different stride orders '
            '(kind "stride order"), that read an operand broadcast on PyTorch\'s generic CUDA kernel ("broadcast"), '
            'or whose kernel alone shows the generic path ("kernel evidence"); times summed over ranks and steps, '
            'saving = time − bytes / peak. '
            f'Device: {html.escape(device_text(rep.device, ctx.trace))}. See docs/layout.md.</p>')
    if len(rep.unflagged):
        note += (f'<p class="note">Mismatched layout, no measured cost: {len(rep.unflagged)} op execution(s) with '
                 f"a stride-order or broadcast mismatch ran less than {SLOWDOWN_FLAG}× slower than their reference, so are "
                 "not findings (<code>commscope layout --json</code>: <code>unflagged</code>).</p>")
    # what the input lacks for these checks, and what they could not judge (the terminal's note: lines)
    note += "".join(f'<p class="note">{html.escape(n)}</p>' for n in rep.notes)
    if ctx.layout_ranks is not None:
        note += (f'<p class="note">{len(ctx.trace.ranks)} ranks: findings of the representative ranks '
                 f'{html.escape(", ".join(map(str, ctx.layout_ranks)))} only (a layout mismatch comes from the code, '
                 "the same on every rank); <code>commscope layout</code> reads every rank.</p>")
    return (note + tables.records_table(rows, FINDING_COLUMNS, table_id="layout-findings")
            + "<h3>SM contention</h3>" + (CONTENTION_NOTE if crow else "")
            + tables.records_table(crow, CONTENTION_COLUMNS, table_id="layout-contention"))
