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


def rounded_floats(values: Sequence[float] | np.ndarray, nd: int = 4) -> list:
    """`[rounded(x, nd) for x in values]` for a column of floats (a float64 array or a list), equal to it
    float for float, without a Python `round` per value: a column of `report --json` has ~10⁵ cells at 64
    ranks.

    Why it is exact: Python's `round(x, nd)` is the double nearest to k / 10**nd, k the integer nearest to
    the exact x · 10**nd. numpy computes y = fl(x · 10**nd), within half an ulp of the exact product; where
    |y| < 2**31 that error is under 2**-22, so where y is more than _NEAR_HALF from a half, rint(y) is that
    same k, and k / 10**nd (both exact doubles, one correctly rounded division) is that same double. The
    values near a half, beyond 2**31 or with nd outside 0..15 take Python's `round`."""
    a = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(a)
    if not 0 <= nd <= 15:
        return [round(x, nd) if ok else None for x, ok in zip(a.tolist(), finite.tolist())]
    scale = 10.0 ** nd
    with np.errstate(invalid="ignore", over="ignore"):
        y = a * scale
        fast = finite & (np.abs(y) < 2.0 ** 31) & (np.abs(np.abs(y - np.trunc(y)) - 0.5) > _NEAR_HALF)
        out = (np.rint(y) / scale).astype(object)
    out[~finite] = None
    for i in np.flatnonzero(finite & ~fast).tolist():
        out[i] = round(float(a[i]), nd)
    return out.tolist()


_NEAR_HALF = 1e-5  # far above rounded_floats' worst product error (2**-22 ≈ 2.4e-7)


def whole(x: Any) -> Any:
    """A byte count for JSON: an int when it is whole (77266944, not 77266944.0), else `rounded`."""
    r = rounded(x)
    return int(r) if isinstance(r, float) and r.is_integer() and abs(r) < 2 ** 63 else r  # JSON's int64


def whole_floats(values: Sequence[float] | np.ndarray) -> list:
    """`[whole(x) for x in values]` for a column of floats (a float64 array or a list), value for value and
    type for type: a whole float below 2**63 is already `whole`'s int (rounding it to 4 decimals gives it
    back), so only the others go through `rounded_floats`."""
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        integral = np.isfinite(a) & (a == np.trunc(a)) & (np.abs(a) < 2.0 ** 63)
    out = np.empty(len(a), dtype=object)
    out[integral] = a[integral].astype(np.int64).tolist()
    rest = np.flatnonzero(~integral)
    out[rest] = [int(r) if r is not None and r.is_integer() and abs(r) < 2 ** 63 else r
                 for r in rounded_floats(a[rest])]
    return out.tolist()


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
