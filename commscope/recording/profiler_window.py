"""The profiler window: torch.profiler on training steps [first, stop) of every rank, one Kineto trace
per rank (rank{R}/trace.json.gz, readable by Perfetto and HTA).

Why manual start/stop instead of a torch.profiler schedule: the window is given in *training* step
numbers and each profiled step is wrapped in `ProfilerStep#<training step>`, so the loader's step
assignment for Kineto traces agrees with events.jsonl.

Invariant: the trace is exported once, when the window's last step ends or at close (a run that stops
inside the window still leaves what was profiled).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function


class ProfilerWindow:
    def __init__(self, steps: tuple[int, int], out: Path, *, cuda: bool, with_stack: bool = False):
        self.first, self.stop = steps
        self.out = Path(out)
        self.cuda = cuda
        self.with_stack = with_stack
        self._prof: profile | None = None
        self.exported = False

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Wrap one training step: starts the profiler at the window's first step, ends after its last."""
        inside = self.first <= step < self.stop and not self.exported
        if inside and self._prof is None:
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = profile(activities=acts, record_shapes=True, with_stack=self.with_stack)
            self._prof.start()
        if not inside or self._prof is None:
            yield
            return
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
