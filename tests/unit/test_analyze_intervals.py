"""Interval-set arithmetic: hand-built cases with known answers, and a brute-force cross-check on a grid."""
import numpy as np
from hypothesis import given, settings, strategies as st

from commscope.analyze import intervals as iv


def A(*pairs):
    return np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64)


def pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist()))


def test_merge_sorts_merges_touching_and_drops_empty():
    assert pairs(iv.merge(*A((5, 8), (0, 3), (3, 4), (10, 10), (7, 9)))) == [(0, 4), (5, 9)]
    assert pairs(iv.merge(*A((0, 10), (2, 3), (4, 5)))) == [(0, 10)]


def test_is_normal_only_for_what_merge_returns_unchanged():
    assert iv.is_normal(*A((0, 3), (4, 8))) and iv.is_normal(*A())
    for not_normal in (A((0, 3), (3, 8)), A((4, 8), (0, 3)), A((0, 3), (2, 8)), A((1, 1))):
        assert not iv.is_normal(*not_normal)
    assert not iv.is_normal(np.array([0.0, np.nan]), np.array([1.0, 5.0]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 20)), max_size=30))
def test_merge_of_a_normal_set_is_an_equal_copy(raw):
    m = iv.merge(np.array([a for a, _ in raw], dtype=np.int64), np.array([a + d for a, d in raw], dtype=np.int64))
    again = iv.merge(*m)
    assert pairs(again) == pairs(m) and again[0].dtype == m[0].dtype
    assert again[0] is not m[0] and again[1] is not m[1]  # callers own what merge returns


def test_union_intersect_subtract_known():
    a = A((0, 3), (5, 8), (10, 12))
    b = A((2, 6), (7, 11))
    assert pairs(iv.union(a, b)) == [(0, 12)]
    assert pairs(iv.intersect(a, b)) == [(2, 3), (5, 6), (7, 8), (10, 11)]
    assert pairs(iv.subtract(a, b)) == [(0, 2), (6, 7), (11, 12)]
    assert pairs(iv.subtract(b, a)) == [(3, 5), (8, 10)]
    assert iv.length(a) == 8
    assert pairs(iv.complement(a, -2, 11)) == [(-2, 0), (3, 5), (8, 10)]


def test_empty_operands():
    a = A((0, 3))
    e = iv.empty()
    assert pairs(iv.intersect(a, e)) == []
    assert pairs(iv.subtract(a, e)) == [(0, 3)]
    assert pairs(iv.subtract(e, a)) == []
    assert iv.covered([0], [3], e).tolist() == [0.0]


def test_covered_per_query():
    s = A((0, 3), (5, 8), (10, 12))
    got = iv.covered([0, 4, -5, 2, 6, 12], [12, 5, 100, 6, 6, 20], s)
    assert got.tolist() == [8.0, 0.0, 8.0, 2.0, 0.0, 0.0]


def grid(xs):
    m = np.zeros(64, dtype=bool)
    for s, e in xs:
        m[s:e] = True
    return m


ivs = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 63)).map(lambda t: (min(t), max(t))), max_size=8)


@settings(max_examples=150, deadline=None)
@given(ivs, ivs, st.integers(0, 63), st.integers(0, 63))
def test_against_bitmap(xa, xb, q0, q1):
    a, b = A(*xa) if xa else iv.empty(), A(*xb) if xb else iv.empty()
    ga, gb = grid(xa), grid(xb)
    assert (grid(pairs(iv.union(a, b))) == (ga | gb)).all()
    assert (grid(pairs(iv.intersect(a, b))) == (ga & gb)).all()
    assert (grid(pairs(iv.subtract(a, b))) == (ga & ~gb)).all()
    assert iv.length(a) == ga.sum()
    lo, hi = min(q0, q1), max(q0, q1)
    assert iv.covered([lo], [hi], a)[0] == ga[lo:hi].sum()
    m = iv.merge(*a)  # normalized: sorted, disjoint, non-touching
    assert (m[0][1:] > m[1][:-1]).all() and (m[1] > m[0]).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-20, 60, allow_nan=False), st.floats(-5, 30, allow_nan=False)), max_size=12),
       st.lists(st.tuples(st.floats(0, 60, allow_nan=False), st.floats(0, 20, allow_nan=False)), max_size=10),
       st.data())
def test_exposed_spans_of_many_rows_equal_each_row_subtracted_alone(rows, comp_raw, data):
    """exposure._spans cuts every row by the compute set's gaps at once: each row's pieces are exactly
    (values and float type) what intervals.subtract gives for that row alone."""
    from commscope.analyze.exposure import _spans

    n = len(rows)
    start = np.array([s for s, _ in rows], dtype=np.float64)
    end = np.array([s + d for s, d in rows], dtype=np.float64)
    if n:
        start[data.draw(st.lists(st.integers(0, n - 1), max_size=2))] = np.nan  # unknown starts
    todo = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool) & ~np.isnan(start)
    waited = ~todo & np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    wait, wait_end = start - 1.0, end + 1.0
    comp = (np.array([s for s, _ in comp_raw]), np.array([s + d for s, d in comp_raw]))
    got = _spans(start, end, wait, wait_end, waited, todo, comp)
    for j in range(n):
        if waited[j]:
            want = [(float(wait[j]), float(wait_end[j]))] if wait_end[j] > wait[j] else []
        elif todo[j]:
            s, e = iv.subtract((start[j:j + 1], end[j:j + 1]), comp)
            want = list(zip(s.tolist(), e.tolist()))
        else:
            want = []
        assert got[j] == want and [type(v) for p in got[j] for v in p] == [type(v) for p in want for v in p]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=40), st.lists(st.integers(0, 8), max_size=8))
def test_rows_by_rank_is_the_per_rank_mask_in_one_sort(rank_col, asked):
    """Each rank's positions are exactly np.flatnonzero(rank_col == rank), in row order; a rank with no
    rows is absent; merge_by_rank is merge over those rows, an empty set for a rank without rows."""
    r = np.array(rank_col, dtype=np.int64)
    rows = iv.rows_by_rank(r)
    assert sorted(rows) == sorted(set(rank_col))
    for rank in set(rank_col):
        assert rows[rank].tolist() == np.flatnonzero(r == rank).tolist()
        assert rows[np.int64(rank)] is rows[rank]  # a numpy integer finds the same rows
    starts = np.arange(len(r), dtype=np.int64) * 3 % 17
    ends = starts + 2
    merged = iv.merge_by_rank(r, starts, ends, asked)
    assert list(merged) == list(dict.fromkeys(asked))
    for rank in asked:
        assert pairs(merged[rank]) == pairs(iv.merge(starts[r == rank], ends[r == rank]))


def test_rows_by_rank_of_float_ranks_and_of_nothing():
    rows = iv.rows_by_rank(np.array([2.0, 1.0, 2.0]))
    assert {k: v.tolist() for k, v in rows.items()} == {1.0: [1], 2.0: [0, 2]} and rows.get(2) is rows[2.0]
    assert iv.rows_by_rank(np.array([], dtype=np.int64)) == {}
