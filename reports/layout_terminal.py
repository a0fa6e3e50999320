"""`commscope layout`'s terminal output: the grouped layout-mismatch table and the SM-contention table.

Renders a `commscope.analyze.layout_report.LayoutReport` and its grouped findings (same op, shapes,
strides, place → one row with a count and summed time), as the command computed them. Both tables fit
100 columns with one line per row (short kernel names, cells cut with "…"); strides, references and the
full reasons are in `--json`.
"""
from __future__ import annotations

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from commscope.analyze.layout_report import short_kernel


def _fmt(v, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:,.{digits}f}"


def _table(title: str, columns: list[tuple[str, int | None, str]]) -> Table:
    """One line per row: no wrapping, long cells cut; (header, max width, justify) per column."""
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", expand=True,
              collapse_padding=True)
    for name, width, justify in columns:
        t.add_column(name, no_wrap=True, overflow="ellipsis", width=width, justify=justify,
                     ratio=None if width else 1)
    return t


def _shape(dims) -> str:
    dims = [d for d in (dims or []) if d]
    return "×".join(map(str, max(dims, key=len))) if dims else "—"


def _collective(label, op) -> str:
    """`attn (reduce_scatter)`; a label that already names the op (`_reduce_scatter_base`) alone."""
    label, op = str(label), str(op)
    return label if op.replace("_", "") in label.replace("_", "").replace("base", "") else f"{label} ({op})"


def print_layout_findings(report, groups: pd.DataFrame, console: Console) -> None:
    """`groups`: layout_report.grouped(report.findings), one row per identical finding."""
    t = _table(f"Layout mismatches ({len(report.findings)} op executions; strides and references: --json)",
               [("op", 8, "left"), ("shape", 11, "left"), ("kernel", 17, "left"), ("n", 3, "right"),
                ("µs", 8, "right"), ("GB/s", 5, "right"), ("slow×", 5, "right"), ("where", None, "left")])
    for _, r in groups.iterrows():
        where = str(r["where"]) + (" [deliberate]" if r["deliberate"] else "")
        if r["confidence"] != "high":
            where = "(low conf.) " + where
        t.add_row(str(r["op"]).removeprefix("aten::"), _shape(r["dims"]), short_kernel(r["kernel"], 17),
                  str(r["count"]), _fmt(r["duration_us"]), _fmt(r["achieved_gbps"], 0), _fmt(r.get("slowdown"), 1),
                  where)
    console.print(t if len(groups) else "[green]No layout mismatches found.[/green]")
    c = report.contention
    if len(c):
        ct = _table("SM contention: collectives overlapped by an SM-filling kernel (µs; charged only where "
                    "separable from waiting for peers)",
                    [("rank", 4, "right"), ("step", 4, "right"), ("collective", 20, "left"), ("µs", 6, "right"),
                     ("alone", 6, "right"), ("×", 4, "right"), ("charged", 8, "right"), ("kernel", 12, "left"),
                     ("evidence", None, "left")])
        for _, r in c.iterrows():
            ct.add_row(str(r["rank"]), str(r["step"]), _collective(r["label"], r["op"]), _fmt(r["duration_us"]),
                       _fmt(r["alone_us"]), _fmt(r["inflation"], 2),
                       _fmt(r["attributable_us"]) if r["separable"] else "—", short_kernel(r["kernel"], 12),
                       str(r["evidence"]).removeprefix("not separable: "))
        console.print(ct)
    elif report.contention_skipped is None:  # else not looked for: the report's note says why, once
        console.print("No SM contention found.")
