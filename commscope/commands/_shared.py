"""Helpers of the commands that read traces (report, doctor, export, layout): the --steps, --scheduler
and --label-map options, report's default output name, and loading with a progress bar; and, for every
command's float options, `require_finite` (NaN and ±inf are refused in one line, whatever range check
follows: NaN passes any comparison and inf reaches int() or a drawing). The leading underscore keeps `commscope.cli` from registering this
module as a command.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path

from commscope.errors import UserError
from commscope.util.text import escape_controls, printable
from commscope.util.step_range import parse_step_range


def require_finite(value: float | None, option: str) -> None:
    """Refuse a NaN or infinite float option (`option`: its flag, e.g. "--tflops") in one UserError line;
    None (not given) passes."""
    if value is not None and not math.isfinite(value):
        raise UserError(f"{option} must be a finite number, got {value}")


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """--steps A:B, A, A: or :B (commscope.util.step_range); an empty value given on purpose is refused,
    not read as no --steps."""
    if text is not None and not text.strip():
        raise UserError("--steps is empty: give A:B, A, A: or :B, or leave --steps out for every step")
    return parse_step_range(text, "--steps")


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
        said = f"{'' if window[0] is None else window[0]}:{'' if window[1] is None else window[1]}"  # as typed
        raise UserError(f"--steps {said} selects none of the steps present ({known[0]}…{known[-1]})")
    return (lo, hi)


def default_output(src: Path) -> Path:
    """./<input-name>-report.html in the current directory (a single trace file: its name without .json.gz)."""
    from commscope.load.files import Missing

    try:
        resolved = src.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise Missing(src) from None
    name = resolved.name.removesuffix(".gz").removesuffix(".json") or "commscope"
    return Path.cwd() / f"{name}-report.html"


def progress_columns() -> list:
    """The loading bar: what is loading, the bar, files done / total ("0/?" until the total is known,
    never "0/None"), time elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    # the description holds the file being read: a name like "[/a]" is not markup (TextColumn parses its
    # own text as markup whatever the console says)
    return [TextColumn("{task.description}", style="progress.description", markup=False), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn()]


SCHEDULER_HELP = ("A Dask scheduler (tcp://HOST:8786): each rank's files are parsed by that cluster's workers, "
                  "which need commscope installed and the input at the same path. Default: local processes.")


def scheduler_option():
    """--scheduler ADDRESS (also COMMSCOPE_SCHEDULER): where the per-rank stage runs (commscope.load.engine)."""
    import typer

    return typer.Option(None, "--scheduler", envvar="COMMSCOPE_SCHEDULER", help=SCHEDULER_HELP,
                        show_default=False)


LABEL_MAP_HELP = ("A JSON file {\"label\": \\[bytes, ...]}: a collective that has only its generic name (no "
                  "commscope.label scope, no Python stack) and whose full-array bytes are listed takes that "
                  "label. commscope.size_labels() makes one from model.named_parameters() (docs/traces.md).")
# (the call is split in two names: as one 47-character word it is cut with an ellipsis in an 80-column
# help box, whose help column is narrower than that)


def label_map_option():
    """--label-map FILE: a size → label map for collectives with generic names (commscope.analyze.labels)."""
    import typer

    return typer.Option(None, "--label-map", help=LABEL_MAP_HELP, show_default=False)


def read_label_map(path: str | Path | None) -> dict | None:
    """The --label-map file, checked (before the trace is loaded: a bad map fails at once, exit 2). Taken
    as text: a Path would read an empty value as "." and call it a directory the user never named."""
    if path is None:
        return None
    if str(path) == "":
        raise UserError("--label-map is empty: give the size → label map's JSON file")
    from commscope.load.label_map import read_label_map as read

    return read(Path(path))


def output_file(text: str, option: str, what: str) -> Path:
    """The output file an option names, refused in one line where the text cannot name one: empty (a Path
    would read it as "." and refuse a directory the user never named), or ending in a separator (a folder:
    the Path would drop the separator and write a file of the folder's name)."""
    if text == "":
        raise UserError(f"{option} is empty: give the {what} to write")
    if text.endswith(("/", os.sep)):
        raise UserError(f"{option} {printable(text)} ends in '/', which names a folder: give the {what} to write")
    return Path(text)


def stderr_line(text: str) -> None:
    """`text` as one line on stderr: it may hold the user's labels and paths, so its control characters
    are written as escapes (an ESC sequence would drive the terminal, a newline split the line)."""
    print(escape_controls(printable(text)), file=sys.stderr)


def apply_label_map(trace, label_map: dict | None):
    """`trace` with its generic collective labels replaced from `label_map` (None: as it is); what the map
    could not settle is added to `trace.problems`."""
    if label_map is None:
        return trace
    from commscope.analyze.labels import relabel_by_size

    trace.collectives, notes = relabel_by_size(trace.collectives, label_map)
    trace.problems = [*trace.problems, *notes]
    for n in notes:  # every command, whatever it prints of `problems`: a map that did not fit is said at once
        stderr_line(f"commscope: {n}")
    return trace


def load_with_progress(path: Path, quiet: bool, with_ops: bool = False, scheduler: str | None = None,
                       with_ops_up_to: int | None = None):
    """load_path with a rich progress bar on stderr (quiet: no bar, e.g. for --json in scripts); the
    per-rank stage on the Dask cluster at `scheduler` when given; `with_ops`, `with_ops_up_to`: load_path's."""
    from commscope.load import load_path
    from commscope.load.files import Missing

    if not path.exists():
        raise Missing(path)
    if quiet:  # --json: not even rich is imported (the whole command's time is what a script waits for)
        return load_path(path, with_ops=with_ops, scheduler=scheduler, with_ops_up_to=with_ops_up_to)
    from rich.progress import Progress

    from reports.console import plain_console

    console = plain_console(stderr=True)
    if not console.is_terminal:  # no bar (and no stray blank line) when stderr is a file or pipe
        return load_path(path, with_ops=with_ops, scheduler=scheduler, with_ops_up_to=with_ops_up_to)
    with Progress(*progress_columns(), console=console, transient=True) as bar:
        task = bar.add_task(f"loading {path.name}", total=None)

        def progress(done: int, total: int, what: str = "") -> None:
            bar.update(task, completed=done, total=total, description=f"loading {what or path.name}")

        return load_path(path, progress=progress, with_ops=with_ops, scheduler=scheduler,
                         with_ops_up_to=with_ops_up_to)


@contextlib.contextmanager
def status(message: str, quiet: bool):
    """A spinner with `message` on stderr while a long step without a count runs (HTA's analyses); nothing
    when quiet or when stderr is not a terminal."""
    if quiet:
        yield
        return
    from rich.text import Text

    from reports.console import plain_console

    console = plain_console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(Text(message)):  # a str would be read as markup by the spinner itself
        yield


def output_console(piped_width: int = 140, stderr: bool = False):
    """The console a command prints its tables to (`stderr`: its caveats beside a stdout it keeps for
    one result). Piped or logged output without COLUMNS gets `piped_width` columns, not rich's 80, which
    would cut label and kernel names; a COLUMNS the user set is kept (rich reads it), as is a terminal's
    own width. Markup and emoji codes are off (reports.console): what it prints holds the user's labels
    and paths."""
    from reports.console import plain_console

    console = plain_console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = plain_console(width=piped_width, stderr=stderr)
    return console
