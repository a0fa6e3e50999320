"""Device time stamps that cost no synchronization, resolved to the common time axis later.

On CPU a stamp is just `perf_counter_ns()`. On CUDA it is an event recorded on the current stream;
its time is only known once the GPU has passed it, so stamps are resolved in bulk at the end of a step
(the step's natural sync point: the trainer has already read the loss there). An event's host time is
`anchor_host_ns + anchor.elapsed_time(event)`: the anchor is an event recorded at step start, when the
previous step's sync has drained the queue, so the GPU passes it (almost) when the host records it; the
garbage collector is off between the anchor's record and the host clock read, whose gap shifts every
time of the step.

Resolution is bulk: `settle()` synchronizes once per stream that was stamped (the last event recorded
on it: a stream passes its events in order), after which every earlier stamp's `elapsed_time` is ready
without a per-event synchronize. The step end is the trainer's sync point, so `settle()` costs one driver
call per stream and never waits in practice. A stamp the GPU has already passed can be resolved sooner,
on its own: `ready()` asks without waiting (steps.py resolves a step's records that way while the step
runs, so the step end has little left to do).

A stamp's host cost is on the training step's critical path wherever the step is launch-bound, so the
stamp path does only what it must: `torch.cuda.current_stream()` builds a new Stream object on every call
(most of a stamp's Python time), so the current stream is looked up by torch's id tuple and its Stream
object kept per id (`current_stream_source`).

Invariants: stamping never blocks; `settle()` blocks only until the last stamp of each stamped stream
(never on work launched after it, e.g. on NCCL's stream); events are pooled and reused only after they
have been resolved.
"""
from __future__ import annotations

import functools
import gc
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import torch

# More distinct current streams than this (external streams made per step, say) start the cache afresh.
_MAX_STREAMS = 256


def cached_by_key(key: Callable[[], Hashable], make: Callable[[], Any]) -> Callable[[], Any]:
    """`() -> make()`, built once per distinct `key()` and reused while the key is the same."""
    cache: dict[Hashable, Any] = {}

    def current() -> Any:
        k = key()
        obj = cache.get(k)
        if obj is None:
            if len(cache) >= _MAX_STREAMS:
                cache.clear()
            obj = cache[k] = make()
        return obj

    return current


def current_stream_source(device: torch.device) -> Callable[[], Any]:
    """`() -> the current torch.cuda.Stream of device`, one Stream object per stream.

    The key is `torch._C._cuda_getCurrentStream(index)`, the (stream id, device index, device type) tuple
    `torch.cuda.current_stream` builds its Stream from, so the cached object is the one it would build.
    Without that lookup (torch built without CUDA, where tests stand in a fake `current_stream`), every
    call asks `torch.cuda.current_stream`.
    """
    lookup = getattr(torch._C, "_cuda_getCurrentStream", None)
    if lookup is None:
        return functools.partial(_current_stream, device)
    index = torch.cuda._get_device_index(device, optional=True)
    return cached_by_key(functools.partial(lookup, index), functools.partial(_current_stream, index))


def _current_stream(device: Any) -> Any:
    return torch.cuda.current_stream(device)  # looked up at call time: tests replace it


@dataclass
class Anchor:
    event: Any
    host_ns: int  # local perf_counter ns when the anchor was recorded
    passed: bool = False  # the GPU is known to have passed `event` (set by CudaClock.ready, never unset)


class GpuStamp:
    """A CUDA event, the anchor it will be measured from, and the stream it was recorded on (a stream
    passes its events in order: a stamp recorded before a passed one on the same stream is passed too)."""

    __slots__ = ("event", "anchor", "stream")

    def __init__(self, event: Any, anchor: Anchor, stream: Any = None):
        self.event = event
        self.anchor = anchor
        self.stream = stream


# How close the host clock read must follow an anchor's event record (an event record costs ~2 µs of host
# time on an H200), and how often the pair is taken again when it does not: every CUDA time of a step is
# the anchor's host time plus GPU time since it, so a late read shifts the whole step's times by its delay.
ANCHOR_TIGHT_NS = 10_000
ANCHOR_TRIES = 3


class CudaClock:
    """Makes and resolves CUDA event stamps on the current stream of one device."""

    def __init__(self, device: torch.device):
        self.device = device
        self._pool: list[Any] = []
        self.anchor: Anchor | None = None
        self._stream = current_stream_source(device)
        # id of a stream object → (it, the last event recorded on it since the last settle()). One entry per
        # stream, as current_stream_source gives one object per stream; holding the object keeps its id
        # from being reused by another stream's while the entry lives.
        self._tails: dict[int, tuple[Any, Any]] = {}

    def _event(self) -> Any:
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)

    def new_anchor(self) -> Anchor:
        ev = self._event()
        stream = self._stream()
        # Every CUDA time of the step is this host time plus GPU time since the anchor: a garbage collection
        # between the record and the clock read would shift them all by its pause (tens of ms in a large
        # process), so none may run there.
        # Nor may another thread take the GIL there (gloo's completion callbacks, the fsync thread: up to the
        # 5 ms switch interval): the pair is read again, the event recorded anew, until the clock reads within
        # ANCHOR_TIGHT_NS of just before the record, ANCHOR_TRIES times at most.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for _ in range(ANCHOR_TRIES):
                before = time.perf_counter_ns()
                ev.record(stream)
                host_ns = time.perf_counter_ns()
                if host_ns - before <= ANCHOR_TIGHT_NS:
                    break
        finally:
            if collecting:
                gc.enable()
        self._tails[id(stream)] = (stream, ev)
        self.anchor = Anchor(ev, host_ns)
        return self.anchor

    def stamp(self) -> GpuStamp:
        anchor = self.anchor or self.new_anchor()
        ev = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        # Event.record() would look the current stream up anyway; doing it here names the stream to settle.
        stream = self._stream()
        ev.record(stream)
        self._tails[id(stream)] = (stream, ev)
        return GpuStamp(ev, anchor, stream)

    def take_tails(self) -> dict[int, tuple[Any, Any]]:
        """The streams' last stamps so far, for a later `settle(tails)`; stamps after this are not in it."""
        tails, self._tails = self._tails, {}
        return tails

    def settle(self, tails: dict[int, tuple[Any, Any]] | None = None) -> None:
        """Block until the GPU has passed every stamp recorded so far (one synchronize per stream), or
        only those up to a `take_tails()`."""
        tails = self._tails if tails is None else tails
        for _, ev in tails.values():
            ev.synchronize()
        tails.clear()

    @staticmethod
    def passed_within(tails: dict[int, tuple[Any, Any]], timeout_s: float) -> bool:
        """Poll until the GPU has passed `tails` (True) or `timeout_s` is over (False); never blocks on a
        GPU that may not get there (an abnormal end: a peer died inside a collective)."""
        deadline = time.monotonic() + timeout_s
        while not all(ev.query() for _, ev in tails.values()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def host_ns(self, stamp: GpuStamp) -> int:
        """Local perf_counter ns of a stamp the GPU has passed (after settle() or ready()); recycles it."""
        ev, anchor = stamp.event, stamp.anchor
        ns = anchor.host_ns + round(anchor.event.elapsed_time(ev) * 1e6)
        # into the pool only once read: the hang watchdog and TermGuard resolve from their own threads while
        # the main thread may stamp, and a stamp takes an event from the pool and records it again at once
        self._pool.append(ev)
        return ns

    def ready(self, stamp: GpuStamp) -> bool:
        """Whether the GPU has passed `stamp` and its anchor, so `host_ns(stamp)` needs no wait (non-blocking:
        one event query, plus one per anchor until it is seen passed)."""
        anchor = stamp.anchor
        if not anchor.passed:
            if not anchor.event.query():
                return False
            anchor.passed = True
        return bool(stamp.event.query())
