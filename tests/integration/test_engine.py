"""commscope.load.engine: the per-rank stage gives the same parts on the local pool and on a Dask
cluster (a LocalCluster of 2 worker processes, the CI stand-in for a real scheduler address)."""
from __future__ import annotations


import pandas as pd
import pytest

from commscope.errors import UserError
from commscope.load.engine import map_files
from commscope.load.files import list_trace_files
from commscope.load.kineto import parse_file
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


def _files() -> list[str]:
    return list_trace_files(str(FIXTURE))[:4]


def test_local_pool_returns_parts_in_file_order():
    parts = map_files(parse_file, _files(), workers=2)
    assert [p["rank"] for p in parts] == [0, 1, 2, 3]
    assert all(len(p["collectives"]) > 0 for p in parts)


def test_dask_local_cluster_matches_the_local_pool():
    distributed = pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    files = _files()
    local = map_files(parse_file, files, workers=1)
    seen = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
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
