"""The `commscope` command line: a typer app whose commands are thin wrappers over library functions.

Each command lives in `commscope/commands/<name>.py` and exposes `register(app)`; this module only
assembles them, so commands can be added without touching each other. Errors meant for users are raised
as `commscope.errors.UserError` and become one line on stderr with exit code 2, never a traceback.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from commscope import commands
from commscope.errors import UserError

app = typer.Typer(
    name="commscope",
    help="Profile and debug communication in distributed PyTorch training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
    importlib.import_module(f"commscope.commands.{_mod}").register(app)


def main() -> None:
    try:
        app()
    except UserError as e:
        print(f"commscope: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
