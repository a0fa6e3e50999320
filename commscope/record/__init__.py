"""Public recording API: `Recorder` (writes a run directory, docs/run_format.md), `NullRecorder` (records
nothing, same interface) and `make_recorder(mode, run_dir, ...)` which picks one from `--trace`.
See docs/recording.md."""
from commscope.record.api import OP_NAMES, CollectiveHandle, NullRecorder, StepInfo
from commscope.record.clock import ClockSync, align_clocks
from commscope.record.recorder import Recorder, make_recorder
from commscope.record.termguard import TermGuard

__all__ = [
    "OP_NAMES",
    "ClockSync",
    "CollectiveHandle",
    "NullRecorder",
    "Recorder",
    "StepInfo",
    "TermGuard",
    "align_clocks",
    "make_recorder",
]
