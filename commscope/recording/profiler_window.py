"""The profiler window: torch.profiler on training steps [first, stop) of every rank, one Kineto trace
per rank (rank{R}/trace.json.gz, readable by Perfetto and HTA).

Why manual start/stop instead of a torch.profiler schedule: the window is given in *training* step
numbers and each profiled step is wrapped in `ProfilerStep#<training step>`, so the loader's step
assignment for Kineto traces agrees with events.jsonl.

A profiler the script runs itself (its own `torch.profiler.profile()` around the loop) already running
when the window would open: torch supports one profiler at a time (a second one's stop ends the first's
session and crashes torch), so the window is skipped, with one line on stderr saying so; the script's
own trace is the one to read.

Invariant: the trace is exported once, when the window's last step ends or at close (a run that stops
inside the window still leaves what was profiled); `close_note` says, at close, when the window did not
cover all its steps.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from commscope.recording.api import profiler_active


class ProfilerWindow:
    def __init__(self, steps: tuple[int, int], out: Path, *, cuda: bool, with_stack: bool = False):
        self.first, self.stop = steps
        self.out = Path(out)
        self.cuda = cuda
        self.with_stack = with_stack
        self._prof: profile | None = None
        self.exported = False
        self.skipped = False  # another profiler was running when the window would open
        self.last_profiled: int | None = None

    @property
    def spec(self) -> str:
        return f"{self.first}:{self.stop}"

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Wrap one training step: starts the profiler at the window's first step, ends after its last."""
        inside = self.first <= step < self.stop and not self.exported and not self.skipped
        if inside and self._prof is None:
            if profiler_active():
                self.skipped = True
                print(f"commscope: warning: a torch.profiler is already running at step {step}; profile_steps "
                      f"{self.spec} is skipped (torch runs one profiler at a time): read that profiler's own "
                      "trace (`commscope report` reads a folder of Kineto traces)", file=sys.stderr, flush=True)
                yield
                return
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = profile(activities=acts, record_shapes=True, with_stack=self.with_stack)
            self._prof.start()
        if not inside or self._prof is None:
            yield
            return
        self.last_profiled = step
        try:
            with record_function(f"ProfilerStep#{step}"):
                yield
        finally:
            if step == self.stop - 1:
                self.finish()

    def finish(self) -> None:
        if self._prof is None or self.exported:
            return
        prof, self._prof = self._prof, None
        if self.cuda:
            torch.cuda.synchronize()  # outside the measured steps: the window is over
        prof.stop()
        prof.export_chrome_trace(str(self.out))
        self.exported = True

    def close_note(self, last_step: int | None) -> str | None:
        """At close: one line when the window did not profile all of its steps (None when it did, or when
        it was skipped, which was said when it happened)."""
        if self.skipped or (self.exported and self.last_profiled == self.stop - 1):
            return None
        last = "no step was recorded" if last_step is None else f"the last step was {last_step}"
        if self.last_profiled is None:
            return f"commscope: profile_steps {self.spec} never ran: {last}; no {self.out.name} was written"
        if self.exported:
            return (f"commscope: profile_steps {self.spec} ended early: {last}; {self.out.name} holds steps "
                    f"{self.first}:{self.last_profiled + 1}")
        return f"commscope: profile_steps {self.spec} ended early: {last}; no {self.out.name} was written"
