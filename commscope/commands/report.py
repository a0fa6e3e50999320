"""`commscope report RUN_OR_TRACE_DIR [-o report.html] [--steps A:B] [--json]`.

Loads a run directory or a folder of Kineto traces (with a progress bar), summarizes it, and writes one
self-contained HTML report (default `./<input-name>-report.html`, never inside the input directory) plus a
rich terminal summary; with --json prints only summarize()'s document on stdout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commscope.errors import UserError


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """'A:B' → (A, B) meaning steps A ≤ step < B (Python slice convention, as Trace.select_steps);
    'A' → (A, A+1); 'A:' / ':B' leave that end open (None)."""
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        a = int(lo) if lo.strip() else None
        b = (int(hi) if hi.strip() else None) if sep else (a + 1 if a is not None else None)
    except ValueError:
        raise UserError(f"--steps must look like A:B, A, A: or :B with integer steps, got {text!r}") from None
    if a is not None and b is not None and b <= a:
        raise UserError(f"--steps {text}: selects no step (A:B means A <= step < B)")
    return (a, b)


def resolve_steps(trace, window: tuple[int | None, int | None] | None) -> tuple[int, int] | None:
    """Close open ends of --steps against the steps present; refuse a range that selects none of them."""
    if window is None:
        return None
    known = sorted(int(s) for s in trace.steps["step"].unique() if s >= 0) if len(trace.steps) else []
    if not known:
        raise UserError("--steps given but the input has no step markers (no step records / ProfilerStep ranges)")
    lo = window[0] if window[0] is not None else known[0]
    hi = window[1] if window[1] is not None else known[-1] + 1
    if not any(lo <= k < hi for k in known):
        raise UserError(f"--steps {lo}:{hi} selects none of the steps present ({known[0]}…{known[-1]})")
    return (lo, hi)


def default_output(src: Path) -> Path:
    """./<input-name>-report.html in the current directory (a single trace file: its name without .json.gz)."""
    name = src.resolve().name.removesuffix(".gz").removesuffix(".json") or "commscope"
    return Path.cwd() / f"{name}-report.html"


def check_output(out: Path, src: Path) -> None:
    """Refuse outputs inside the input directory (commscope never writes where it reads)."""
    s, o = src.resolve(), out.resolve()
    if s.is_dir() and (o.parent == s or s in o.parents):
        raise UserError(f"refusing to write {out} inside the input directory {src}; pass -o elsewhere")
    if not o.parent.is_dir():
        raise UserError(f"output directory {o.parent} does not exist")


def load_with_progress(path: Path, quiet: bool, with_ops: bool = False):
    """load_path with a rich progress bar on stderr (quiet: no bar, e.g. for --json in scripts)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from commscope.load import load_path

    if not path.exists():
        raise UserError(f"{path} does not exist")
    console = Console(stderr=True)
    if quiet or not console.is_terminal:  # no bar (and no stray blank line) when stderr is a file or pipe
        return load_path(path, with_ops=with_ops)
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(f"loading {path.name}", total=None)

        def progress(done: int, total: int, what: str = "") -> None:
            bar.update(task, completed=done, total=total, description=f"loading {what or path.name}")

        return load_path(path, progress=progress, with_ops=with_ops)


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        path: Path = typer.Argument(..., help="A commscope run directory or a folder of per-rank Kineto traces."),
        output: Optional[Path] = typer.Option(None, "-o", "--output", help="HTML file to write "
                                              "(default ./<input-name>-report.html)."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Steps A <= step < B (also A, A:, :B) for the "
                                            "analysis and timeline; default: all steps, timeline a few around the middle."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout and nothing else."),
        hta: bool = typer.Option(True, "--hta/--no-hta", help="Run HTA's analyses beside commscope's (slow on "
                                 "large GPU traces)."),
    ) -> None:
        """Analyze a run or trace folder: HTML report with timeline and tables, terminal summary, or JSON."""
        import orjson

        from commscope.analyze.summary import summarize

        window = parse_steps(steps)
        out = None
        if not as_json:
            out = output or default_output(path)
            check_output(out, path)
        # the page's layout section reads ops: parse them in the same pass (--json never needs them)
        trace = load_with_progress(path, quiet=as_json, with_ops=not as_json)
        window = resolve_steps(trace, window)
        summary = summarize(trace, steps=window, with_hta=hta)
        if as_json:  # summarize()'s document only (no doctor verdict)
            typer.echo(orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
                                    | orjson.OPT_INDENT_2).decode())
            return
        from commscope.analyze.doctor import diagnose_trace

        diagnosis = diagnose_trace(trace, tolerate_bad_files=True)  # at the top of the page and the terminal
        from rich.console import Console

        from reports.page import write_report
        from reports.sections import ReportContext
        from reports.terminal import print_summary
        from reports.timeline import select_window

        ctx = ReportContext(trace=trace, summary=summary, window=select_window(trace, window),
                            extras={"doctor": diagnosis})
        write_report(ctx, out)
        console = Console()
        if not console.is_terminal:  # piped/logged output: rich's 80-column default would cut label names
            console = Console(width=140)
        from rich.markup import escape

        console.print(f"[bold]doctor:[/] {escape(diagnosis.summary)}", highlight=False)
        print_summary(summary, console)
        console.print(f"report: {out}")
