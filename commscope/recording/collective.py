"""What a collective is, independent of when it ran: normalized op name, bytes, dtype, process group.

Bytes follow the nccl-tests "full array" convention so bandwidths computed from them are comparable to
nccl-tests' algbw/busbw: all_reduce and broadcast count the tensor, reduce_scatter its input (the whole
array), all_gather its output (the whole array), all_to_all its input.

Invariant: everything here is computed from the call's arguments alone (shapes and dtypes), never by
touching tensor data, so it costs no device synchronization.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from commscope.recording.api import OP_NAMES

# Name-based fallback: wrapped or newer functions (torch 2.13 adds *_single) still get a normal name.
_BY_NAME = {
    "all_reduce": "all_reduce",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",
    "all_gather": "all_gather",
    "_all_gather_base": "all_gather",
    "broadcast": "broadcast",
    "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all",
    "barrier": "barrier",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "isend": "send",
    "irecv": "recv",
}

# Ops whose full array is the *output* (first argument) rather than the input.
_OUTPUT_IS_FULL = {"all_gather"}


def op_name(fn: Callable) -> str:
    name = OP_NAMES.get(fn)
    if name is not None:
        return name
    raw = getattr(fn, "__name__", type(fn).__name__)
    return _BY_NAME.get(raw, raw)


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for t in x:
            found = _first_tensor(t)
            if found is not None:
                return found
    return None


_OUT_KW = ("output", "output_tensor", "output_tensor_list", "tensor_list")
_IN_KW = ("input", "input_tensor", "input_list", "input_tensor_list", "tensor")
_TENSOR_KW = frozenset(_OUT_KW + _IN_KW)


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def comm_size(op: str, args: Sequence[Any], kwargs: dict, group_size: int) -> tuple[int, str | None]:
    """(full-array bytes, dtype name) of a collective call, from its arguments.

    Runs once per recorded collective, on the step's critical path: the keyword lookups are skipped
    when no tensor is passed by keyword (the usual call: tensors positional, `group=` at most)."""
    tensors = [a for a in args if isinstance(a, (torch.Tensor, list, tuple))]
    if kwargs and not _TENSOR_KW.isdisjoint(kwargs):
        out = next((kwargs[k] for k in _OUT_KW if k in kwargs), None)
        inp = next((kwargs[k] for k in _IN_KW if k in kwargs), None)
    else:
        out = inp = None
    if op in ("all_reduce", "broadcast", "reduce", "send", "recv"):
        full = inp if inp is not None else (tensors[0] if tensors else None)
        nbytes = _nbytes(full)
    elif op in ("reduce_scatter", "all_to_all"):
        # (output, input): input is the full array; reduce_scatter(list form) input is a list
        full = inp if inp is not None else (tensors[1] if len(tensors) > 1 else None)
        nbytes = _nbytes(full)
    elif op in ("gather", "scatter"):
        # the full array is group-size times each rank's part: the `tensor` every rank passes (gather_list /
        # scatter_list exist on the root only), so every member records the same size
        full = inp if inp is not None else (tensors[0] if tensors else None)
        nbytes = _nbytes(full) * group_size
    elif op in _OUTPUT_IS_FULL:
        full = out if out is not None else (tensors[0] if tensors else None)
        nbytes = _nbytes(full)
        if isinstance(full, torch.Tensor) and full.numel() == 0 and len(tensors) > 1:
            nbytes = _nbytes(tensors[1]) * group_size
    else:
        full = tensors[0] if tensors else None
        nbytes = _nbytes(full)
    first = _first_tensor(full)
    dtype = _dtype_name(first.dtype) if first is not None else None
    return nbytes, dtype


def _group_name(pg: Any) -> str:
    """The process group's name through torch's private lookup; where a torch lacks it, a name every
    member computes alike: its global ranks."""
    lookup = getattr(dist, "_get_process_group_name", None)
    if lookup is not None:
        return lookup(pg)
    return "ranks:" + ",".join(map(str, dist.get_process_group_ranks(pg)))


class GroupInfo:
    """Name and size of process groups, cached per group object (both are fixed for a group's life)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[tuple[str, int], Any]] = {}

    def __call__(self, group: Any) -> tuple[str, int]:
        key = id(group)
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0]
        if not (dist.is_available() and dist.is_initialized()):
            info = ("local", 1)
        else:
            pg = group if group is not None else dist.group.WORLD
            name = getattr(pg, "group_name", None) or _group_name(pg)
            info = (str(name), dist.get_world_size(pg))
        self._cache[key] = (info, group)  # holding the group keeps its id from being reused
        return info
