"""The recording API every training script talks to, and its no-op implementation.

`NullRecorder` is what `trace="off"` gives and the contract `commscope.recording.Recorder` fulfils: the same
methods, each doing the minimum needed for training to proceed (collectives still run, waits still
wait). Keeping the two behind one interface means a training loop has a single code path whether it is
traced or not, so tracing cannot change what is computed.

Both are context managers: `with commscope.record(...) as rec:` closes the recorder on the way out, with
status "completed" or, when an exception leaves the block, "failed" and "<ExceptionType>: <message>" (the
trainer's wording for status.json, docs/run_format.md).

Invariants: `collective()` always launches with `async_op=True` and returns a handle whose `wait()` must
be called exactly once; `step()` contexts do not nest; `close()` is idempotent.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch.distributed as dist

# Function → normalized op name. Bytes follow the nccl-tests convention (full-array size).
OP_NAMES: dict[Callable, str] = {
    dist.all_reduce: "all_reduce",
    dist.reduce_scatter_tensor: "reduce_scatter",
    dist.all_gather_into_tensor: "all_gather",
    dist.broadcast: "broadcast",
    dist.all_gather: "all_gather",
    dist.reduce_scatter: "reduce_scatter",
    dist.all_to_all_single: "all_to_all",
    dist.barrier: "barrier",
}
# torch >= 2.13 spells the tensor forms *_single (the *_tensor names still work, deprecated).
for _fn, _name in (("reduce_scatter_single", "reduce_scatter"), ("all_gather_single", "all_gather")):
    if hasattr(dist, _fn):
        OP_NAMES[getattr(dist, _fn)] = _name


@dataclass
class StepInfo:
    """Filled in by the training loop inside `with rec.step(s) as st:`."""

    step: int
    loss: float | None = None
    tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class CollectiveHandle:
    """Wraps the `Work` of an async collective; `wait()` blocks like `Work.wait()`."""

    def __init__(self, work: Any):
        self.work = work

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()


class NullRecorder:
    """Records nothing. Same interface as `commscope.recording.Recorder`."""

    enabled = False

    def align_clocks(self, group: Any = None) -> None:
        pass

    def write_config(self, config: dict) -> None:
        pass

    def watch(self, named_params: dict) -> None:
        """Register post-accumulate-grad hooks on every labelled parameter (label → Parameter)."""

    def unwatch(self) -> None:
        """Remove the hooks `watch` registered."""

    def set_micro_step(self, micro_step: int | None) -> None:
        """Set the micro-step (gradient-accumulation index) that hooks and regions are attributed to."""

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[StepInfo]:
        yield StepInfo(step)

    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        yield

    def collective(self, fn: Callable, *args: Any, label: str, phase: str, **kwargs: Any) -> CollectiveHandle:
        """Launch `fn(*args, async_op=True, **kwargs)` (a torch.distributed collective)."""
        return CollectiveHandle(fn(*args, async_op=True, **kwargs))

    def inflight_snapshot(self) -> list[dict]:
        """Collectives launched but not known to be finished (for the hang watchdog)."""
        return []

    def close(self, status: str = "completed", error: str | None = None) -> None:
        pass

    def __enter__(self) -> "NullRecorder":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        # sys.exit(0) inside the block is a normal end of the script, not a failure of the rank.
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
            self.close("completed")
        else:
            self.close("failed", f"{type(exc).__name__}: {exc}")
