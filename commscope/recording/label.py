"""`commscope.label("attn")`: name the collectives launched inside it, in any torch.profiler trace.

A training script wraps a collective call (a plain loop, a DDP or FSDP communication hook):

    with commscope.label("attn"):
        dist.reduce_scatter_tensor(out, grad, async_op=True)

It is nothing but `torch.profiler.record_function("commscope:attn:")`, the scope the recorder itself
opens around each collective (`commscope:<label>:<phase>`, here with no phase): under the stock
torch.profiler the trace carries a user annotation of that name around the collective's launch, and the
Kineto loader labels the collective with its innermost enclosing such scope on the launching thread
(commscope.load.kineto_comms). No other commscope code runs in the training process; without a running
profiler the scope costs what an unobserved record_function costs.

Invariant: this module imports torch only, never the recorder (docs/recording.md, "Labels in any trace").
"""
from __future__ import annotations

PREFIX = "commscope:"  # the loader's LABEL_PREFIX: the recorder's scopes and these are read alike


def label(name: str):
    """A context manager (and decorator) that labels the collectives launched inside it `name`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a label is a non-empty string, got {name!r}")
    from torch.profiler import record_function

    return record_function(f"{PREFIX}{name}:")  # the empty phase keeps a ":" in `name` inside the label
