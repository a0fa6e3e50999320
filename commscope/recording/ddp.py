"""DDP integration: a comm hook that records each gradient bucket's all_reduce (docs/recording.md, "DDP").

`model.register_comm_hook(state=None, hook=ddp_comm_hook(rec))` replaces DDP's built-in all_reduce with
torch's `allreduce_hook` computation (divide the bucket by the group size, all_reduce it, hand DDP the
averaged buffer) launched through `rec.collective`, so every bucket becomes a collective record.

The blocked wait is what makes the record useful, and DDP never calls `wait()` on a handle: its reducer
waits for each bucket's future inside `backward()` (finalize_backward, queued on the autograd engine when
the last bucket is marked ready). So the first bucket of each backward queues an engine callback of its
own; callbacks run in the order queued, so it runs at the end of the backward pass just before DDP's
finalize, and waits on this backward's handles in bucket order, the wait DDP would do next. The recorder
records those waits like any `handle.wait()`; DDP then finds its futures complete.
"""
from __future__ import annotations

from typing import Any, Callable, Union

import torch
import torch.distributed as dist

from commscope.recording.api import CollectiveHandle, NullRecorder

Label = Union[str, Callable[[Any], str]]


def _labeller(label: Label) -> Callable[[Any], str]:
    if callable(label):
        return lambda bucket: str(label(bucket))
    if not isinstance(label, str) or not label:
        raise ValueError(f"ddp_comm_hook: label must be a non-empty str (a prefix) or a callable, not {label!r}")
    return lambda bucket: f"{label}{bucket.index()}"


def _queue_callback(fn: Callable[[], None]) -> bool:
    """Queue `fn` to run at the end of the current backward pass; False outside one (DDP's join runs the
    hook from `forward` to shadow a finished rank's buckets, and waits on them itself)."""
    try:
        torch.autograd.Variable._execution_engine.queue_callback(fn)
    except RuntimeError:
        return False
    return True


def ddp_comm_hook(rec: NullRecorder, label: Label = "ddp_bucket", phase: str = "allreduce") -> Callable:
    """A DDP comm hook that averages each gradient bucket like torch's `allreduce_hook` and records it.

    `label`: a prefix, the bucket's index appended (`"ddp_bucket"` → `ddp_bucket0`, `ddp_bucket1`, …; DDP
    numbers buckets in launch order, bucket 0 holding the last layers' gradients after the first step's
    rebuild), or a callable `GradBucket → str`. `phase`: the records' phase.
    The hook's `state` is the process group, as for `allreduce_hook` (None: the default group).
    With `NullRecorder` (`trace="off"`) the hook computes the same and records nothing."""
    name = _labeller(label)
    handles: list[CollectiveHandle] = []  # this backward's buckets, in launch (= bucket index) order

    def wait_buckets() -> None:
        pending = handles[:]
        del handles[:]
        for h in pending:  # DDP's finalize waits in bucket order too: the same blocked time, recorded
            h.wait()

    # Unannotated: DDP rejects a hook whose `bucket` or return annotation is not GradBucket / Future[Tensor],
    # and this module's annotations are strings.
    def hook(state, bucket):
        group = state
        if bucket.index() == 0:
            # DDP launches bucket 0 first in every backward (the reducer launches strictly in index order).
            # Handles left from a backward that raised before its callbacks ran are dropped, not waited on.
            del handles[:]
            queued = _queue_callback(wait_buckets)
        else:
            queued = bool(handles)
        size = (group if group is not None else dist.group.WORLD).size()
        tensor = bucket.buffer()
        tensor.div_(size)  # before the sum, as allreduce_hook does (no fp16 overflow); same bits as it
        h = rec.collective(dist.all_reduce, tensor, group=group, label=name(bucket), phase=phase)
        if queued:
            handles.append(h)
        return h.work.get_future().then(lambda fut: fut.value()[0])

    return hook
