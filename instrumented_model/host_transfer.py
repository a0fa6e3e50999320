"""Host ↔ device transfers that do not make the host wait for more than it needs.

Why: on CUDA the host runs ahead of the GPU only while nothing it calls synchronizes. Two calls in a
training loop do by default: a batch copied from pageable memory (CUDA first synchronizes the stream),
and `loss.item()`, which waits for *everything* queued on the stream, including a next step already
launched. On an H200 reading each loss one step late with `.item()` gains only 0.5%, because the late
read still waits for the step after it.

- `to_device`: a batch goes through pinned memory and is queued like a kernel.
- `PendingScalar`: a device scalar copied to pinned memory right after the work that produced it, with a
  CUDA event behind the copy; `item()` waits for that event only, so a loop can launch step s+1 and then
  read step s's loss while step s+1 runs.

Invariants: `PendingScalar.item()` returns the value the tensor held when the PendingScalar was made,
whatever later work does to the tensor or its memory (CUDA graphs reuse output memory); on CPU both are
plain reads (CPU ops are synchronous).
"""
from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a CPU batch to `device` without making the host wait: a copy from pageable memory first
    synchronizes the stream (CUDA's rule), which would hold the host until the previous step is done;
    from pinned memory it is queued like a kernel."""
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


class PendingScalar:
    """A scalar on its way to the host; `item()` waits only for the work queued before it was made."""

    __slots__ = ("_host", "event")

    def __init__(self, value: torch.Tensor, timing: bool = False):
        """`timing`: make `event` a timing event, so a loop can measure device time between two of them
        (CUDA; on CPU `event` is None)."""
        value = value.detach()
        if value.device.type == "cuda":
            # The caching host allocator recycles these pinned buffers, so one per step costs no cudaHostAlloc.
            self._host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            self._host.copy_(value, non_blocking=True)
            self.event = torch.cuda.Event(enable_timing=timing)
            self.event.record()
        else:
            self._host, self.event = value.clone(), None

    def ready(self) -> bool:
        """Whether `item()` would return without waiting."""
        return self.event is None or self.event.query()

    def item(self) -> float:
        if self.event is not None:
            self.event.synchronize()
        return self._host.item()
