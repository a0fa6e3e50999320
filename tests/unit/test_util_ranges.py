"""commscope.util.ranges: the one way rank and step lists are shortened in messages."""
from commscope.util.ranges import int_ranges


def test_int_ranges_shortens_rank_lists():
    assert int_ranges([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"
    assert int_ranges(["3", "1", "2"]) == "1-3"
    assert int_ranges(range(0, 60, 2), sep=", ", most=20) == ", ".join(map(str, range(0, 40, 2))) + " and 10 more runs"
