"""Device time stamps that cost no synchronization, resolved to the common time axis later.

On CPU a stamp is just `perf_counter_ns()`. On CUDA it is an event recorded on the current stream;
its time is only known once the GPU has passed it, so stamps are resolved in bulk at the end of a step
(the step's natural sync point: the trainer has already read the loss there). An event's host time is
`anchor_host_ns + anchor.elapsed_time(event)`: the anchor is an event recorded at step start, when the
previous step's sync has drained the queue, so the GPU passes it (almost) when the host records it.

Invariants: stamping never blocks; resolving blocks only on events of the step being closed; events
are pooled and reused only after they have been resolved.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Anchor:
    event: Any
    host_ns: int  # local perf_counter ns when the anchor was recorded


class GpuStamp:
    """A CUDA event and the anchor it will be measured from."""

    __slots__ = ("event", "anchor")

    def __init__(self, event: Any, anchor: Anchor):
        self.event = event
        self.anchor = anchor


class CudaClock:
    """Makes and resolves CUDA event stamps on the current stream of one device."""

    def __init__(self, device: torch.device):
        self.device = device
        self._pool: list[Any] = []
        self.anchor: Anchor | None = None

    def _event(self) -> Any:
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)

    def new_anchor(self) -> Anchor:
        ev = self._event()
        ev.record()
        self.anchor = Anchor(ev, time.perf_counter_ns())
        return self.anchor

    def stamp(self) -> GpuStamp:
        anchor = self.anchor or self.new_anchor()
        ev = self._event()
        ev.record()
        return GpuStamp(ev, anchor)

    def ready(self, stamp: GpuStamp) -> bool:
        return bool(stamp.event.query())

    def resolve(self, stamp: GpuStamp) -> int:
        """Local perf_counter ns at which the GPU passed the stamp (blocks until it has)."""
        stamp.event.synchronize()
        ms = stamp.anchor.event.elapsed_time(stamp.event)
        return stamp.anchor.host_ns + int(round(ms * 1e6))

    def recycle(self, stamp: GpuStamp) -> None:
        self._pool.append(stamp.event)
