"""Device time stamps that cost no synchronization, resolved to the common time axis later.

On CPU a stamp is just `perf_counter_ns()`. On CUDA it is an event recorded on the current stream;
its time is only known once the GPU has passed it, so stamps are resolved in bulk at the end of a step
(the step's natural sync point: the trainer has already read the loss there). An event's host time is
`anchor_host_ns + anchor.elapsed_time(event)`: the anchor is an event recorded at step start, when the
previous step's sync has drained the queue, so the GPU passes it (almost) when the host records it.

Resolution is bulk: `settle()` synchronizes once per stream that was stamped (the last event recorded
on it: a stream passes its events in order), after which every earlier stamp's `elapsed_time` is ready
without a per-event synchronize. The step end is the trainer's sync point, so `settle()` costs one driver
call per stream and never waits in practice.

Invariants: stamping never blocks; `settle()` blocks only until the last stamp of each stamped stream
(never on work launched after it, e.g. on NCCL's stream); events are pooled and reused only after they
have been resolved.
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
        # stream handle → last event recorded on it since the last settle()
        self._tails: dict[int, Any] = {}

    def _event(self) -> Any:
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)

    def new_anchor(self) -> Anchor:
        ev = self._event()
        stream = torch.cuda.current_stream(self.device)
        ev.record(stream)
        self._tails[stream.cuda_stream] = ev
        self.anchor = Anchor(ev, time.perf_counter_ns())
        return self.anchor

    def stamp(self) -> GpuStamp:
        anchor = self.anchor or self.new_anchor()
        ev = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        # Event.record() looks the current stream up anyway; doing it here names the stream to settle.
        stream = torch.cuda.current_stream(self.device)
        ev.record(stream)
        self._tails[stream.cuda_stream] = ev
        return GpuStamp(ev, anchor)

    def settle(self) -> None:
        """Block until the GPU has passed every stamp recorded so far (one synchronize per stream)."""
        for ev in self._tails.values():
            ev.synchronize()
        self._tails.clear()

    def host_ns(self, stamp: GpuStamp) -> int:
        """Local perf_counter ns of a stamp the GPU has passed (after settle() or ready()); recycles it."""
        ev, anchor = stamp.event, stamp.anchor
        self._pool.append(ev)
        return anchor.host_ns + round(anchor.event.elapsed_time(ev) * 1e6)

    def ready(self, stamp: GpuStamp) -> bool:
        return bool(stamp.event.query())
