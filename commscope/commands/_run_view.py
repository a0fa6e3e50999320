"""What `commscope run` shows in the terminal while and after a job runs: the launcher's `RunView`
(instrumented_model.launcher) made of reports/run_terminal.py's output, the step figures of
commscope.analyze.run_step_stats and, on a failed run or a drill, the doctor's verdict.

The command layer is where the three meet, so the trainer's launcher neither renders nor analyzes.
"""
from __future__ import annotations

import sys
from typing import ContextManager

from rich.console import Console

from commscope.analyze.run_step_stats import step_stats
from commscope.errors import UserError
from commscope.pipeline import diagnose_path
from reports.run_terminal import LiveProgress, print_run_dir, print_run_note, print_run_summary, print_run_verdict


class TerminalView:
    """The launcher's view on `console` (by default one that prints a rank's error text such as ":x:"
    as text). A quiet console prints nothing, the warning on stderr included: a quiet launch reads no
    timings.

    Output that can no longer be written (the terminal closed: EIO; a pipe's reader gone: EPIPE) never
    stops the run: the view goes quiet and the job, its teardown and summary.json go on, as `nohup` would
    have them. Only what is printed is lost; the run directory holds it all."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(emoji=False)

    def _print(self, fn, *args) -> None:
        if self.console.quiet:
            return
        try:
            fn(*args)
        except OSError:  # the terminal or pipe is gone: nothing more can be shown
            self.console.quiet = True

    def run_dir(self, out: str) -> None:
        self._print(print_run_dir, self.console, out)

    def note(self, text: str) -> None:
        self._print(print_run_note, self.console, text)

    def warn(self, text: str) -> None:
        self._print(lambda: print(f"commscope: warning: {text}", file=sys.stderr, flush=True))

    def progress(self, total_steps: int) -> ContextManager[LiveProgress]:
        return _Guarded(LiveProgress(self.console, total=total_steps), self)

    def summary(self, summary: dict, out: str, profile: str | None, log: str, recorded: bool = True) -> None:
        self._print(lambda: print_run_summary(self.console, summary, out, step_stats(summary, profile), log,
                                              recorded=recorded))

    def verdict(self, out: str, unless: tuple[str, ...] = ()) -> None:
        if self.console.quiet:
            return
        try:
            diagnosis = diagnose_path(out)
        except UserError as e:  # a note says why there is no verdict; the run and its exit code stand
            diagnosis = e
        # where the caller names verdicts the run's own line already says, no verdict (an error) says no more
        if unless and getattr(diagnosis, "verdict", None) in (None, *unless):
            return
        self._print(print_run_verdict, self.console, out, diagnosis)


class _Guarded:
    """The live progress, each of its writes through the view's guard: a bar whose terminal closed stops
    drawing instead of ending the launcher."""

    def __init__(self, live: LiveProgress, view: TerminalView):
        self._live, self._view = live, view
        self._entered = False

    def __enter__(self) -> "_Guarded":
        self._view._print(self._live.__enter__)
        self._entered = not self._view.console.quiet
        return self

    def __exit__(self, *exc) -> None:
        if not self._entered:  # never drawn: nothing to take down
            return
        try:
            self._live.__exit__(*exc)
        except OSError:
            self._view.console.quiet = True
        except Exception:  # rich's display state after a write failed mid-draw: only the display is lost
            if not self._view.console.quiet:
                raise

    def step(self, rec: dict) -> None:
        self._view._print(self._live.step, rec)

    def note(self, line: str) -> None:
        self._view._print(self._live.note, line)
