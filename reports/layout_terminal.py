"""`commscope layout`'s terminal output: the grouped layout-mismatch table and the SM-contention table.

Renders a `commscope.analyze.layout_report.LayoutReport` and its grouped findings (same op, shapes,
strides, place → one row with a count and summed time), as the command computed them.
"""
from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from commscope.analyze.layout_report import short_kernel


def _fmt(v, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:,.{digits}f}"


def print_layout_findings(report, groups: pd.DataFrame, console: Console) -> None:
    """`groups`: layout_report.grouped(report.findings), one row per identical finding."""
    t = Table(title=f"Layout mismatches ({len(report.findings)} op executions)", show_lines=False)
    for col in ("op", "shapes", "strides", "kernel", "n", "time µs", "GB/s", "% peak", "saving µs", "where",
                "conf."):
        t.add_column(col, overflow="fold")
    for _, r in groups.iterrows():
        dims = [d for d in (r["dims"] or []) if d]
        strides = [s for s in (r["strides"] or []) if s] if isinstance(r["strides"], list) else None
        t.add_row(str(r["op"]).removeprefix("aten::"), " ".join("×".join(map(str, d)) for d in dims),
                  " ".join("(" + ",".join(map(str, x)) + ")" for x in strides) if strides else "—",
                  short_kernel(r["kernel"]), str(r["count"]), _fmt(r["duration_us"]), _fmt(r["achieved_gbps"]),
                  _fmt(r["pct_of_peak"]), _fmt(r["est_saving_us"]),
                  str(r["where"]) + (" [deliberate]" if r["deliberate"] else ""), str(r["confidence"]))
    console.print(t if len(groups) else "[green]No layout mismatches found.[/green]")
    c = report.contention
    if len(c):
        ct = Table(title="SM contention: collectives inflated by an SM-filling kernel on another stream")
        for col in ("rank", "step", "collective", "bytes", "µs", "alone µs", "×", "overlap µs", "attrib. µs",
                    "kernel", "blocks / co-resident"):
            ct.add_column(col, overflow="fold")
        for _, r in c.iterrows():
            ct.add_row(str(r["rank"]), str(r["step"]), f"{r['label']} ({r['op']})", _fmt(r["bytes"], 0),
                       _fmt(r["duration_us"]), _fmt(r["alone_us"]), _fmt(r["inflation"], 2), _fmt(r["overlap_us"]),
                       _fmt(r["attributable_us"]), short_kernel(r["kernel"]),
                       f"{r['kernel_blocks']} / {r['capacity_blocks']}")
        console.print(ct)
    else:
        console.print("No SM contention found" + (" (no GPU kernels in this input)." if report.device is None
                                                  else "."))
