"""commscope.load.forked: results in item order, progress per completion, the first failing item's error
(in item order, with the worker's traceback as its cause), a dead worker reported, workers reaped; the
same with the parent taking items too (`in_parent`)."""
import multiprocessing as mp
import os
import signal
import time

import pytest

from commscope.errors import UserError
from commscope.load import forked


def _slow_square(x):
    time.sleep(0.02 * (x % 3))  # finish out of order
    return x * x


def _fail_on_odd(x):
    if x % 2:
        raise UserError(f"item {x} is odd")
    return x


def _die(x):
    if x == 2:
        os._exit(3)
    return x


def test_results_in_item_order_and_progress_per_completion():
    seen = []
    with forked.run(_slow_square, list(range(7)), 2, progress=lambda i, n: seen.append((i, n))) as out:
        assert out == [x * x for x in range(7)]
    assert seen == [(i, 7) for i in range(1, 8)]
    assert not mp.active_children()


def test_the_first_failing_item_in_order_raises_with_the_workers_traceback():
    with pytest.raises(UserError, match="item 1 is odd") as e, forked.run(_fail_on_odd, list(range(6)), 3):
        pass
    assert isinstance(e.value.__cause__, forked.RemoteTraceback) and "_fail_on_odd" in str(e.value.__cause__)
    assert not mp.active_children()


def test_a_worker_that_dies_is_an_error_not_a_hang():
    with pytest.raises(UserError, match="worker died") as e, forked.run(_die, [0, 1, 2, 3], 1):
        pass
    assert not mp.active_children()
    assert "COMMSCOPE_MAX_PARSE_MB" in str(e.value)


def _killed(x):
    os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does


def test_a_killed_worker_says_by_what_and_what_to_do():
    with pytest.raises(UserError) as e, forked.run(_killed, [0, 1], 1):
        pass
    assert str(e.value).startswith("a parse worker died (killed by signal 9, SIGKILL) after 0 of 2 files; ")
    assert not mp.active_children()


def test_workers_are_reaped_when_the_block_raises():
    with pytest.raises(KeyError), forked.run(_slow_square, [1, 2, 3], 2):
        raise KeyError("caller")
    assert not mp.active_children()


def test_in_parent_the_caller_takes_items_too_with_the_same_guarantees():
    seen = []
    with forked.run(_slow_square, list(range(7)), 1, progress=lambda i, n: seen.append((i, n)), in_parent=True) as out:
        assert out == [x * x for x in range(7)]
    assert seen == [(i, 7) for i in range(1, 8)]
    assert not mp.active_children()
    # the first failing item in order raises, whichever process ran it (the parent takes item 0 first)
    with pytest.raises(UserError, match="item 1 is odd"), forked.run(_fail_on_odd, list(range(6)), 1, in_parent=True):
        pass
    assert not mp.active_children()


def test_in_parent_without_workers_runs_everything_here():
    with forked.run(lambda x: (x, os.getpid()), [0, 1, 2], 0, in_parent=True) as out:
        assert out == [(x, os.getpid()) for x in range(3)]


def _square(x):
    return x * x


@pytest.mark.parametrize("workers, in_parent", [(2, False), (1, True), (0, True)])
def test_more_items_than_the_task_pipe_holds(workers, in_parent):
    """20,000 items (a pipe holds ~4,000 queued ones): queuing them all before any worker read blocked the
    parent forever on a 4,096-rank folder. At most QUEUE_AHEAD wait in the queue at any time."""
    n = 20_000
    done = []
    with forked.run(_square, list(range(n)), workers, progress=lambda i, total: done.append(i),
                    in_parent=in_parent) as out:
        assert out == [x * x for x in range(n)]
    assert len(done) == n and not mp.active_children()


def test_the_gate_never_starts_more_than_it_may_queue():
    gate = forked.Budget([0] * 5000, None, ahead=100)
    first = gate.start()
    assert first == list(range(100)) and gate.start() == []
    gate.finish(0)
    assert gate.start() == [100]
