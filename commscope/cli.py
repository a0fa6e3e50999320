"""The `commscope` command line: a typer app whose commands are thin wrappers over library functions.

Each command lives in `commscope/commands/<name>.py` and exposes `register(app)`; this module only
assembles them, so commands can be added without touching each other. Errors meant for users — a
`commscope.errors.UserError` raised by the library, or a usage error caught by click (unknown option,
`--steps abc`) — become one line on stderr and exit code 2, never a traceback or a usage box.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import click
import typer

try:  # typer >= 0.20 vendors its own click; older typers use the click package
    from typer._click import exceptions as _typer_click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    _typer_click_exc = click.exceptions

from commscope import commands
from commscope.errors import UserError

app = typer.Typer(
    name="commscope",
    help="Profile and debug communication in distributed PyTorch training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")):
    importlib.import_module(f"commscope.commands.{_mod}").register(app)


def _fail(message: str) -> None:
    print(f"commscope: error: {message}", file=sys.stderr)
    sys.exit(2)


def _exc(name: str) -> tuple[type, ...]:
    found = {getattr(click.exceptions, name, None), getattr(_typer_click_exc, name, None)}
    return tuple(t for t in found if t is not None)


def main(argv: list[str] | None = None) -> None:
    try:
        # standalone_mode=False lets usage errors reach us instead of click printing its usage box.
        rc = app(args=argv, standalone_mode=False)
    except UserError as e:
        _fail(str(e))
    except _exc("NoArgsIsHelpError") as e:  # `commscope` alone: help (typer's rich formatter has printed it)
        if str(e).strip():
            print(str(e))
        sys.exit(0)
    except _exc("UsageError") as e:
        hint = f" (see: commscope {e.ctx.info_name} --help)" if e.ctx and e.ctx.parent else ""
        _fail(e.format_message().replace("\n", " ") + hint)
    except _exc("ClickException") as e:
        _fail(e.format_message().replace("\n", " "))
    except (KeyboardInterrupt, *_exc("Abort")):
        print("commscope: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
