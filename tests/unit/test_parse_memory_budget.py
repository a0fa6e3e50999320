"""One command's parses stay within COMMSCOPE_MAX_PARSE_MB: files start in order, the next once its
estimated memory fits in what the running ones leave (one always runs), the pool runs no more at once
than that, and a file's estimate is 6× its size after gunzip (the gzip trailer's), capped at the trace
size limit."""
from __future__ import annotations

import gzip
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from commscope.errors import UserError
from commscope.load import forked, kineto_pool, limits
from commscope.load import load_path

DATA = Path(__file__).resolve().parent.parent / "data"
MiB = 2 ** 20
_CTX = mp.get_context("fork")
_RUNNING = _CTX.Value("i", 0)
_PEAK = _CTX.Value("i", 0)


def _counted(x):
    """x, while counting how many calls run at once (across the forked workers)."""
    with _RUNNING.get_lock():
        _RUNNING.value += 1
        _PEAK.value = max(_PEAK.value, _RUNNING.value)
    time.sleep(0.3)
    with _RUNNING.get_lock():
        _RUNNING.value -= 1
    return x, os.getpid()


def peak_of(items, workers, budget, in_parent=False):
    _PEAK.value = 0
    with forked.run(_counted, items, workers, cost=lambda x: x, budget=budget, in_parent=in_parent) as out:
        assert [x for x, _ in out] == items
    assert not mp.active_children()
    return _PEAK.value, {pid for _, pid in out}


def test_files_start_in_order_as_their_memory_frees_up():
    b = forked.Budget([4, 4, 4, 1], 10)
    assert b.binds() and b.most_at_once() == 3  # 1 + 4 + 4
    assert b.start() == [0, 1]  # 4 + 4; the third 4 would pass 10
    assert b.start() == []
    b.finish(1)
    assert b.start() == [2, 3]  # 4 + 4 + 1 = 9
    b.finish(0), b.finish(2), b.finish(3)
    assert b.all_started() and b.running == 0 and b.used == 0


def test_a_file_larger_than_the_budget_runs_alone():
    b = forked.Budget([1, 20, 1], 10)
    assert b.start() == [0]  # 1 + 20 passes the budget: the large file waits
    b.finish(0)
    assert b.start() == [1]  # nothing runs: it starts, over the budget
    assert b.start() == []
    b.finish(1)
    assert b.start() == [2]
    assert forked.Budget([20, 30], 10).most_at_once() == 1


def test_files_that_fit_together_all_start_at_once():
    assert not forked.Budget([1, 2, 3], 6).binds() and forked.Budget([1, 2, 3], 6).start() == [0, 1, 2]
    assert not forked.Budget([1, 2, 3], None).binds()


def test_the_pool_runs_no_more_files_at_once_than_fit_the_budget():
    assert peak_of([5, 5, 5, 5], 3, budget=100)[0] == 3  # no budget to speak of: one file per worker
    assert peak_of([5, 5, 5, 5], 3, budget=10)[0] == 2
    assert peak_of([5, 20, 5], 3, budget=10)[0] == 1  # the large one alone, and no file beside it
    # under a budget the calling process hands files out instead of parsing some itself
    peak, pids = peak_of([5, 5, 5, 5], 1, budget=10, in_parent=True)
    assert peak == 2 and os.getpid() not in pids


def _die_on_2(x):
    if x == 2:
        os._exit(3)
    return x


def test_a_worker_that_dies_under_a_budget_is_an_error_not_a_hang():
    # item 2 never finishes: without the error the parent would wait for its memory forever
    with pytest.raises(UserError, match=r"worker died \(exit code 3\) after"), \
            forked.run(_die_on_2, [1, 2, 3, 4], 2, cost=lambda x: 5, budget=10):
        pass
    assert not mp.active_children()


def test_an_estimate_is_six_times_the_size_after_gunzip(tmp_path, monkeypatch):
    raw = b'{"traceEvents": [' + b",".join(b'{"ph":"X","ts":%d}' % i for i in range(20000)) + b"]}"
    (tmp_path / "r.json").write_bytes(raw)
    (tmp_path / "r.json.gz").write_bytes(gzip.compress(raw))
    assert limits.parse_cost(str(tmp_path / "r.json")) == 6 * len(raw)
    assert limits.parse_cost(str(tmp_path / "r.json.gz")) == 6 * len(raw)  # the trailer's size
    # a trailer below the compressed size (past 4 GiB, or not a trailer): the ratio limit's worst case
    bad = gzip.compress(raw)[:-4] + b"\0\0\0\0"
    (tmp_path / "b.json.gz").write_bytes(bad)
    assert limits.parse_cost(str(tmp_path / "b.json.gz")) == 6 * len(bad) * limits.GZIP_RATIO.value()
    monkeypatch.setenv("COMMSCOPE_MAX_TRACE_MB", "1")  # a larger file is refused when read
    (tmp_path / "big.json").write_bytes(b" " * (3 * MiB))
    assert limits.parse_cost(str(tmp_path / "big.json")) == 6 * MiB
    assert limits.parse_cost(str(tmp_path)) == 0  # a rank folder: bounded by COMMSCOPE_MAX_EVENTS
    assert limits.parse_cost(str(tmp_path / "missing.json")) == 0


def test_the_budget_is_read_from_its_variable(monkeypatch):
    assert limits.PARSE_BYTES.value() == 4096 * MiB
    monkeypatch.setenv("COMMSCOPE_MAX_PARSE_MB", "64")
    assert limits.PARSE_BYTES.value() == 64 * MiB
    monkeypatch.setenv("COMMSCOPE_MAX_PARSE_MB", "lots")
    with pytest.raises(UserError, match="COMMSCOPE_MAX_PARSE_MB='lots' is not a whole number"):
        limits.PARSE_BYTES.value()


@pytest.mark.parametrize("limit", limits.LIMITS, ids=lambda lim: lim.env)
def test_a_limit_raised_far_past_memory_costs_nothing_and_past_int64_is_refused(monkeypatch, limit):
    """The error lines say "set COMMSCOPE_MAX_…=N to raise it": a user who raises one a million-fold
    (here ~1 TB for the sizes) still reads a small input, as nothing is sized by the limit itself; a value
    past 2^53 base units is refused in one line, not an overflow further on."""
    monkeypatch.setenv(limit.env, str(2 ** 40 // limit.scale))
    for path in (DATA / "gloo2", DATA / "cpurun-hooks-gloo2"):
        assert len(load_path(str(path), workers=1).collectives)
    monkeypatch.setenv(limit.env, str(2 ** 53 // limit.scale + 1))
    with pytest.raises(UserError, match=f"^{limit.env}='[0-9]+' must be at most {2 ** 53 // limit.scale:,}$"):
        load_path(str(DATA / "gloo2"), workers=1)


@pytest.mark.parametrize("limit", limits.LIMITS, ids=lambda lim: lim.env)
@pytest.mark.parametrize("raw", ["abc", "0", "-3"])
def test_a_malformed_limit_is_refused_on_every_input(monkeypatch, limit, raw):
    """Each variable is checked before anything is read, also where the input never needs its limit (a
    Kineto folder never reads COMMSCOPE_MAX_EVENTS, a run directory never COMMSCOPE_MAX_TRACE_MB)."""
    monkeypatch.setenv(limit.env, raw)
    for path in (DATA / "gloo2", DATA / "cpurun-hooks-gloo2"):
        with pytest.raises(UserError, match=f"^{limit.env}='{raw}' (is not a whole number|must be at least 1)$"):
            load_path(str(path), workers=1)
    assert set(limits.LIMITS) == {v for v in vars(limits).values() if isinstance(v, limits.Limit)}


def test_kineto_files_are_parsed_under_the_budget(monkeypatch):
    files = [str(DATA / "gloo2" / f"rank{r}.json") for r in range(2)]
    seen = {}
    real_run = forked.run

    def spy(fn, items, workers, progress=None, **kw):
        seen.update(kw)
        return real_run(fn, items, workers, progress, **kw)

    monkeypatch.setattr(forked, "run", spy)
    free = kineto_pool.parse_all(files, workers=2)
    monkeypatch.setenv("COMMSCOPE_MAX_PARSE_MB", "1")  # less than either file's estimate: one at a time
    tight = kineto_pool.parse_all(files, workers=2)
    assert seen["budget"] == MiB and seen["cost"] is limits.parse_cost
    assert [sorted(p) for p in tight] == [sorted(p) for p in free]
    for a, b in zip(free, tight):
        assert all(a[k].equals(b[k]) for k in a if hasattr(a[k], "equals"))


@pytest.mark.parametrize("argv", [["compare", "RUN", "RUN"], ["report", "RUN", "--json", "--no-hta"], ["doctor", "RUN"]])
def test_every_command_refuses_a_malformed_limit_before_reading(monkeypatch, argv):
    """compare reads the runs' summaries before loading them: the limit is still checked first, in one line,
    and help stays available with the variable set wrong."""
    from bad_inputs import invoke

    monkeypatch.setenv("COMMSCOPE_MAX_EVENTS", "abc")
    code, out, err = invoke([str(DATA / "cpurun-hooks-gloo2") if a == "RUN" else a for a in argv])
    assert (code, out, err) == (2, "", "commscope: error: COMMSCOPE_MAX_EVENTS='abc' is not a whole number\n")
    code, out, _ = invoke([argv[0], "--help"])
    assert code == 0 and "Usage" in out
