"""A label's `bytes` (summary's labels) is the size of one of its data-moving calls: a barrier it also holds
(0 bytes in a run directory) is not one of its sizes, so a label of as many barriers as all-reduces does
not read 0 bytes. A label of barriers alone keeps its 0."""
import pytest

from commscope.analyze.summary import summarize
from commscope.load import load_path
from rundirs import T0_NS as T0, US, wall_collective as coll, write_cpu_run


def barrier(rank, label, seq, at):
    return {**coll(rank, label, seq, at, at + 2, at + 4, at + 4), "op": "barrier", "bytes": 0}


def records(rank):
    out = [barrier(rank, "sync", 0, 0), barrier(rank, "sync", 1, 10), barrier(rank, "sync", 2, 20),
           coll(rank, "sync", 3, 30, 32, 34, 34), coll(rank, "sync", 4, 40, 42, 44, 44),
           barrier(rank, "fence", 5, 50)]
    big = coll(rank, "grads", 6, 60, 62, 64, 64)
    out.append({**big, "bytes": 8000})
    return out + [{"kind": "step", "rank": rank, "step": 0, "loss": 1.0, "start_ns": T0,
                   "end_ns": T0 + 100 * US, "tokens": 8}]


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    d = tmp_path_factory.mktemp("bytes") / "run"
    write_cpu_run(d, {0: records(0), 1: records(1)})
    return summarize(load_path(str(d)), with_hta=False)["labels"]


def test_barriers_do_not_count_among_a_labels_sizes(labels):
    # 3 barriers (0 bytes) and 2 all-reduces of 4000: the lower median over all five calls would be 0
    assert labels["sync"]["bytes"] == 4000
    assert labels["sync"]["op"] == "barrier+all_reduce"
    assert labels["sync"]["bytes_per_rank"] == 8000  # the total still counts every call


def test_a_label_of_barriers_alone_moves_nothing(labels):
    assert labels["fence"]["bytes"] == 0 and labels["fence"]["algbw_gbps"] is None


def test_a_data_label_is_its_size(labels):
    assert labels["grads"]["bytes"] == 8000


def test_kineto_barriers_1_byte_dummy_is_no_size_and_unknown_sizes_stay_unknown():
    """A trace's barrier carries c10d's 1-byte dummy tensor: a label of barriers alone moves 0 bytes. A label
    whose sizes the trace does not give stays null, not 0."""
    import numpy as np

    from commscope.analyze.summary import _label_bytes

    ops = np.array(["barrier", "barrier", "all_reduce", "all_reduce"], dtype=object)
    sizes = np.array([1.0, 1.0, np.nan, np.nan])
    moving = (sizes > 0) & (ops != "barrier")
    assert _label_bytes(sizes, np.array([0, 1]), moving, ops) == 0
    assert _label_bytes(sizes, np.array([2, 3]), moving, ops) is None
    assert _label_bytes(np.array([1.0, 4096.0]), np.array([0, 1]), np.array([False, True]), ops[1:3]) == 4096
