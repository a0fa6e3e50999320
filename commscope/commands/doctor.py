"""`commscope doctor RUN [--json] [--straggler-ms MS]`: what went wrong in a run, across ranks.

Prints one verdict (ok, crash, hang, desync, straggler, incomplete) with the culprit ranks, label, step,
sequence and the timestamps that show it (commscope.analyze.doctor; rendered by reports.doctor_terminal);
`--json` prints the same as one JSON document on stdout. Exit code 0 whatever the verdict (the verdict is
the answer, not an error); 2 for input that cannot be read.
"""
from __future__ import annotations

from pathlib import Path

import typer


def _straggler_ms() -> float:
    """doctor's default threshold, read when the command runs: importing the rules (pandas) only for
    `--help` would slow every command's start."""
    from commscope.analyze.doctor import STRAGGLER_MS

    return STRAGGLER_MS


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        path: Path = typer.Argument(..., help="A commscope run directory (or a folder of Kineto traces: "
                                    "desync and straggler checks only)."),
        as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON on stdout."),
        straggler_ms: float = typer.Option(_straggler_ms, "--straggler-ms", show_default=False,
                                           help="A launch this many ms behind the first rank's (and 10× the "
                                           "median skew) makes a straggler. Default: the rule's STRAGGLER_MS."),
    ) -> None:
        """Diagnose a run: ok, crash, hang, desync or straggler, with culprit ranks and evidence."""
        import orjson
        from rich.console import Console

        from commscope.analyze.doctor import diagnose_path
        from commscope.errors import UserError
        from reports.doctor_terminal import print_doctor_verdict

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
        print_doctor_verdict(d, console)
