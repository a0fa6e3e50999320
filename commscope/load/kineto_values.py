"""The values of a decoded Kineto trace (`kineto_events.Events`), checked before they are shaped into frames:
`check_values` drops events whose times cannot be used and exact duplicates; `check_shapes` takes an op's
shapes as unknown where they are not shapes or are beyond the MAX_SHAPE_* bounds. Both count what they
drop or set aside, by reason, in `ev.dropped` (kineto.parse_file words them as problem lines).

Why separately from decoding: both readers of kineto_events (typed and generic) hand over values as the
file had them, and a user's trace can hold anything JSON can (NaN, 400-digit numbers, strings for ids,
shapes of millions of dimensions); one place decides what is usable, for either reader.

Invariant: nothing here raises on a value: a bad value is a dropped event or an unknown shape, counted.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kineto_events imports this module's bounds: the type only, to keep the import one-way
    from commscope.load.kineto_events import Events

# The reasons an event is left out whole (not kept with a value taken as unknown): kineto.parse_file counts
# the events dropped for them (its `left_out`, the Trace's config["events_left_out"])
LEFT_OUT = ("with a non-finite or out-of-range ts/dur", "with a negative duration")


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Per kind of event: its columns, those that identify an event (an exact duplicate repeats all of them),
# and what it is called in a problem line.
_KINDS = {
    "k": (("name", "ts", "dur", "stream", "corr", "ext", "grid", "block", "kind"), ("name", "ts", "dur", "stream", "corr"),
          "device"),
    "l": (("corr", "tid", "ts", "ext"), ("corr", "tid", "ts"), "runtime launch"),
    "o": (("name", "tid", "ts", "dur", "ext", "dims", "strides", "types", "hta_stream", "args"),
          ("name", "tid", "ts", "dur", "ext"), "cpu op"),
    "a": (("name", "tid", "ts", "dur"), ("name", "tid", "ts", "dur"), "annotation"),
    "p": (("name", "tid", "ts", "dur"), ("name", "tid", "ts", "dur"), "Python frame"),
}
NS_LIMIT = 2.0 ** 62  # times in ns must fit int64 with room for differences


def check_values(ev: Events) -> None:
    """Drop events whose times cannot be used (non-finite, out of int64 ns range, negative duration) and
    exact duplicates (an event written twice: merged or re-saved traces), counting each reason in
    `ev.dropped`; thread ids that are not a number or a string become their text (`_ids`). Work is numpy
    on the time columns; rows are only rebuilt for a kind that has bad ones."""
    import numpy as np

    _ids(ev)
    # a ts of 1e308 overflows to inf in ns: that is how it is found out of range, and said once, as a drop
    with np.errstate(over="ignore", invalid="ignore"):
        _check_times(ev, float(ev.base))


def _check_times(ev: Events, base: float) -> None:
    import numpy as np

    for kind, (cols, key, what) in _KINDS.items():
        ts = _floats(getattr(ev, f"{kind}_ts"))
        if not len(ts):
            continue
        ok = np.isfinite(ts) & (np.abs(base + ts * 1000.0) < NS_LIMIT)
        bad_time = int(len(ts) - ok.sum())
        neg = 0
        if "dur" in cols:
            dur = _floats(getattr(ev, f"{kind}_dur"))
            good_dur = np.isfinite(dur) & (dur * 1000.0 < NS_LIMIT)
            bad_time += int((ok & ~good_dur).sum())
            ok &= good_dur
            neg_mask = ok & (dur < 0)
            neg = int(neg_mask.sum())
            ok &= ~neg_mask
        if bad_time:
            ev.drop(f"{what} event(s) {LEFT_OUT[0]}", bad_time)
        if neg:
            ev.drop(f"{what} event(s) {LEFT_OUT[1]}", neg)
        dup = _duplicates(ev, kind, key, ts, ok)
        if dup:
            ev.drop(f"{what} event(s) duplicated (identical events; one of each kept)", len(dup))
        if bad_time or neg or dup:
            rows = [i for i in np.flatnonzero(ok).tolist() if i not in dup]
            _take(ev, kind, cols, rows)
    ts = _floats(ev.gpu_step_ts)
    dur = _floats(ev.gpu_step_dur)
    if len(ts):
        ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & (np.abs(base + ts * 1000.0) < NS_LIMIT) & \
            (dur * 1000.0 < NS_LIMIT)
        if not ok.all():
            ev.drop("GPU ProfilerStep annotation(s) with a non-finite, out-of-range or negative ts/dur",
                    int(len(ok) - ok.sum()))
            for c in ("name", "ts", "dur"):
                setattr(ev, f"gpu_step_{c}", [v for v, f in zip(getattr(ev, f"gpu_step_{c}"), ok) if f])


def _floats(values: list):
    """`values` (numbers, as the readers keep them) as float64; an integer beyond float range (JSON allows
    `1` followed by 400 zeros) becomes inf, which check_values then drops as out of range."""
    import numpy as np

    try:
        return np.asarray(values, dtype=np.float64)
    except OverflowError:
        return np.array([v if not isinstance(v, int) or abs(v) < 2 ** 1000 else math.inf if v > 0 else -math.inf
                         for v in values], dtype=np.float64)


def _ids(ev: Events) -> None:
    """Thread ids that are not a number or a string (null, an object, a list) or are NaN, as their text: ids
    are grouped and matched by value, which needs them hashable and equal to themselves (a null or NaN id
    would be dropped by every grouping, as if the event had no thread). Each replaced id is counted in
    `ev.dropped`."""
    for kind in ("o", "l", "a", "p"):
        col = getattr(ev, f"{kind}_tid")
        types = set(map(type, col))
        if types <= _ID_TYPES and (float not in types or not any(t != t for t in col)):
            continue
        n = 0
        for i, t in enumerate(col):
            if type(t) not in _ID_TYPES or t != t:
                col[i] = str(t)
                n += 1
        ev.drop(f"{_KINDS[kind][2]} event(s) with a tid that is not a number or a string (taken as its text)", n)


_ID_TYPES = {int, str, float}


# --- checking the shapes -------------------------------------------------------------------------------

# An op's `Input Dims` / `Input Strides` beyond these are not a real op's (a corrupt or hostile trace): the
# op's shape is unknown (None), as if not recorded, and the ops so treated are counted in `ev.dropped`.
# Real ops stay well inside them (the fixtures' largest: 300 arguments, 3-deep tensor lists).
# - dimensions of one tensor: PyTorch's kernels index at most 25 (TensorIterator's MAX_DIMS)
MAX_SHAPE_DIMS = 64
# - tensors of one op, tensor-list members counted: a foreach op over every parameter of a large model
#   has thousands
MAX_SHAPE_TENSORS = 1 << 14
# - elements of all its tensors: bytes moved (elements × ≤ 16-byte elements) stay far inside int64
MAX_SHAPE_NUMEL = 1 << 52
# - a dimension or stride: int64 with room for products and sums
MAX_SHAPE_VALUE = 1 << 62
# - the JSON text of one of them: the typed reader leaves a longer one undecoded, so a 200 MB list
#   costs no memory beyond the file's bytes (MAX_SHAPE_TENSORS 4-d tensors of 5-digit sizes are ~0.5 MB)
MAX_SHAPE_BYTES = 1 << 21
# Kernel launch shapes: `grid` / `block` are 3 CUDA dimensions, each below 2^32.
MAX_LAUNCH_DIM = 1 << 32


NOT_A_SHAPE = "that is not a shape"  # in the problem line of ops whose shapes are unknown (analyze.layout_report)


def check_shapes(ev: Events) -> None:
    """Make the shapes the readers kept usable or None: cpu ops' `Input Dims` / `Input Strides` (a list per
    argument: [] for a non-tensor, a tensor's integer sizes, or a tensor list's shapes) and `Input type` (a
    list of strings), the `nccl:` annotations' shapes, kernels' `grid` / `block` (up to 3 integers; a
    string such as Triton's `grid(100,)` is kept as it is). Anything else, beyond the MAX_SHAPE_* limits
    included, becomes None (unknown shape), counted per kind in `ev.dropped`. Shared objects (the typed
    reader's) are judged once."""
    bad: set[int] = set()
    for name, ok in (("o_dims", _dims_ok), ("o_strides", _strides_ok), ("o_types", _types_ok)):
        bad.update(_clean(getattr(ev, name), ok))
    if bad:
        ev.drop(f"cpu op event(s) with an Input Dims, Input Strides or Input type {NOT_A_SHAPE} (wrong types, "
                f"or beyond {MAX_SHAPE_DIMS} dimensions, {MAX_SHAPE_TENSORS} tensors, 2^52 elements or "
                f"{MAX_SHAPE_BYTES >> 20} MiB of JSON; taken as unknown)", len(bad))
    n = 0
    for i, (dims, types) in list(ev.a_shapes.items()):
        d = dims if dims is None or _dims_ok(dims) else None
        t = types if types is None or _types_ok(types) else None
        if d is not dims or t is not types:
            ev.a_shapes[i] = (d, t)
            n += 1
    if n:
        ev.drop("annotation event(s) with an Input Dims or Input type that is not a shape (taken as unknown)", n)
    bad = set(_clean(ev.k_grid, _launch_ok)) | set(_clean(ev.k_block, _launch_ok))
    if bad:
        ev.drop("device event(s) with a grid or block that is not up to 3 integers below 2^32 (taken as unknown)",
                len(bad))


def _clean(col: list, ok) -> list[int]:
    """Set to None the values of `col` that are not None and fail `ok`; their positions."""
    verdict: dict[int, bool] = {}
    bad = []
    for i, v in enumerate(col):
        if v is None:
            continue
        good = verdict.get(id(v))
        if good is None:
            good = verdict[id(v)] = ok(v)
        if not good:
            col[i] = None
            bad.append(i)
    # (an id stays unique: a list freed by the replacement above can only be succeeded, at its address, by
    # an object made later, and every value of `col` was made before)
    return bad


def _launch_ok(v: Any) -> bool:
    if isinstance(v, str):
        return True
    return isinstance(v, list) and len(v) <= 3 and all(is_int(x) and 0 <= x < MAX_LAUNCH_DIM for x in v)


def _types_ok(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_SHAPE_TENSORS and all(isinstance(t, str) for t in v)


def _dims_ok(v: Any) -> bool:
    return _shape_ok(v, True)


def _strides_ok(v: Any) -> bool:
    return _shape_ok(v, False)


def _shape_ok(v: Any, dims: bool) -> bool:
    """Whether `v` is an op's shapes (check_shapes): lengths are checked before elements, so a huge list
    costs no more than the limits."""
    if not isinstance(v, list) or len(v) > MAX_SHAPE_TENSORS:
        return False
    tensors = 0
    numel = 0
    for arg in v:
        if not isinstance(arg, list):
            return False
        members = arg if arg and isinstance(arg[0], list) else (arg,)  # a tensor list, or one tensor
        tensors += len(members)
        if tensors > MAX_SHAPE_TENSORS:
            return False
        for t in members:
            if not isinstance(t, list) or len(t) > MAX_SHAPE_DIMS:
                return False
            if not all(type(x) is int and 0 <= x < MAX_SHAPE_VALUE for x in t):
                return False
            if dims:
                numel += math.prod(t)
                if numel > MAX_SHAPE_NUMEL:
                    return False
    return True


def _duplicates(ev: Events, kind: str, key: tuple, ts, ok) -> set[int]:
    """Rows (among `ok`) that repeat an earlier row's identifying fields. Only rows sharing a timestamp
    with another can: those are found by one sort, and only they are compared field by field."""
    import numpy as np

    idx = np.flatnonzero(ok)
    if len(idx) < 2:
        return set()
    t = ts[idx]
    order = np.argsort(t, kind="stable")
    same = np.flatnonzero(t[order][1:] == t[order][:-1])
    if not len(same):
        return set()
    cand = np.unique(np.concatenate([order[same], order[same + 1]]))
    cols = [getattr(ev, f"{kind}_{c}") for c in key]
    seen: set = set()
    dup: set[int] = set()
    for i in sorted(idx[cand].tolist()):
        k = tuple(_hashable(c[i]) for c in cols)
        if k in seen:
            dup.add(i)
        else:
            seen.add(k)
    return dup


def _hashable(v: Any) -> Any:
    return repr(v) if isinstance(v, (list, dict)) else v


def _take(ev: Events, kind: str, cols: tuple, rows: list[int]) -> None:
    for c in cols:
        name = f"{kind}_{c}"
        v = getattr(ev, name)
        if hasattr(v, "take"):  # kineto_events._OpArgs: the typed reader's lazy `args`, taken by row
            setattr(ev, name, v.take(rows))
        elif len(v):  # the typed reader leaves o_strides / o_types empty without ops
            setattr(ev, name, [v[i] for i in rows])
