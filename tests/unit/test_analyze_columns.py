"""The column helpers the analyzers split per rank with (instead of filtering frames rank by rank), and step
assignment by positions against its groupby reference."""
import numpy as np
import pandas as pd
import pytest

from commscope.analyze.exposure import wait_spans
from commscope.load.frames import frame, ns_array


def test_wait_spans_keeps_rows_with_both_wait_ends_relative_to_origin():
    coll = frame("collectives", {"rank": [0, 1, 1, 2], "wait_ns": ns_array([1_000, None, 5_000, 7_000]),
                                 "wait_end_ns": ns_array([1_500, 3_000, 5_250, None])})
    rank, start, end = wait_spans(coll, 1_000)
    assert rank.tolist() == [0, 1]
    assert start.tolist() == [0.0, 4_000.0]
    assert end.tolist() == [500.0, 4_250.0]


def test_wait_spans_exact_on_epoch_nanoseconds():
    t = 1_733_150_000_123_456_789  # float64 alone resolves only 256 ns here
    coll = frame("collectives", {"rank": [3], "wait_ns": ns_array([t]), "wait_end_ns": ns_array([t + 1])})
    _, start, end = wait_spans(coll, t - 7)
    assert (start.tolist(), end.tolist()) == ([7.0], [8.0])


def test_wait_spans_of_no_collectives_is_empty():
    rank, start, end = wait_spans(frame("collectives"), 0)
    assert len(rank) == len(start) == len(end) == 0
    assert start.dtype == np.float64


def _assign_steps_by_groupby(rank_of_event, t_ns, steps):
    """The reference: assign_steps's per-rank split written with a groupby of sub-frames (the per-rank
    search, frames.step_of, is shared: only the split differs)."""
    from commscope.load.frames import rel, step_of

    out = np.full(len(t_ns), -1, dtype=np.int64)
    o = int(steps["start_ns"].min())
    t = rel(pd.Series(t_ns), o)
    for rank, st in steps.groupby("rank", sort=False):
        st = st.sort_values("start_ns")
        mask = np.asarray(rank_of_event) == rank
        out[mask] = step_of(t[mask], rel(st["start_ns"], o), rel(st["end_ns"], o), st["step"].to_numpy(np.int64))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_assign_steps_equals_the_groupby_version(seed):
    from commscope.load.frames import assign_steps

    rng = np.random.default_rng(seed)
    t0 = 1_733_150_000_000_000_000
    rows = []
    for rank in rng.permutation(4)[: rng.integers(1, 5)]:
        start = t0 + int(rng.integers(0, 1000))
        for step in rng.permutation(6):  # unsorted, some steps repeated at the same start (ties)
            dur = int(rng.integers(50, 400))
            rows.append((int(rank), int(step), start, start + dur))
            if rng.random() < 0.2:
                rows.append((int(rank), int(step) + 10, start, start + dur // 2))
            start += dur + int(rng.integers(0, 50))
    steps = pd.DataFrame(rows, columns=["rank", "step", "start_ns", "end_ns"]).sample(frac=1, random_state=seed)
    n = 300
    ranks = rng.integers(0, 5, n)
    t = ns_array([None if rng.random() < 0.05 else t0 + int(x) for x in rng.integers(-100, 3000, n)])
    got = assign_steps(ranks, pd.Series(t), steps)
    assert got.tolist() == _assign_steps_by_groupby(ranks, t, steps).tolist()
    assert (got >= 0).any() and (got == -1).any()
