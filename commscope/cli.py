"""The `commscope` command line: a typer app whose commands are thin wrappers over library functions.

Each command lives in `commscope/commands/<name>.py` and exposes `register(app)`; this module only
assembles them, so commands can be added without touching each other. A run registers only the command
it names (tests/unit/test_cli.py checks that every module registers the command of its name). Errors meant for users — a
`commscope.errors.UserError` raised by the library, or a usage error of the parser (unknown option,
`--steps abc`) — become one line on stderr and exit code 2, never a traceback or a usage box.

SIGTERM and SIGHUP end a command the way Ctrl-C does: the signal raises `Interrupted` in the main thread,
so finally blocks run (parse workers reaped, temporary folders removed), and the process exits with
128 + the signal after one stderr line. When stdout's reader goes away early (`commscope plan | head`),
the command ends quietly with 141 (128 + SIGPIPE), as a tool killed by SIGPIPE does.

Only typer's public API is used (`typer.core`'s command classes are its documented way to customise a
command, here to show flags without a `<bool>` type in help): the parser's exception classes are found through `typer.BadParameter`'s
bases, so the CLI works whether typer brings the click package or its own copy of it.
"""
from __future__ import annotations

import atexit
import contextlib
import difflib
import importlib
import os
import pkgutil
import signal
import sys
import threading

import typer
from typer.core import TyperCommand, TyperGroup

from commscope import __version__, commands
from commscope.errors import UserError
from commscope.util.abandon import STOP_HANDLER
from commscope.util.text import escape_controls, printable  # the one error line: controls escaped, \xNN bytes

def _version(value: bool) -> None:
    if value:
        print(f"commscope {__version__}")
        raise typer.Exit()


def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print commscope's version and exit.")) -> None:
    """Profile and debug communication in distributed PyTorch training."""


def command_names() -> list[str]:
    """The commands, one module of `commscope.commands` each (named as the command)."""
    return sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))


def _flags_without_type(params: list) -> list:
    """`params` with every flag's metavar set to nothing (unless it names one): typer's help shows a flag's
    type as `<bool>` beside it, a value the flag never takes (`--json <bool>`, `--help <bool>`); a flag
    reads as its name (or its pair, `--hta / --no-hta`) alone."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


class _Command(TyperCommand):
    """A command whose help shows its flags without a type (`_flags_without_type`)."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


class _Group(TyperGroup):
    """The top-level command (`--version`, `--help`), its flags shown without a type."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with command `only` alone."""
    new = typer.Typer(name="commscope", help="Profile and debug communication in distributed PyTorch training.",
                      no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, cls=_Group)
    new.callback()(_options)
    for name in [only] if only else command_names():
        importlib.import_module(f"commscope.commands.{name}").register(new)
    for info in new.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default class; a command's own stays
            info.cls = _Command
    return new


def __getattr__(name: str):
    """`app`, every command registered, built on first use (PEP 562): main builds only the command it runs."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()["app"] = full = build_app()
    return full


def _app_for(args: list[str]) -> typer.Typer:
    """The app that runs `args`: the named command alone when the first argument names one (importing
    every command module costs ~30 ms, a tenth of the CLI's start), else every command (help, --version,
    usage errors list them all)."""
    if args and args[0] in command_names():
        return build_app(args[0])
    return globals()["app"] if "app" in globals() else __getattr__("app")


_STOP_SIGNALS = ("SIGTERM", "SIGHUP")  # by name: SIGHUP is not on every platform
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: the output's reader went away


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (a BaseException, as KeyboardInterrupt, so `except Exception` lets it by)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def one_line(message: str) -> str:
    """`message` with its control characters (a newline in a file name) written as escapes, `\\n`."""
    return escape_controls(message)


def _fail(message: str) -> None:
    print(f"commscope: error: {one_line(printable(message))}", file=sys.stderr)
    sys.exit(2)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # after SIGHUP the terminal may be gone
        print(line, file=sys.stderr)


@contextlib.contextmanager
def _stop_signals_raise():
    """While the block runs, SIGTERM and SIGHUP raise `Interrupted` in the main thread; a second one
    is ignored by this process until the block has ended, so it cannot cut the cleanup short. Signals
    already ignored (SIGHUP under nohup) stay ignored, and other handlers are left alone. A process forked
    meanwhile (a worker pool's, HTA's) ends on either signal, before and after the first: were the second
    stage SIG_IGN, a pool replacing its killed workers during the cleanup would start ones that ignore the
    SIGTERM its terminate() sends, and wait for them for ever."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    me = os.getpid()
    old: dict[int, object] = {}

    def after_first(signum, _frame):
        if os.getpid() != me:  # a forked child that has not set its own handlers yet
            os._exit(128 + signum)

    def handler(signum, _frame):
        after_first(signum, _frame)
        for s in old:
            signal.signal(s, after_first)
        raise Interrupted(signum)

    # a section that cannot be unwound (commscope.util.abandon: HTA's fork pool) may take these signals over
    setattr(handler, STOP_HANDLER, True)
    setattr(after_first, STOP_HANDLER, True)

    for name in _STOP_SIGNALS:
        s = getattr(signal, name, None)
        if s is not None and signal.getsignal(s) is signal.SIG_DFL:
            old[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _output_closed(stdout) -> None:
    """End quietly after stdout's reader went away: stdout is pointed at /dev/null, so that what is left
    in its buffer cannot fail again at exit ("Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stdout.fileno())
        os.close(fd)
    sys.exit(SIGPIPE_EXIT)


def _parser_exception(name: str) -> type[Exception]:
    """The parser's exception class `name` (UsageError, ClickException), a base of typer.BadParameter."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_UsageError = _parser_exception("UsageError")
_ClickException = _parser_exception("ClickException")


def main(argv: list[str] | None = None) -> None:
    """Run the command of `argv` (default: the process's arguments) and exit with its code (SystemExit),
    for any caller: tests, or a script that runs commands in-process."""
    _run(argv)


def entry() -> None:
    """The program's entry point (the `commscope` script, `python -m commscope`): `main` for the
    process's own arguments, then the end of the process without the interpreter's teardown
    (`_exit_now`). Only the entry point may end the process itself; `main` always raises SystemExit."""
    try:
        _run(None)
    except SystemExit as e:
        e.code = _flushed(e.code)
        _exit_now(e.code)
        raise


def _flushed(code):
    """`code` once stdout is flushed; SIGPIPE_EXIT when its reader has gone before all was written."""
    stdout = sys.stdout
    try:
        stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(SystemExit):
            _output_closed(stdout)
        return SIGPIPE_EXIT
    except (OSError, ValueError):
        pass
    return code


def _exit_now(code) -> None:
    """End the process with exit status `code` without the interpreter's teardown, when nothing is left
    running.

    Tearing down the modules of the analysis stack (pandas, numpy) takes ~0.1 s, a sixth of a whole
    `report --json`, and does nothing a finished command needs: stdout and stderr are flushed and the
    atexit handlers run (logging, multiprocessing's reaping of children, weakref finalizers) as at a
    normal exit. With another thread still running, or output that cannot be flushed (a closed pipe),
    the interpreter's own exit decides, as it always does (also for a code that is not a number).
    """
    if threading.active_count() > 1 or not isinstance(code, int):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()
    os._exit(code)


def _close_options(name: str, options) -> list[str]:
    """The parser's did-you-mean suggestions for an unknown option that are close to what was typed (names
    compared without their dashes, which every option shares): `--jsn` keeps `--json`, `--bogus` loses
    `--out`."""
    bare = name.lstrip("-")
    return [o for o in options if difflib.SequenceMatcher(None, bare, o.lstrip("-")).ratio() >= 0.7]


def _run(argv: list[str] | None) -> None:
    stdout = sys.stdout
    try:
        with _stop_signals_raise():
            _dispatch(argv)
    except BrokenPipeError:
        _output_closed(stdout)
    except SystemExit as e:
        # click and rich end a command whose output pipe broke with exit code 1, raised while handling
        # the BrokenPipeError
        if isinstance(e.__context__, BrokenPipeError):
            _output_closed(stdout)
        raise
    except Interrupted as e:
        _say(f"commscope: aborted ({signal.Signals(e.signum).name})")
        sys.exit(128 + e.signum)


_HELP = {"--help", "-h", "--version"}  # asking how to call commscope needs no limit


def _flag_names(app: typer.Typer, args: list[str]) -> set[str]:
    """The names of the options of `args`' command (and the top level's) that take no value: flags."""
    group = typer.main.get_command(app)
    cmd = getattr(group, "commands", {}).get(args[0]) if args else None
    # by attribute: typer carries its own copy of click, whose Option is not the installed click's
    return {name for c in (group, cmd) if c is not None for p in c.params
            if getattr(p, "is_flag", False) or getattr(p, "count", False) for name in p.opts + p.secondary_opts}


def _refuse_empty_arguments(args: list[str], app: typer.Typer) -> None:
    """UserError for an empty argument in a path's place: click turns "" into the path ".", so
    `commscope report ""` (an unset shell variable, quoted) would read the current folder and `doctor ""`
    diagnose it, also right after a flag (`report --json ""`). An empty value right after an option that
    takes one is left to that option's own check (`--steps ""` says what it takes; a blank --scheduler
    means local processes)."""
    if "" not in args:
        return
    flags = _flag_names(app, args) | {"--"}  # "--" ends the options: what follows are arguments
    ended = args.index("--") if "--" in args else len(args)
    for i, a in enumerate(args):
        after_option = (0 < i <= ended and args[i - 1].startswith("-") and "=" not in args[i - 1]
                        and args[i - 1] not in flags)
        if a == "" and not after_option:
            raise UserError("an argument is empty where a path goes: give the path (. for the current folder)")


def _dispatch(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        app = _app_for(args)
        if not _HELP & set(args):
            # a malformed COMMSCOPE_MAX_* is refused before any input is read, on every command: each limit
            # is read only where an input needs it, and compare reads summaries before any load
            from commscope.load.limits import check_environment

            check_environment()
            _refuse_empty_arguments(args, app)
        # standalone_mode=False lets usage errors reach us instead of click printing its usage box.
        rc = app(args=argv, standalone_mode=False)
    except UserError as e:
        _fail(str(e))
    except _UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `commscope` alone: help (typer's formatter printed it)
            if str(e).strip():
                print(str(e))
            sys.exit(0)
        if type(e).__name__ == "NoSuchOption" and getattr(e, "possibilities", None):
            e.possibilities = _close_options(e.option_name, e.possibilities)
        hint = f" (see: commscope {e.ctx.info_name} --help)" if e.ctx and e.ctx.parent else ""
        _fail(e.format_message().replace("\n", " ") + hint)
    except _ClickException as e:
        _fail(e.format_message().replace("\n", " "))
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except OSError as e:
        if not e.filename or isinstance(e, BrokenPipeError):
            raise
        # a file or folder the system refuses (permissions, a vanished mount, a full disk): what and why
        _fail(f"{e.filename}: {e.strerror or e}")
    except MemoryError:  # the command's own objects are freed by now: one line, not a traceback
        cmd = next((a for a in args if not a.startswith("-")), "")
        _fail(f"out of memory while running commscope {cmd}; free memory or give it fewer or smaller inputs")
    except (KeyboardInterrupt, typer.Abort):
        _say("commscope: aborted")
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
