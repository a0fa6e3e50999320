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

import warnings

PREFIX = "commscope:"  # the loader's LABEL_PREFIX: the recorder's scopes and these are read alike


def label(name: str):
    """A context manager (and decorator) that labels the collectives launched inside it `name`."""
    from torch.profiler import record_function

    from commscope.recording.api import check_name, check_not_reserved

    check_name(name, "a label")
    check_not_reserved(name, "label")

    return record_function(f"{PREFIX}{name}:")  # the empty phase keeps a ":" in `name` inside the label


def size_labels(named_parameters, group=None, element_size: int | None = None, *, flat: bool = False,
                world_size: int | None = None) -> dict[str, list[int]]:
    """A size → label map for `--label-map` (commscope.load.label_map): label → the sorted distinct byte
    sizes (numel × element size) of its parameters, ready for `json.dump`.

    `named_parameters`: `(name, tensor)` pairs, e.g. `model.named_parameters()`, or a dict of them (a
    module is taken as its `named_parameters()`). `group(name)` gives a parameter's label (None leaves it
    out); by default the name with its layer indices collapsed, `blocks.3.attn.qkv.weight` →
    `blocks.*.attn.qkv.weight`, where the parameters it collapses together are all of one size (layers of
    one shape); parameters whose collapsed names meet at different sizes keep their own names (an
    `nn.Sequential`'s `0.weight` and `2.weight` are different layers, not one repeated).
    `element_size`: bytes per element when the collectives move another dtype than the parameters' (bf16
    gradients of fp32 weights: 2); default each tensor's own. The sizes are what a collective of one whole
    parameter moves; a bucket or flat-parameter collective (DDP, FSDP) matches only its own total size.
    `flat=True`: one size per label, the sum of its parameters', what FSDP2's all-gather and reduce-scatter
    of one `fully_shard`ed module move (`group` then names the module a parameter belongs to: by default
    its name without the last part, `layers.0.weight` → `layers.0`); `world_size`: each parameter's dim 0
    padded to a multiple of it first, as FSDP2 shards a parameter into equal chunks of dim 0.
    """
    if hasattr(named_parameters, "named_parameters"):
        named_parameters = named_parameters.named_parameters()
    elif isinstance(named_parameters, dict):  # name → tensor, as model.state_dict() gives
        named_parameters = named_parameters.items()
    if element_size is not None and (not isinstance(element_size, int) or isinstance(element_size, bool)
                                     or element_size <= 0):
        raise ValueError(f"element_size is a positive number of bytes, got {element_size!r}")
    if world_size is not None and (not isinstance(world_size, int) or isinstance(world_size, bool) or world_size <= 0):
        raise ValueError(f"world_size is a positive number of ranks, got {world_size!r}")
    if flat and group is None:
        group = _module_of
    members: dict[str, list[tuple[str, int]]] = {}
    for item in named_parameters:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"size_labels takes (name, tensor) pairs such as model.named_parameters(), got "
                            f"{type(item).__name__} (model.parameters() has no names)")
        name, p = item
        key = group(name) if group is not None else collapse_indices(name)
        if key is None:
            continue
        if not isinstance(key, str) or not key:
            raise ValueError(f"group({name!r}) returned {key!r}: a label is a non-empty string (None: left out)")
        n = _padded_numel(p, world_size) * (element_size if element_size is not None else int(p.element_size()))
        if n > 0:
            members.setdefault(key, []).append((name, n))
    out: dict[str, set[int]] = {}
    for key, ms in members.items():
        if flat:  # one buffer of the module's parameters
            out[key] = {sum(n for _, n in ms)}
        elif group is None and len({n for _, n in ms}) > 1:  # not one layer repeated: each keeps its name
            for name, n in ms:
                out.setdefault(name, set()).add(n)
        else:
            out.setdefault(key, set()).update(n for _, n in ms)
    shared = sorted({n for k, v in out.items() for n in v if sum(n in w for w in out.values()) > 1})
    if shared:  # e.g. a LayerNorm's weight and bias: such a collective gets "a|b" (docs/traces.md)
        warnings.warn(f"size_labels: {len(shared)} size(s) belong to more than one label (e.g. {shared[0]} bytes); "
                      "collectives of those sizes will be labelled with all of them joined by '|'; pass group= "
                      "to merge such parameters under one label", stacklevel=3)
    return {k: sorted(v) for k, v in out.items()}


def _module_of(name: str) -> str:
    """A parameter's module path: its name without the last part (`layers.0.weight` → `layers.0`)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def _padded_numel(p, world_size: int | None) -> int:
    """numel, with dim 0 padded to a multiple of `world_size` (FSDP2's equal shards) where given."""
    n = int(p.numel())
    shape = tuple(getattr(p, "shape", ()))
    if world_size is None or not shape or shape[0] == 0:
        return n
    rows = -(-int(shape[0]) // world_size) * world_size
    return n // int(shape[0]) * rows


def collapse_indices(name: str) -> str:
    """A parameter name with its numeric parts (layer indices) as `*`: `blocks.3.attn.qkv.weight` →
    `blocks.*.attn.qkv.weight`."""
    return ".".join("*" if part.isdigit() else part for part in name.split("."))
