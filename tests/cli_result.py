"""The exit code of a commscope command run in-process with typer's CliRunner on `commscope.cli.app`:
`commscope.cli.main` turns a UserError into one stderr line and exit code 2, while CliRunner on the app
surfaces the UserError as the result's exception; this maps it the same way."""
from __future__ import annotations

from commscope.errors import UserError


def exit_code(res) -> int:
    return 2 if isinstance(res.exception, UserError) else res.exit_code
