"""commscope.load.engine: the per-rank stage gives the same parts on the local pool and on a Dask
cluster (a LocalCluster of 2 worker processes, the CI stand-in for a real scheduler address)."""
from __future__ import annotations


import pandas as pd
import pytest

from commscope.errors import UserError
from commscope.load.engine import map_files
from commscope.load.files import list_trace_files
from commscope.load.kineto import parse_file
from dask_cluster import local_cluster
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


def _files() -> list[str]:
    return list_trace_files(str(FIXTURE))[:4]


def test_local_pool_returns_parts_in_file_order():
    parts = map_files(parse_file, _files(), workers=2)
    assert [p["rank"] for p in parts] == [0, 1, 2, 3]
    assert all(len(p["collectives"]) > 0 for p in parts)


def test_dask_local_cluster_matches_the_local_pool(tmp_path):
    distributed = pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    files = _files()
    local = map_files(parse_file, files, workers=1)
    seen = []
    with local_cluster(tmp_path, n_workers=2, threads_per_worker=1, processes=True) as cl:
        remote = map_files(parse_file, files, scheduler=cl.scheduler_address, progress=lambda i, n: seen.append((i, n)))
        # the workers did the parsing, in 2 processes other than this one
        with distributed.Client(cl) as c:
            assert len(c.scheduler_info()["workers"]) == 2
    assert seen[-1] == (4, 4)
    assert [p["rank"] for p in remote] == [p["rank"] for p in local]
    for a, b in zip(local, remote):
        pd.testing.assert_frame_equal(a["collectives"], b["collectives"])
        pd.testing.assert_frame_equal(a["steps"], b["steps"])


def test_unreachable_scheduler_is_one_clear_error():
    pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    with pytest.raises(UserError, match="Dask scheduler"):
        map_files(parse_file, _files(), scheduler="tcp://127.0.0.1:1", connect_timeout_s=2)


def _slow(path: str) -> str:
    import time

    time.sleep(8)  # past the scheduler's close at 3 s
    return path


def _gone_on_the_worker(path: str):
    from commscope.load.files import Missing

    raise Missing(path)  # as a worker that does not share this machine's filesystem finds it


def test_a_file_the_workers_cannot_see_says_so(tmp_path):
    """A path this machine sees but a worker does not (no shared filesystem): the error says where it was
    missing, not just "does not exist", which would contradict the user's own listing."""
    here = tmp_path / "rank0.json"
    here.write_text("{}")
    with local_cluster(tmp_path, n_workers=1, threads_per_worker=1, processes=False) as cl:
        with pytest.raises(UserError, match=r"rank0\.json does not exist on the Dask worker that read it, though "
                                             r"this machine sees it: the workers read every file at the same path"):
            map_files(_gone_on_the_worker, [str(here)], scheduler=cl.scheduler_address)
        with pytest.raises(UserError, match=r"nowhere\.json does not exist$"):  # missing here too: as it is
            map_files(_gone_on_the_worker, [str(tmp_path / "nowhere.json")], scheduler=cl.scheduler_address)


def test_a_rank_folder_missing_where_it_is_read_is_an_error_not_an_empty_rank(tmp_path):
    from commscope.load.files import Missing
    from commscope.load.rundir import read_rank_folder

    with pytest.raises(Missing, match=r"rank3 does not exist"):
        read_rank_folder(str(tmp_path / "rank3"))


def test_a_scheduler_that_goes_away_mid_stage_is_one_clear_error(tmp_path):
    """The scheduler killed while its workers parse: one UserError, not Dask's traceback."""
    import threading

    with local_cluster(tmp_path, n_workers=1, threads_per_worker=1, processes=False) as cl:
        threading.Timer(3.0, cl.close).start()
        with pytest.raises(UserError, match=r"the Dask scheduler at .* went away before the per-rank stage "
                                             r"finished .*; start it and its workers again, then rerun"):
            map_files(_slow, ["a", "b"], scheduler=cl.scheduler_address)


def test_a_cluster_left_without_workers_is_one_clear_error_not_a_wait_forever(tmp_path):
    """Every worker gone while tasks are left (killed, or each exiting on a task it could not run): the
    tasks would wait for a worker forever. After the connect timeout with none, one UserError."""
    import threading
    import time

    with local_cluster(tmp_path, n_workers=1, threads_per_worker=1, processes=False) as cl:
        threading.Timer(1.0, lambda: cl.scale(0)).start()
        t0 = time.monotonic()
        with pytest.raises(UserError, match=r"the Dask scheduler at .* has had no workers for 3 s with 2 of 2 files "
                                             r"left to parse .*: start workers with commscope installed, then rerun"):
            map_files(_slow, ["a", "b"], scheduler=cl.scheduler_address, connect_timeout_s=3)
        assert time.monotonic() - t0 < 20


class _Versions:
    """A Client stand-in whose workers report these commscope versions (None: cannot import it)."""

    def __init__(self, mine, theirs):
        self.mine, self.theirs = mine, theirs

    def get_versions(self, packages):
        assert packages == ["commscope"]
        return {"client": {"packages": {"commscope": self.mine}},
                "workers": {f"tcp://w{i}:1": {"packages": {"commscope": v}} for i, v in enumerate(self.theirs)}}


def test_workers_without_commscope_or_with_another_version_are_refused_before_the_stage():
    from commscope.load.engine import _check_workers

    _check_workers(_Versions("0.1.0", ["0.1.0", "0.1.0"]), "tcp://s:8786")  # the same everywhere: no error
    with pytest.raises(UserError, match=r"^1 of the 2 Dask worker\(s\) of the scheduler at tcp://s:8786 cannot "
                                        r"import commscope \(e\.g\. tcp://w1:1\): install commscope 0\.1\.0 in the "
                                        r"workers' environment"):
        _check_workers(_Versions("0.1.0", ["0.1.0", None]), "tcp://s:8786")
    with pytest.raises(UserError, match=r"run commscope 0\.0\.9 \(e\.g\. tcp://w0:1\) where this machine runs 0\.1\.0"):
        _check_workers(_Versions("0.1.0", ["0.0.9", "0.1.0"]), "tcp://s:8786")
