"""PendingScalar and to_device (instrumented_model/host_transfer.py): values and what a read waits for."""
from __future__ import annotations

import time

import pytest
import torch

from instrumented_model.host_transfer import PendingScalar, to_device

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_pending_scalar_keeps_the_value_it_was_made_with():
    t = torch.tensor(2.5)
    p = PendingScalar(t)
    t.add_(1.0)  # later work on the same memory (CUDA graphs reuse an output's memory on the next replay)
    assert p.ready()
    assert p.item() == 2.5
    assert t.item() == 3.5


def test_to_device_on_cpu_is_the_tensor_itself():
    t = torch.arange(6)
    assert to_device(t, torch.device("cpu")) is t


@cuda
def test_pending_scalar_waits_for_its_own_step_only():
    """Reading step s's loss must not wait for step s+1, already queued behind it (`.item()` would)."""
    loss = torch.full((), 7.0, device="cuda")
    torch.cuda.synchronize()
    p = PendingScalar(loss * 2)
    later = torch.cuda.Event()
    torch.cuda._sleep(int(2e9))  # ~1 s of spinning queued after the copy: "step s+1"
    later.record()
    loss.fill_(-1.0)  # queued after the sleep: must not reach the value read
    t0 = time.perf_counter()
    value = p.item()
    waited = time.perf_counter() - t0
    assert value == 14.0
    assert not later.query(), "the read waited for work queued after it"
    assert waited < 0.5
    torch.cuda.synchronize()
    assert loss.item() == -1.0


@cuda
def test_to_device_copies_values_from_pinned_memory():
    t = torch.arange(1000, dtype=torch.int64)
    d = to_device(t, torch.device("cuda"))
    assert d.device.type == "cuda" and torch.equal(d.cpu(), t)
