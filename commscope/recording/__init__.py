"""Public recording API: `record(run_dir, trace=..., ...)` (also `commscope.record`) returns a `Recorder`
(writes a run directory, docs/run_format.md) or, with `trace="off"`, a `NullRecorder` (records nothing,
same interface); both are context managers that close with the rank's status. See docs/recording.md.

Only the names a training script needs are exported here; the machinery (clock alignment, profiler
window, TermGuard, watchdog) is imported from its own module by the code that uses it. The names are
imported on first use: `Terminated` and the torch-free modules (termguard, label) stay importable without
importing torch, which the launcher, importing the reference trainer's module, must not pay for."""
from __future__ import annotations

from typing import Any

_WHERE = {
    "CollectiveHandle": "commscope.recording.api",
    "NullRecorder": "commscope.recording.api",
    "StepInfo": "commscope.recording.api",
    "Recorder": "commscope.recording.recorder",
    "record": "commscope.recording.recorder",
    "Terminated": "commscope.recording.termguard",
    "ddp_comm_hook": "commscope.recording.ddp",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
