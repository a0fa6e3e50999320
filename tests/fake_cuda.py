"""A stand-in for CUDA events and streams, so the recorder's CUDA branch runs and is tested on CPU.

`FakeCudaEvent` is an "instant GPU": each event is passed when it is recorded, unless `FakeCudaEvent.stuck`
is set, which leaves events recorded meanwhile unpassed for good (a GPU stuck in a collective whose peer
died); `synchronize()` on such an event fails the test instead of hanging it. With `FakeCudaEvent.lag` set,
the GPU runs behind the host, in order: events recorded meanwhile stay unpassed until `catch_up()` passes
them all, or `synchronize()` on one passes it and every event recorded before it.
"""
from __future__ import annotations

import time


class FakeCudaEvent:
    """Stands in for torch.cuda.Event on CPU (counts creations and synchronizes)."""

    created = 0
    syncs = 0
    queries = 0
    stuck = False
    lag = False
    queued: list = []  # recorded under `lag`, not passed yet, in record order

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeCudaEvent.created += 1
        self.t = None
        self.passed = False

    def record(self, stream=None):
        self.t = time.perf_counter_ns()
        self.passed = not (FakeCudaEvent.stuck or FakeCudaEvent.lag)
        if FakeCudaEvent.lag and not FakeCudaEvent.stuck:
            FakeCudaEvent.queued.append(self)

    def query(self):
        FakeCudaEvent.queries += 1
        return self.passed

    def synchronize(self):
        if self in FakeCudaEvent.queued:
            FakeCudaEvent.catch_up(FakeCudaEvent.queued.index(self) + 1)
        assert self.passed, "synchronize() on an event the GPU never passes: this would hang"
        FakeCudaEvent.syncs += 1

    @classmethod
    def catch_up(cls, n=None):
        """The lagging GPU passes the first `n` queued events (all by default)."""
        n = len(cls.queued) if n is None else n
        for ev in cls.queued[:n]:
            ev.passed = True
        del cls.queued[:n]

    def elapsed_time(self, end):
        assert self.passed and end.passed, "elapsed_time() of an event the GPU has not passed"
        return (end.t - self.t) / 1e6


class FakeStream:
    cuda_stream = 7


def use_fake_cuda(monkeypatch) -> None:
    """Route the recorder's CUDA calls (commscope.recording.timing) to the fakes, counters reset."""
    import commscope.recording.timing as timing

    monkeypatch.setattr(timing.torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(timing.torch.cuda, "current_stream", lambda device=None: FakeStream)
    monkeypatch.setattr(timing.torch.cuda, "is_available", lambda: True)  # Recorder refuses cuda without it
    FakeCudaEvent.created = FakeCudaEvent.syncs = FakeCudaEvent.queries = 0
    FakeCudaEvent.stuck = FakeCudaEvent.lag = False
    FakeCudaEvent.queued = []
