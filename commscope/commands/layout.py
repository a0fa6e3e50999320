"""`commscope layout RUN_OR_TRACES [--json]`: layout-mismatch and SM-contention findings.

The table groups identical findings (same op, shapes, strides, place) of all ranks and steps into one row
with a count and summed time; `--json` prints every execution, as docs/layout.md describes. Analysis is
`commscope.analyze.layout_report.layout_report`; this module only loads and renders.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from commscope.analyze.layout_report import grouped, short_kernel
from commscope.errors import UserError


def _fmt(v, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:,.{digits}f}"


def render(report, console) -> None:
    from rich.table import Table

    f = grouped(report.findings)
    t = Table(title=f"Layout mismatches ({len(report.findings)} op executions)", show_lines=False)
    for col in ("op", "shapes", "strides", "kernel", "n", "time µs", "GB/s", "% peak", "saving µs", "where",
                "conf."):
        t.add_column(col, overflow="fold")
    for _, r in f.iterrows():
        dims = [d for d in (r["dims"] or []) if d]
        strides = [s for s in (r["strides"] or []) if s] if isinstance(r["strides"], list) else None
        t.add_row(str(r["op"]).removeprefix("aten::"), " ".join("×".join(map(str, d)) for d in dims),
                  " ".join("(" + ",".join(map(str, x)) + ")" for x in strides) if strides else "—",
                  short_kernel(r["kernel"]), str(r["count"]), _fmt(r["duration_us"]), _fmt(r["achieved_gbps"]),
                  _fmt(r["pct_of_peak"]), _fmt(r["est_saving_us"]),
                  str(r["where"]) + (" [deliberate]" if r["deliberate"] else ""), str(r["confidence"]))
    console.print(t if len(f) else "[green]No layout mismatches found.[/green]")
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


def register(app: typer.Typer) -> None:
    @app.command("layout")
    def layout_cmd(
        path: Path = typer.Argument(..., help="Run directory or folder of Kineto traces."),
        as_json: bool = typer.Option(False, "--json", help="Print every finding as JSON on stdout."),
        peak_gbps: Optional[float] = typer.Option(None, "--peak-gbps",
                                                  help="Copy bandwidth to compare against (read+write GB/s)."),
        min_numel: int = typer.Option(4096, "--min-numel", help="Ignore tensors with fewer elements."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Steps A:B (A <= step < B)."),
    ) -> None:
        """Elementwise ops slowed by a layout mismatch, and collectives slowed by SM-filling kernels."""
        from rich.console import Console

        from commscope.analyze.layout_report import layout_report
        from commscope.commands._shared import load_with_progress, parse_steps, resolve_steps

        if peak_gbps is not None and peak_gbps <= 0:
            raise UserError(f"--peak-gbps must be positive, got {peak_gbps}")
        if min_numel < 1:
            raise UserError(f"--min-numel must be at least 1, got {min_numel}")
        trace = load_with_progress(path, quiet=as_json, with_ops=True)  # layout always reads ops
        trace = trace.select_steps(resolve_steps(trace, parse_steps(steps)))
        if trace.ops.empty and trace.kernels.empty:
            raise UserError(f"{path} has no profiled ops or kernels: record with the profiler "
                            "(commscope run --profile A:B, or torch.profiler with record_shapes=True)")
        report = layout_report(trace, peak_gbps=peak_gbps, min_numel=min_numel)
        if as_json:
            typer.echo(json.dumps(report.to_json(), indent=1, default=str))
            return
        render(report, Console())
