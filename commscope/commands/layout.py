"""`commscope layout RUN_OR_TRACES [--json]`: layout-mismatch and SM-contention findings.

The table groups identical findings (same op, shapes, strides, place) of all ranks and steps into one row
with a count and summed time; `--json` prints every execution, as docs/layout.md describes. Analysis is
`commscope.analyze.layout_report`; tables: reports.layout_terminal.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commscope.commands._shared import label_map_option, require_finite, scheduler_option
from commscope.errors import UserError
from commscope.util.jsondoc import print_document


def register(app: typer.Typer) -> None:
    @app.command("layout")
    def layout_cmd(
        path: Path = typer.Argument(..., help="Run directory or folder of Kineto traces."),
        as_json: bool = typer.Option(False, "--json", help="Print every finding as JSON on stdout."),
        peak_gbps: Optional[float] = typer.Option(None, "--peak-gbps",
                                                  help="Copy bandwidth to compare against (read+write GB/s)."),
        min_numel: int = typer.Option(4096, "--min-numel", help="Ignore tensors with fewer elements."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Steps A:B (A <= step < B)."),
        label_map: Optional[str] = label_map_option(),
        scheduler: Optional[str] = scheduler_option(),
    ) -> None:
        """Elementwise ops slowed by a layout mismatch, and collectives slowed by SM-filling kernels."""
        from commscope.analyze.layout_report import grouped, layout_report
        from commscope.commands._shared import (apply_label_map, load_with_progress, output_console, parse_steps,
                                               read_label_map, resolve_steps)

        require_finite(peak_gbps, "--peak-gbps")
        if peak_gbps is not None and peak_gbps <= 0:
            raise UserError(f"--peak-gbps must be positive, got {peak_gbps}")
        if min_numel < 1:
            raise UserError(f"--min-numel must be at least 1, got {min_numel}")
        sizes = read_label_map(label_map)
        trace = apply_label_map(load_with_progress(path, quiet=as_json, with_ops=True, scheduler=scheduler), sizes)  # layout reads ops
        profiled = not (trace.ops.empty and trace.kernels.empty)
        trace = trace.select_steps(resolve_steps(trace, parse_steps(steps)))
        # A run directory without profiler traces (or none in the selected steps) is read like a Kineto trace
        # without shapes or kernels: the report is empty and its note says why (exit 0, so scripts need not
        # tell the two apart).
        report = layout_report(trace, peak_gbps=peak_gbps, min_numel=min_numel, profiled=profiled)
        if as_json:
            print_document(report.to_json())
            return
        from reports.layout_terminal import print_layout_findings

        console = output_console()
        print_layout_findings(report, grouped(report.findings), console)
        for note in report.notes:
            console.print(f"note: {note}", markup=False)
        from commscope.analyze.problems import loading_problems

        problems = loading_problems(trace)
        if problems:  # what the loader could not read, as report, doctor and export say it
            from reports.report_terminal import print_outcome_and_problems

            print_outcome_and_problems([], problems, console)
