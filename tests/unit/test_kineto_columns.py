"""Column building in the Kineto reader: numpy fast paths must give exactly what pandas infers from the
lists, and the kernel → launch lookup must equal the dict lookup it replaces."""
import numpy as np
import pandas as pd
import pytest

from commscope.load.frames import match_positions
from commscope.load.kineto import _launch_ns, column


@pytest.mark.parametrize("values", [
    [1, 2, 3], [True, False], [1, True], [1, None, 3], [1, 2.5], ["a", "b"], [], [2**63, 1], [[1, 2], None],
    [-1, 0, 2**62],
])
def test_column_is_what_pandas_infers(values):
    fast, inferred = pd.Series(column(values)), pd.Series(values)
    pd.testing.assert_series_equal(fast, inferred, check_exact=True)


def test_column_fast_paths_are_arrays_and_the_rest_stays_a_list():
    assert column([1, 2]).dtype == np.int64 and column([True]).dtype == np.bool_
    for other in ([1, True], [1, None], [2**63], []):
        assert column(other) is other


def _frames(k_corr, l_corr, l_ts):
    kernels = pd.DataFrame({"correlation": column(k_corr)})
    launches = pd.DataFrame({"correlation": column(l_corr), "ts_ns": np.asarray(l_ts, dtype=np.int64)})
    return kernels, launches


@pytest.mark.parametrize("k_corr, l_corr", [
    ([7, 3, 9, 3], [3, 7, 8]),  # unique launches: the index path
    ([7, 3, 9, 3], [3, 7, 3]),  # a repeated correlation: the last launch wins
    ([7, None, 3], [3, 7, 8]),  # a kernel without correlation: no launch
])
def test_launch_ns_matches_the_dict_lookup(k_corr, l_corr):
    t = 1_733_150_000_123_456_789
    l_ts = [t + 10 * i for i in range(len(l_corr))]
    kernels, launches = _frames(k_corr, l_corr, l_ts)
    got = _launch_ns(launches, match_positions(kernels["correlation"], launches["correlation"]))
    of = dict(zip(l_corr, l_ts))
    want = pd.array([of.get(c) for c in k_corr], dtype="Int64")
    pd.testing.assert_extension_array_equal(got, want)
    assert got.dtype == "Int64"


def test_shared_decodes_raw_values_once_per_distinct_text():
    import msgspec

    from commscope.load.kineto_events import _ABSENT, _shared

    raws = [msgspec.Raw(b) for b in (b"[128, 1, 1]", b"[1.0, 1, 1]", b"[128, 1, 1]", b"[1, 1, 1]")] + [_ABSENT]
    got = _shared(raws)
    assert got == [[128, 1, 1], [1.0, 1, 1], [128, 1, 1], [1, 1, 1], None]
    assert got[0] is got[2] and got[1] is not got[3]  # same text, one object; 1.0 stays a float
    assert [type(x) for x in got[1]] == [float, int, int]


def test_steps_sorted_by_start_first_of_each_number(tmp_path):
    """ProfilerStep annotations out of order and repeated: sorted by start, the first of each number kept."""
    import json

    from commscope.load.kineto import parse_file

    def ann(step, ts, dur):
        return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                "ts": ts, "dur": dur}

    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "baseTimeNanoseconds": 10**18,
           "traceEvents": [ann(3, 100, 50), ann(1, 50, 40), ann(3, 200, 10), ann(2, 90, 5), ann(1, 300, 1)]}
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(doc))
    steps = parse_file(str(p))["steps"]
    assert steps["step"].tolist() == [1, 2, 3]
    assert (steps["start_ns"] - 10**18).tolist() == [50_000, 90_000, 100_000]
    assert (steps["end_ns"] - steps["start_ns"]).tolist() == [40_000, 5_000, 50_000]
    assert steps.dtypes.astype(str).tolist() == ["int64", "int64", "int64", "int64", "float64", "object", "int64",
                                                 "int64"]
    # no device activity: host windows
    assert steps["basis"].tolist() == ["host"] * 3 and steps["host_start_ns"].equals(steps["start_ns"])


def test_match_positions_is_the_last_row_per_key_and_never_matches_missing_keys():
    import numpy as np
    import pandas as pd

    from commscope.load.frames import match_positions

    launches = pd.Series([10, 11, 12, 11, None, None], dtype=object)  # 11 twice, two launches without id
    kernels = pd.Series([12, 11, 99, None, 10], dtype=object)
    assert match_positions(kernels, launches).tolist() == [2, 3, -1, -1, 0]  # 11 → its last launch, row 3
    unique = pd.Series([5, 7, 9])
    assert match_positions(pd.Series([9, 5, 6]), unique).tolist() == [2, 0, -1]
    assert match_positions(pd.Series([1.0, np.nan]), pd.Series([np.nan, 1.0])).tolist() == [1, -1]
    assert match_positions(pd.Series([1]), pd.Series([], dtype=np.int64)).tolist() == [-1]
