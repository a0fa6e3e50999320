"""`commscope.label("attn")`: name the collectives launched inside it, in any torch.profiler trace.

A training script wraps a collective call (a plain loop, a DDP or FSDP communication hook):

    with commscope.label("attn"):
        dist.reduce_scatter_tensor(out, grad, async_op=True)

It is nothing but `torch.profiler.record_function("commscope.label:attn")`: under the stock
torch.profiler the trace carries a user annotation of that name around the collective's launch, and
commscope maps the collective to its innermost enclosing `commscope.label:*` scope
(commscope.analyze.labels). No other commscope code runs in the training process; without a running
profiler the scope costs what an unobserved record_function costs.

Invariant: this module imports torch only, never the recorder (docs/recording.md, "Labels in any trace").
"""
from __future__ import annotations

PREFIX = "commscope.label:"


def label(name: str):
    """A context manager (and decorator) that labels the collectives launched inside it `name`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a label is a non-empty string, got {name!r}")
    from torch.profiler import record_function

    return record_function(PREFIX + name)
