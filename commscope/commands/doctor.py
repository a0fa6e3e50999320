"""`commscope doctor RUN [--json] [--straggler-ms MS]`: what went wrong in a run, across ranks.

Prints one verdict (ok, crash, hang, desync, straggler, incomplete) with the culprit ranks, label, step,
sequence and the timestamps that show it (commscope.analyze.doctor); `--json` prints the same as one JSON
document on stdout. Exit code 0 whatever the verdict (the verdict is the answer, not an error); 2 for input
that cannot be read.
"""
from __future__ import annotations

from pathlib import Path

import typer

from commscope.analyze.doctor import STRAGGLER_MS


def print_diagnosis(d, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    colour = "green" if d.verdict == "ok" else "red"
    console.print(f"[bold {colour}]{d.verdict}[/]  {escape(d.summary)}", highlight=False)
    if d.evidence:
        keys = list(dict.fromkeys(k for e in d.evidence for k in e))
        t = Table(title="evidence (times: ns on the run's common time axis)", show_lines=False)
        for k in keys:
            t.add_column(k, overflow="fold")
        for e in d.evidence:
            t.add_row(*("" if e.get(k) is None else escape(str(e.get(k))) for k in keys))
        console.print(t)
    if d.second_opinion:
        console.print(escape(f"Flight Recorder: {d.second_opinion.get('verdict')} "
                             f"{d.second_opinion.get('summary', '')}"), highlight=False)
    if d.injected:
        console.print(escape(f"(this run was started with --inject {', '.join(d.injected)}; not used for the "
                             "verdict)"), highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        path: Path = typer.Argument(..., help="A commscope run directory (or a folder of Kineto traces: "
                                    "desync and straggler checks only)."),
        as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON on stdout."),
        straggler_ms: float = typer.Option(STRAGGLER_MS, "--straggler-ms", help="A launch this many ms behind "
                                           "the first rank's (and 10× the median skew) makes a straggler."),
    ) -> None:
        """Diagnose a run: ok, crash, hang, desync or straggler, with culprit ranks and evidence."""
        import orjson
        from rich.console import Console

        from commscope.analyze.doctor import diagnose_path
        from commscope.errors import UserError

        if not straggler_ms > 0:
            raise UserError(f"--straggler-ms must be > 0, got {straggler_ms}")
        d = diagnose_path(str(path), straggler_ms=straggler_ms)
        if as_json:
            typer.echo(orjson.dumps(d.to_json(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2,
                                    default=str).decode())
            return
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        print_diagnosis(d, console)
