"""`commscope layout`'s terminal output: the grouped layout-mismatch table and the SM-contention table.

Renders a `commscope.analyze.layout_report.LayoutReport` and its grouped findings (same op, shapes,
strides, place → one row with a count and summed time), as the command computed them. Both tables fit
the console's width, whatever it is: the numbers keep their full width, the op, kernel and collective
names take what is left (cut with "…" only when it is short), and each row's explanation — a finding's
place, a contention's evidence — is never cut: it is the table's last column when every row's fits on
its line, else its own line under the row. Strides, references and the full reasons are in `--json`.

Why the columns are laid out here and not by rich's Table: the explanation line under a row spans the
whole table, and rich's Table has no cell that spans columns; rich still renders every line (Text,
Console width, styles).
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Callable

import pandas as pd
from rich.console import Console
from rich.text import Text

from commscope.analyze.layout import SLOWDOWN_FLAG
from commscope.analyze.layout_report import short_kernel, unflagged_summary

_GAP = 2  # spaces between columns
_INDENT = 1  # before the first column, as rich's tables without an edge
_FULL_KERNEL = 60  # short_kernel's longest form: a kernel column never needs more


@dataclass
class _Column:
    header: str
    justify: str = "left"
    shrink_to: int | None = None  # None: always its full width (numbers); else the narrowest it may get


# A cell: its text, or (for kernel names) a function of the column's width that shortens the name itself,
# since short_kernel reads better at a given width (`ew<128, 4, …>`) than a name cut at that width.
Cell = str | Callable[[int], str]


def _fmt(v, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:,.{digits}f}"


def _gbps(v) -> str:
    """Bandwidth with 3 significant digits (0.0894, 2.17, 28.4), whole numbers from 100 (3,260)."""
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:#.3g}"


def _text(cell: Cell, width: int = _FULL_KERNEL) -> str:
    s = cell(width) if callable(cell) else cell
    return s if len(s) <= width else s[:width - 1] + "…"


def _widths(columns: list[_Column], rows: list[list[Cell]], room: int) -> list[int]:
    """Each column's full width, the shrinkable ones narrowed (widest first) until the line fits `room`
    or none can give more."""
    widths = [max([len(c.header)] + [len(_text(r[i])) for r in rows]) for i, c in enumerate(columns)]
    floor = [w if c.shrink_to is None else min(w, max(c.shrink_to, len(c.header))) for c, w in zip(columns, widths)]
    excess = _INDENT + sum(widths) + _GAP * (len(widths) - 1) - room
    while excess > 0:
        give = [i for i, w in enumerate(widths) if w > floor[i]]
        if not give:
            break
        i = max(give, key=lambda j: widths[j])
        widths[i] -= 1
        excess -= 1
    return widths


def _line(cells: list[str], widths: list[int], columns: list[_Column]) -> str:
    parts = [s.rjust(w) if c.justify == "right" else s.ljust(w) for s, w, c in zip(cells, widths, columns)]
    return (" " * _INDENT + (" " * _GAP).join(parts)).rstrip()


def _print_table(console: Console, title: str, columns: list[_Column], rows: list[list[Cell]],
                 last: _Column, explanations: list[str]) -> None:
    """`rows` under `columns`, and `last` (each row's explanation, never cut): a last column when every
    row's explanation fits there at the console's width, else a line of its own under its row."""
    room = console.width
    full = _widths(columns, rows, 10 ** 9)
    inline = (_INDENT + sum(full) + _GAP * len(full) + max([len(last.header)] + [len(e) for e in explanations])
              <= room)
    widths = full if inline else _widths(columns, rows, room)
    heads = [c.header for c in columns] + ([last.header] if inline else [])
    cols = columns + ([last] if inline else [])
    ws = widths + ([max([len(last.header)] + [len(e) for e in explanations])] if inline else [])
    console.print(Text(title), highlight=False)
    console.print()
    header = _line(heads, ws, cols)
    console.print(Text(header, style="bold"), highlight=False, crop=False)
    console.print(Text(" " * _INDENT + "─" * min(room - _INDENT, len(header) - _INDENT)), highlight=False)
    under = " " * (_INDENT + _GAP)
    for row, why in zip(rows, explanations):
        cells = [_text(cell, w) for cell, w in zip(row, widths)]
        console.print(Text(_line(cells + ([why] if inline else []), ws, cols)), highlight=False, crop=False)
        if not inline:  # wrapped at spaces only when longer than a whole line
            for part in textwrap.wrap(f"{last.header}: {why}", max(room - len(under), 20),
                                      initial_indent=under, subsequent_indent=under + "  "):
                console.print(Text(part, style="dim"), highlight=False, crop=False)


_KIND_SHOWN = {"stride order": "order", "broadcast": "bcast", "kernel evidence": "kernel"}


def _shape(dims) -> str:
    """The shape the op ran over: its largest argument's (by element count), not its first argument's,
    which may be the broadcast one (a (4, 2048, 6, 1) gate times (4, 2048, 6, 128) values)."""
    dims = [d for d in (dims or []) if d]
    return "×".join(map(str, max(dims, key=lambda d: (math.prod(d), len(d))))) if dims else "—"


def _collective(label, op) -> str:
    """`attn (reduce_scatter)`; a label that already names the op (`_reduce_scatter_base`) alone."""
    label, op = str(label), str(op)
    return label if op.replace("_", "") in label.replace("_", "").replace("base", "") else f"{label} ({op})"


def _kernel(name) -> Callable[[int], str]:
    return lambda width: short_kernel(name, width)


def _print_unflagged(summary: tuple[int, dict[str, int], float] | None, console: Console) -> None:
    """One line for the mismatched layouts that ran no slower than their reference (not findings);
    `summary`: layout_report.unflagged_summary."""
    if summary is None:
        return
    count, ops, top, faster = summary
    which = ", ".join(f"{op} ×{n}" for op, n in ops.items())
    doubt = (f"; {faster} of them ran {SLOWDOWN_FLAG}× or more faster than their reference, which says the "
             "reference was one slow measurement, not that the mismatch is free" if faster else "")
    console.print(Text(f"mismatched layout, no measured cost: {count} op execution(s) ({which}), "
                       f"slowdown at most {top:.2f}× against their reference (a finding needs {SLOWDOWN_FLAG}×); "
                       f"not counted (--json: unflagged){doubt}"), highlight=False)


def print_layout_findings(report, groups: pd.DataFrame, console: Console) -> None:
    """`groups`: layout_report.grouped(report.findings), one row per identical finding."""
    if not report.checked:
        pass  # nothing was looked for: the report's note says why
    elif not len(groups):
        console.print(Text("No layout findings." if len(report.unflagged) else "No layout mismatches found.",
                           style="green"))
    else:
        rows, wheres = [], []
        for _, r in groups.iterrows():
            where = str(r["where"]) + (" [deliberate]" if r["deliberate"] else "")
            wheres.append(where if r["confidence"] == "high" else "(low conf.) " + where)
            rows.append([str(r["op"]).removeprefix("aten::"), _KIND_SHOWN.get(r.get("kind"), "—"), _shape(r["dims"]),
                         _kernel(r["kernel"]),
                         str(r["count"]), _fmt(r["duration_us"]), _gbps(r["achieved_gbps"]),
                         _fmt(r.get("slowdown"), 1)])
        kinds = report.findings["kind"].fillna("kernel evidence").value_counts()
        counts = ", ".join(f"{int(kinds[k])} {k}" for k in ("stride order", "broadcast", "kernel evidence") if k in kinds)
        _print_table(console, f"Layout findings ({len(report.findings)} op executions: {counts}; strides and "
                     "references: --json)",
                     [_Column("op", shrink_to=8), _Column("kind"), _Column("shape"), _Column("kernel", shrink_to=12),
                      _Column("n", "right"), _Column("µs", "right"), _Column("GB/s", "right"),
                      _Column("slow×", "right")], rows, _Column("where"), wheres)
        console.print(Text("kind: order = the operands' stride orders differ; bcast = an operand read broadcast, on "
                           "PyTorch's generic CUDA kernel; kernel = the kernel alone shows the generic path"),
                      highlight=False)
    _print_unflagged(unflagged_summary(report.unflagged), console)
    c = report.contention
    if len(c):
        console.print()
        rows, evidence = [], []
        for _, r in c.iterrows():
            rows.append([str(r["rank"]), "—" if int(r["step"]) < 0 else str(r["step"]),
                         _collective(r["label"], r["op"]), _fmt(r["duration_us"]), _fmt(r["alone_us"]),
                         _fmt(r["inflation"], 2), _fmt(r["attributable_us"]) if r["separable"] else "—",
                         _kernel(r["kernel"])])
            evidence.append(str(r["evidence"]).removeprefix("not separable: "))
        _print_table(console, "SM contention: collectives overlapped by an SM-filling kernel (µs; charged only where "
                     "separable from waiting for peers)",
                     [_Column("rank", "right"), _Column("step", "right"), _Column("collective", shrink_to=12),
                      _Column("µs", "right"), _Column("alone", "right"), _Column("×", "right"),
                      _Column("charged", "right"), _Column("kernel", shrink_to=12)], rows, _Column("evidence"),
                     evidence)
        if (c["step"] < 0).any():  # the analysis's step -1
            console.print(Text("step —: outside any recorded step (the collective ran before, between or after "
                               "the steps the trace marks)"), highlight=False)
        console.print()
    elif report.contention_skipped is None:  # else not looked for: the report's note says why, once
        console.print("No SM contention found.")
