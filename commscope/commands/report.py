"""`commscope report RUN_OR_TRACE_DIR [-o report.html] [--steps A:B] [--json] [--label-map FILE]`.

Loads a run directory or a folder of Kineto traces (with a progress bar), summarizes it, and writes one
self-contained HTML report (default `./<input-name>-report.html`, never inside the input directory) plus a
rich terminal summary; an existing output is replaced only when it is a page commscope wrote
(commscope.util.outputs.check_output; docs/analysis.md, "Output files"); with --json prints only summarize()'s document on stdout. Analyses:
commscope.analyze.summary and .report_context; rendering: reports.page and reports.report_terminal.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commscope.errors import UserError
from commscope.util.jsondoc import print_document
from commscope.util.outputs import check_output, own_page
from commscope.util.text import printable
from commscope.commands._shared import (apply_label_map, default_output, label_map_option, load_with_progress,
                                       output_console, output_file, parse_steps, read_label_map, resolve_steps,
                                       scheduler_option, status, stderr_line)


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        path: Path = typer.Argument(..., help="A commscope run directory or a folder of per-rank Kineto traces."),
        output: Optional[str] = typer.Option(None, "-o", "--output", help="HTML file to write "
                                              "(default ./<input-name>-report.html). An existing file is "
                                              "replaced only if it is a report commscope wrote."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Steps A <= step < B (also A, A:, :B) for the "
                                            "analysis and timeline; default: all steps, timeline a few around the middle."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout and nothing else."),
        hta: bool = typer.Option(True, "--hta/--no-hta", help="Run HTA's analyses beside commscope's (slow on "
                                 "large GPU traces)."),
        scheduler: Optional[str] = scheduler_option(),
        label_map: Optional[str] = label_map_option(),
    ) -> None:
        """Analyze a run or trace folder: HTML report with timeline and tables, terminal summary, or JSON."""
        from commscope.analyze.doctor import diagnose_trace
        from commscope.analyze.summary import summarize

        if as_json and output is not None:  # else -o would be dropped without a word
            raise UserError("--json prints the document on stdout and writes no page: give --json or -o, not both")
        window = parse_steps(steps)
        sizes = read_label_map(label_map)
        out, ops_up_to = None, None
        if not as_json:
            from commscope.analyze.report_context import PAGE_ALL_RANKS

            if output is not None and output.lower().endswith(".gz"):  # export gzips a .gz name; a page is opened as is
                raise UserError(f"-o {printable(output)}: the report is an HTML page a browser opens as it is, "
                                "written uncompressed: name it .html")
            out = output_file(output, "-o/--output", "HTML file") if output is not None else default_output(path)
            ops_up_to = PAGE_ALL_RANKS
            check_output(out, path, own_page)  # before loading: a refused output fails at once
        # The page's layout section reads ops (--json never does): up to PAGE_ALL_RANKS ranks every rank's,
        # parsed in the same pass; above, the representative ranks' only, parsed from their files when it
        # reads them (report_context's Trace.select_ranks).
        trace = load_with_progress(path, quiet=as_json, with_ops=not as_json, scheduler=scheduler,
                                   with_ops_up_to=ops_up_to)
        trace = apply_label_map(trace, sizes)
        window = resolve_steps(trace, window)
        # HTA reads device kernels only: on a CPU trace it is skipped, and saying it takes seconds would mislead
        with status("analyzing" + (" (HTA's analyses take a few seconds)" if hta and len(trace.kernels) else ""),
                    quiet=as_json):
            # at the top of the page and the terminal; judged on the whole run, and labelled so under --steps.
            # One verdict for the document and the page, so both put the same culprit ranks first.
            diagnosis = diagnose_trace(trace, tolerate_bad_files=True, selected=window)
            summary = summarize(trace, steps=window, with_hta=hta, diagnosis=diagnosis)
        if as_json:  # summarize()'s document only (the verdict's culprits in it, not the verdict)
            print_document(summary)
            return
        from commscope.analyze.report_context import report_context
        from reports.page import weight_note, write_report
        from reports.report_terminal import print_doctor_line, print_report_summary

        failed: list[str] = []
        with status("writing the report", quiet=False):
            ctx = report_context(trace, summary, window, diagnosis)
            weights: dict[str, int] = {}
            written = write_report(ctx, out, failed, weights)
        for line in failed:  # the page says it in the section's place; a reader of the terminal is told too
            stderr_line(f"commscope: warning: a section of the page failed, {line} (the rest of the page is whole; "
                        "please report this with the input)")
        heavy = weight_note(ctx, written.stat().st_size, weights)
        if heavy:
            stderr_line(f"commscope: note: {heavy}")
        console = output_console()
        print_doctor_line(diagnosis, console)
        print_report_summary(summary, console)
        console.print(f"report: {printable(out)}", markup=False)
