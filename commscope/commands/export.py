"""`commscope export RUN_OR_TRACE_DIR --perfetto out.json`: all ranks merged into one Perfetto trace.

A thin wrapper: load (commscope.load), find the collectives a hang left in flight and each rank's last
sign of life (commscope.analyze.left_in_flight), convert and write (reports.perfetto), print the path. What
the loader could not read (a corrupt or missing rank, an empty trace) is printed on stderr as `doctor`
prints it (`problem while loading: …`, reports.report_terminal.print_outcome_and_problems) and kept in the trace's
otherData.problems: a trace that lacks a rank says so, though it still exits 0 like `report`; the ranks
that did not complete (`the run reports: …`, commscope.analyze.problems.run_reports) likewise, in
otherData.run_reports. The output
is checked before loading (commscope.util.outputs.check_output): an existing file is replaced only when it
is a trace commscope wrote (docs/analysis.md, "Output files"). Running out of memory while loading or
writing is one error line (exit 2) and leaves no partial output.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commscope.commands._shared import label_map_option, output_console, scheduler_option
from commscope.errors import UserError

PIPED_PROBLEM_WIDTH = 4000  # wide enough that no problem line (a path and a reason) wraps in a log


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        path: Path = typer.Argument(..., help="A commscope run directory or a folder of per-rank Kineto traces."),
        perfetto: Optional[str] = typer.Option(None, "--perfetto", help="Write a Chrome-JSON trace for Perfetto "
                                                "here (gzip when it ends in .gz). An existing file is replaced only "
                                                "if it is a trace commscope wrote."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Only steps A <= step < B (also A, A:, :B)."),
        label_map: Optional[str] = label_map_option(),
        scheduler: Optional[str] = scheduler_option(),
    ) -> None:
        """Export a run or trace folder to other viewers (currently: Perfetto / chrome://tracing JSON)."""
        from commscope.util.outputs import check_output, own_trace
        from commscope.util.text import printable
        from commscope.commands._shared import (apply_label_map, load_with_progress, output_file, parse_steps,
                                               read_label_map, resolve_steps)
        from commscope.analyze.exposure import spanless
        from commscope.analyze.left_in_flight import left_in_flight
        from commscope.analyze.problems import loading_problems, run_reports
        from commscope.analyze.timeline_inflight import steps_begun
        from reports.perfetto import write_perfetto

        if perfetto is None:
            raise UserError("choose an export format: --perfetto OUT.json")
        perfetto = output_file(perfetto, "--perfetto", "file (e.g. OUT.json)")
        check_output(perfetto, path, own_trace)
        window = parse_steps(steps)
        sizes = read_label_map(label_map)
        try:
            trace = apply_label_map(load_with_progress(path, quiet=False, scheduler=scheduler), sizes)
            trace = trace.select_steps(resolve_steps(trace, window))
        except MemoryError:
            raise UserError(f"out of memory while loading {printable(path)}; free memory or raise the "
                            "process's memory limit, or export fewer ranks' traces") from None
        undrawn = spanless(trace.collectives)
        try:
            reports, problems = run_reports(trace), loading_problems(trace)  # grouped by rank, as report's
            write_perfetto(trace, perfetto, left_in_flight(trace), reports,  # removes its temporary file on any failure
                           begun=steps_begun(trace), not_drawn=undrawn, problems=problems)
        except MemoryError:
            raise UserError(f"out of memory while writing the Perfetto trace {printable(perfetto)} (nothing "
                            "written); free memory, or export fewer steps (--steps) or ranks") from None
        if problems or reports:  # stderr: stdout stays the one line naming the trace
            from reports.report_terminal import print_outcome_and_problems

            # piped, one unwrapped line per problem, as a log is searched
            print_outcome_and_problems(reports, problems,
                                       output_console(piped_width=PIPED_PROBLEM_WIDTH, stderr=True),
                                       where="all in the trace's otherData (run_reports, problems)" if reports
                                       else "all in the trace's otherData.problems")
        if undrawn:  # stderr, beside the problems: the trace would otherwise look as if it had no communication
            many = undrawn != 1
            typer.echo(f"note: {undrawn:,} collective{'s' if many else ''} of the input {'have' if many else 'has'} no "
                       "execution start or end (e.g. a host-side trace of a GPU job): not drawn (otherData."
                       "collectives_not_drawn); `commscope report` counts them", err=True)
        typer.echo(f"perfetto trace: {printable(perfetto)} (open in https://ui.perfetto.dev or chrome://tracing)")
