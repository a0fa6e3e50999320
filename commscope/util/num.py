"""Numeric helpers: JSON-ready numbers and tensor element counts.

Three ways of making a number JSON-ready, each with its own contract (callers' output depends on them
byte for byte, so they are not merged):
- `rounded(x, nd)`: the report's numbers — numpy → Python, NaN/±inf → None, floats rounded to `nd`
  decimals, everything else (ints, strings) unchanged (`rounded_floats`: the same for a list of floats);
- `sig(x, digits)`: `rounded` to `digits` significant digits (bandwidths span orders of magnitude);
- `rounded_float(x)`: HTA's table cells — anything `float()` accepts becomes a float rounded to 4 decimals
  (NaN → None, ints become floats), anything else is returned unchanged.

Two element counts of a list of tensor shapes, which mean different things:
- `total_numel(shapes)`: the elements of all tensors together (what a collective moves);
- `largest_numel(shapes)`: the elements of the largest tensor (the size an elementwise op works on).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def rounded(x: Any, nd: int = 4) -> Any:
    if x is None:
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) or math.isinf(x) else round(float(x), nd)
    return x


def rounded_floats(values: Sequence[float], nd: int = 4) -> list:
    """`[rounded(x, nd) for x in values]` for a column of Python floats (`ndarray.tolist()`), without a call
    per value: tens of thousands of cells in `report --json` at 64 ranks."""
    # x - x is 0.0 (false) for a finite float and NaN (true) for NaN and ±inf
    return [None if x - x else round(x, nd) for x in values]


def whole(x: Any) -> Any:
    """A byte count for JSON: an int when it is whole (77266944, not 77266944.0), else `rounded`."""
    r = rounded(x)
    return int(r) if isinstance(r, float) and r.is_integer() and abs(r) < 2 ** 63 else r  # JSON's int64


def whole_floats(values: Sequence[float]) -> list:
    """`[whole(x) for x in values]` for a column of Python floats, without two calls per value."""
    out = []
    for x in values:
        if x - x:  # NaN or ±inf
            out.append(None)
            continue
        r = round(x, 4)
        out.append(int(r) if r.is_integer() and abs(r) < 2 ** 63 else r)
    return out


def sig(x: Any, digits: int = 4) -> Any:
    """`x` rounded to `digits` significant digits: bandwidths span GB/s on NVLink down to a few MB/s on
    gloo with tiny tensors, where a fixed two decimals would print 0."""
    if x is None or not np.isfinite(x) or x == 0:
        return rounded(x)
    return rounded(float(x), max(0, digits - 1 - int(math.floor(math.log10(abs(float(x)))))))


def rounded_float(x: Any) -> Any:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return x
    return None if math.isnan(v) else round(v, 4)


def total_numel(shapes: Any) -> int:
    """Elements of all tensors of `shapes` together (a None shape counts as a scalar: 1 element)."""
    total = 0
    for s in shapes or []:
        n = 1
        for d in s or []:
            n *= int(d)
        total += n
    return total


def largest_numel(shapes: Sequence[Sequence[int]]) -> int:
    """Elements of the largest tensor of `shapes` (0 when none has dimensions). Only tensors count: an
    entry that is not a list of integers (a tensor list, a malformed shape) is not one."""
    return max((math.prod(d) for d in shapes if d and is_tensor_shape(d)), default=0)


def is_tensor_shape(d: Any) -> bool:
    """Whether `d` is one tensor's sizes: a list (or tuple) of integers, never bools."""
    return isinstance(d, (list, tuple)) and all(type(x) is int for x in d)
