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
    timings."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(emoji=False)

    def run_dir(self, out: str) -> None:
        print_run_dir(self.console, out)

    def note(self, text: str) -> None:
        print_run_note(self.console, text)

    def warn(self, text: str) -> None:
        if not self.console.quiet:
            print(f"commscope: warning: {text}", file=sys.stderr, flush=True)

    def progress(self, total_steps: int) -> ContextManager[LiveProgress]:
        return LiveProgress(self.console, total=total_steps)

    def summary(self, summary: dict, out: str, profile: str | None) -> None:
        print_run_summary(self.console, summary, out, step_stats(summary, profile))

    def verdict(self, out: str) -> None:
        try:
            diagnosis = diagnose_path(out)
        except UserError as e:  # a note says why there is no verdict; the run and its exit code stand
            diagnosis = e
        print_run_verdict(self.console, out, diagnosis)
