"""Interval-set arithmetic on numpy arrays: the basis of every "exposed" and "overlap" number.

An interval set is a pair `(starts, ends)` of equal-length int64/float arrays. Intervals are half-open
[start, end): touching intervals do not overlap and merge into one. Functions returning sets return
*normalized* sets: sorted, disjoint, non-touching, no empty intervals. Inputs to `intersect`,
`subtract` and `covered` may be unnormalized; they are normalized first. All operations are vectorized
(sorting and searchsorted), O((n + m) log(n + m)). `assign_lanes` packs intervals into
non-overlapping lanes (timeline rows, Perfetto tracks). `rows_by_rank` splits a frame's rows by rank
once, for the per-rank sets every analysis builds.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]


NO_ROWS = np.empty(0, dtype=np.intp)


def rows_by_rank(ranks) -> dict:
    """{rank: positions of its rows, in row order} for a frame's rank column, in one stable sort.

    A boolean mask per rank (`ranks == rank`) reads every row once per rank, O(ranks × rows): at a
    thousand ranks that, not the interval arithmetic, is what a per-rank loop costs. Ranks absent from
    `ranks` are absent from the dict (`.get(rank, NO_ROWS)`); keys are Python values, so a lookup by an
    int or a numpy integer finds the same rows."""
    r = np.asarray(ranks)
    if not len(r):
        return {}
    order = np.argsort(r, kind="stable")
    sr = r[order]
    first = np.flatnonzero(np.r_[True, sr[1:] != sr[:-1]])
    bounds = np.r_[first, len(sr)]
    return {(k.item() if isinstance(k, np.generic) else k): order[a:b]
            for k, a, b in zip(sr[first], bounds[:-1], bounds[1:])}


def merge_by_rank(rank_col, starts, ends, ranks) -> dict:
    """{rank: merge(its rows' starts, ends)} for each of `ranks` (an empty set where it has no rows);
    `rank_col` says each row's rank."""
    rows = rows_by_rank(rank_col)
    s, e = np.asarray(starts), np.asarray(ends)
    out = {}
    for rank in ranks:
        m = rows.get(rank, NO_ROWS)
        out[rank] = merge(s[m], e[m])
    return out


def empty() -> Intervals:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)


def merge(starts, ends) -> Intervals:
    """Normalize: sort, drop empty intervals, merge overlapping or touching ones."""
    s = np.asarray(starts)
    e = np.asarray(ends)
    if is_normal(s, e):  # sets pass through several operations, each normalizing its inputs again
        return s.copy(), e.copy()
    keep = e > s  # also drops NaN
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], run_end[last]


def is_normal(s: np.ndarray, e: np.ndarray) -> bool:
    """Whether (s, e) is already normalized (what `merge` would return unchanged); False for NaN."""
    return bool((e > s).all() and (s[1:] > e[:-1]).all())


def union(a: Intervals, b: Intervals) -> Intervals:
    return merge(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    a, b = merge(*a), merge(*b)
    (as_, ae), (bs, be) = a, b
    if len(as_) == 0 or len(bs) == 0:
        return as_[:0], ae[:0]
    j0 = np.searchsorted(be, as_, side="right")  # first b ending after a starts
    j1 = np.searchsorted(bs, ae, side="left")  # b's starting before a ends
    ai, bj = expand(j0, j1)
    s = np.maximum(as_[ai], bs[bj])
    e = np.minimum(ae[ai], be[bj])
    keep = e > s
    return s[keep], e[keep]


def expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with lo[i] <= j < hi[i], as two arrays (i ascending, then j): the candidate pairs two
    searchsorted calls delimit, made without a Python loop."""
    n = np.maximum(np.asarray(hi) - np.asarray(lo), 0)
    i = np.repeat(np.arange(len(n)), n)
    return i, np.repeat(lo, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))


def complement(a: Intervals, lo, hi) -> Intervals:
    """The gaps of `a` within [lo, hi)."""
    s, e = merge(*a)
    gs = np.concatenate([[lo], e])
    ge = np.concatenate([s, [hi]])
    gs, ge = np.maximum(gs, lo), np.minimum(ge, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    a = merge(*a)
    if len(a[0]) == 0:
        return a
    return intersect(a, complement(b, a[0][0], a[1][-1]))


def length(a: Intervals) -> float:
    s, e = merge(*a)
    return float(np.sum(e - s))


def covered(qs, qe, a: Intervals) -> np.ndarray:
    """For each query [qs[i], qe[i]), how much of it lies inside the set `a` (vectorized, via the
    cumulative covered-length function of the normalized set)."""
    s, e = merge(*a)
    qs = np.asarray(qs, dtype=np.float64)
    qe = np.asarray(qe, dtype=np.float64)
    if len(s) == 0:
        return np.zeros(len(qs))
    s = s.astype(np.float64)
    e = e.astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right") - 1
        inside = np.clip(t - s[np.maximum(i, 0)], 0.0, (e - s)[np.maximum(i, 0)])
        return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0.0)

    out = upto(qe) - upto(qs)
    return np.where(qe > qs, np.maximum(out, 0.0), 0.0)


def assign_lanes(starts: Iterable[float], ends: Iterable[float]) -> np.ndarray:
    """Greedy interval-graph colouring: lane index per interval so that intervals in one lane never overlap.

    Intervals are visited by start time; each goes to the lowest-numbered lane that is free at its start
    (touching end == start counts as free). The number of lanes equals the maximum nesting depth, which
    is optimal for interval graphs.
    """
    s = np.asarray(list(starts) if not isinstance(starts, np.ndarray) else starts, dtype=np.float64)
    e = np.asarray(list(ends) if not isinstance(ends, np.ndarray) else ends, dtype=np.float64)
    lanes = np.zeros(len(s), dtype=np.int64)
    lane_end: list[float] = []
    for i in np.argsort(s, kind="stable"):
        for lane, free_at in enumerate(lane_end):
            if free_at <= s[i]:
                lanes[i] = lane
                lane_end[lane] = e[i]
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(e[i])
    return lanes
