"""Public recording API: `record(run_dir, trace=..., ...)` (also `commscope.record`) returns a `Recorder`
(writes a run directory, docs/run_format.md) or, with `trace="off"`, a `NullRecorder` (records nothing,
same interface); both are context managers that close with the rank's status. See docs/recording.md.

Only the names a training script needs are exported here; the machinery (clock alignment, profiler
window, TermGuard, watchdog) is imported from its own module by the code that uses it."""
from commscope.recording.api import CollectiveHandle, NullRecorder, StepInfo
from commscope.recording.ddp import ddp_comm_hook
from commscope.recording.recorder import Recorder, record

__all__ = ["CollectiveHandle", "NullRecorder", "Recorder", "StepInfo", "ddp_comm_hook", "record"]
