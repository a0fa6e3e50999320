"""Exit codes of commscope commands run in-process. `exit_code`: with typer's CliRunner on
`commscope.cli.app`, which surfaces a UserError as the result's exception, mapped the way
`commscope.cli.main` maps it (one stderr line, exit code 2). `run_main`: through `commscope.cli.main`
itself, with pytest's capsys."""
from __future__ import annotations

from commscope.errors import UserError


def exit_code(res) -> int:
    return 2 if isinstance(res.exception, UserError) else res.exit_code


def run_main(capsys, *args) -> tuple[int, object]:
    """(exit code, capsys' captured out/err) of `commscope ARGS` run through commscope.cli.main."""
    from commscope.cli import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code or 0
    return code, capsys.readouterr()
