"""The column helpers the analyzers split per rank with (instead of filtering frames rank by rank)."""
import numpy as np

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
