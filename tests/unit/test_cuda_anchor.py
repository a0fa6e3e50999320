"""A step's anchor pairs a CUDA event with the host clock; every CUDA time of the step is the anchor's host
time plus GPU time since it. A pair read far apart (another thread took the GIL between the record and the
clock read) would shift the whole step: the pair is taken again until it is tight (fake CUDA events)."""
from __future__ import annotations

import time

import torch

from commscope.recording import timing
from fake_cuda import FakeCudaEvent, use_fake_cuda


class SlowFirstRecord(FakeCudaEvent):
    """The first record of the run is followed by a 2 ms stall, as a GIL switch would."""

    stalls = 1

    def record(self, stream=None):
        super().record(stream)
        if SlowFirstRecord.stalls:
            SlowFirstRecord.stalls -= 1
            time.sleep(0.002)


def test_a_late_clock_read_takes_the_anchor_again(monkeypatch):
    use_fake_cuda(monkeypatch)
    monkeypatch.setattr(timing.torch.cuda, "Event", SlowFirstRecord)
    clock = timing.CudaClock(torch.device("cuda", 0))
    anchor = clock.new_anchor()
    # the event's time (when it was recorded) and the host time paired with it are within the bound
    assert 0 <= anchor.host_ns - anchor.event.t <= timing.ANCHOR_TIGHT_NS
    assert SlowFirstRecord.stalls == 0  # the stalled pair was taken and dropped
    # a stamp of the step is placed where it was recorded, to within the bound
    stamp = clock.stamp()
    t = stamp.event.t
    assert 0 <= clock.host_ns(stamp) - t <= timing.ANCHOR_TIGHT_NS
