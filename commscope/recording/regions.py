"""Regions: the timed spans of a step (`forward`, `backward`, `optimizer`, `update:<label>`, ...), the
compute collectives can hide behind (`region` records, docs/run_format.md).

`Regions` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts). A region's
start and end are stamps of the recorder's clock: CUDA events on the current stream on CUDA,
`perf_counter_ns` on CPU (timing.py). At its end the record joins the step's pending records, which the
step writer (steps.py) resolves and writes; under a running profiler the region is also a
`record_function` range of the same name.

Why the end of a region also writes the previous step under `flush="overlap"`, and under `flush="step"`
resolves what the GPU has passed so far: the region's kernels are launched by then, so that work runs
while the GPU is busy with them (steps.py).

Invariants: a region's record is queued also when its body raises; the `record_function` range is
opened only while a profiler runs (it costs ~15 µs even when none does).
"""
from __future__ import annotations

from typing import Any

import torch

from commscope.recording.api import check_compute, check_name, profiler_active
from commscope.recording.closing import CLOSED

_profiling = profiler_active


class _Region:
    """`with recorder.region(name):` stamps its start and end and queues the record (also when the body
    raises). A class rather than a generator context manager: regions are the most frequent record, and
    a generator's enter/exit costs several times a plain method call on the step's critical path."""

    __slots__ = ("_recorder", "_rec", "_prof")

    def __init__(self, recorder: Any, rec: dict):
        self._recorder = recorder
        self._rec = rec
        self._prof: Any = None

    def __enter__(self) -> None:
        if _profiling():  # under torch.profiler the region also shows as a user annotation
            self._prof = torch.profiler.record_function(self._rec["name"])
            self._prof.__enter__()
        self._rec["start_ns"] = self._recorder._stamp()

    def __exit__(self, *exc: Any) -> None:
        recorder = self._recorder
        self._rec["end_ns"] = recorder._stamp()
        recorder._pending.append(self._rec)
        if self._prof is not None:
            self._prof.__exit__(*exc)
        if recorder._behind is not None:  # flush="overlap": the previous step, now that the GPU has work
            recorder._write_behind()
        elif recorder._early and recorder._step is not None:
            # flush="step": what the GPU has passed, while the host is ahead of it. Inside a step only: a
            # record outside one waits for the next write, where it is moved onto the axis of that moment
            # (align_clocks() may change it between steps).
            recorder._advance()


class Regions:
    """`region()`; the record's step and micro-step come from steps.py and hooks.py."""

    def region(self, name: str, compute: bool | None = None) -> _Region:
        if self._closed:
            raise RuntimeError(CLOSED)
        check_name(name, "a region's name")
        rec = {
            "kind": "region",
            "rank": self.rank,
            "step": self._cur_step(),
            "name": name,
            "micro_step": self._micro,
            "start_ns": None,
            "end_ns": None,
            "timing": self._timing,
        }
        if compute is not None:
            check_compute(compute)
            rec["compute"] = compute
        return _Region(self, rec)
