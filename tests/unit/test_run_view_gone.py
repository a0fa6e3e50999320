"""`commscope run`'s terminal view when its output goes away mid-run (the terminal closed: EIO; a pipe's
reader gone: EPIPE): it goes quiet instead of raising, so the launcher tears the job down and writes
summary.json as it would have."""
from __future__ import annotations

import errno

from rich.console import Console

from commscope.commands._run_view import TerminalView


class _Gone:
    """A file whose writes fail as a hung-up terminal's do."""

    def __init__(self, after: int = 0):
        self.writes, self.after = 0, after

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes > self.after:
            raise OSError(errno.EIO, "Input/output error")
        return len(text)

    def flush(self) -> None:
        if self.writes > self.after:
            raise OSError(errno.EIO, "Input/output error")

    def isatty(self) -> bool:
        return False


def test_a_closed_terminal_quiets_the_view_and_raises_nothing(tmp_path):
    gone = _Gone(after=1)
    view = TerminalView(Console(file=gone, width=100))
    view.run_dir(str(tmp_path))  # the one write that still goes through
    assert not view.console.quiet
    view.note("a replaced run kept")  # the terminal closes here
    assert view.console.quiet
    with view.progress(10) as live:  # nothing drawn, nothing raised
        live.step({"step": 0, "loss": 1.0, "step_ms": 5.0, "tokens_per_s": 100.0})
        live.note("commscope: rank 1: note")
    summary = {"status": "interrupted", "world_size": 2, "device": "cpu", "backend": "gloo", "preset": "tiny",
               "steps": 10, "losses": [1.0], "step_times_ms": [5.0], "tokens_per_s": 100.0,
               "ranks": {"0": "interrupted", "1": "interrupted"}, "exit_code": 129, "message": "interrupted by SIGHUP"}
    view.summary(summary, str(tmp_path), None, "launcher.log")
    view.warn("x")
    assert gone.writes == 2  # the first write and the failed one: none after the view went quiet


def test_a_bar_whose_terminal_closes_while_drawing_ends_quietly(tmp_path):
    gone = _Gone(after=0)
    view = TerminalView(Console(file=gone, width=100, force_terminal=True))
    with view.progress(10) as live:
        live.step({"step": 0, "loss": 1.0, "step_ms": 5.0, "tokens_per_s": 100.0})
    assert view.console.quiet
