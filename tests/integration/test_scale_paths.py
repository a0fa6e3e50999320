"""The large-job paths: a generated run directory of more ranks than `placement` lists in full gives the
representative ranks (the planted straggler first) and their collectives only; the per-rank stage on a Dask
LocalCluster (2 worker processes) loads a run directory and a folder of Kineto traces into the same frames
as the local pool, and `report --json --scheduler ADDRESS` prints the same document."""
from __future__ import annotations

import importlib
import json
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from commscope.analyze.summary import PLACEMENT_ALL_RANKS, summarize
from commscope.cli import app, main
from commscope.load import load_path
from commscope.load.engine import map_files
from dask_cluster import local_cluster
from paths import ROOT, TESTS

DATA = TESTS / "data"
sys.path.insert(0, str(ROOT / "bench"))
gen_job = importlib.import_module("gen_job")


def test_above_the_rank_threshold_placement_lists_the_representative_ranks(tmp_path):
    n = PLACEMENT_ALL_RANKS + 8
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", n, steps=5, straggler=50, at_step=2)
    doc = summarize(load_path(truth["job"]), with_hta=False)
    reps = doc["representative_ranks"]
    assert reps[0]["rank"] == 50 and "made the others wait" in reps[0]["why"][0]
    assert len({r["rank"] for r in reps}) == len(reps) <= 6
    assert doc["placement_ranks"] == [r["rank"] for r in reps]
    per_rank = pd.DataFrame(doc["placement"]).groupby("rank").size()
    assert sorted(per_rank.index) == sorted(doc["placement_ranks"])
    # every listed rank has all its collectives of steps ≥ 0: 5 steps of the template's
    assert per_rank.nunique() == 1 and per_rank.iloc[0] > 0
    # `placement_ranks` says it; `notes` are what the page's and terminal's figures cannot tell, and neither shows placement
    assert not any("placement" in x for x in doc["notes"])


def test_at_the_threshold_placement_lists_every_rank(tmp_path):
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 4, steps=3)
    doc = summarize(load_path(truth["job"]), with_hta=False)
    assert doc["placement_ranks"] == "all"
    assert sorted({p["rank"] for p in doc["placement"]}) == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("dask"), n_workers=2, threads_per_worker=1, processes=True) as cl:
        yield cl


def _same_trace(a, b) -> None:
    assert (a.ranks, a.world_size, a.problems) == (b.ranks, b.world_size, b.problems)
    for kind in ("steps", "collectives", "regions", "hooks", "kernels"):
        pd.testing.assert_frame_equal(getattr(a, kind), getattr(b, kind), check_like=False)


def test_dask_cluster_loads_a_run_directory_as_the_local_pool(tmp_path, cluster):
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 6, steps=4, straggler=4, at_step=2)
    _same_trace(load_path(truth["job"], workers=2), load_path(truth["job"], scheduler=cluster.scheduler_address))


def test_dask_cluster_loads_kineto_traces_as_the_local_pool(cluster):
    fixture = str(DATA / "modded-nanogpt-8xh100")
    _same_trace(load_path(fixture, workers=2), load_path(fixture, scheduler=cluster.scheduler_address))


def test_report_json_with_a_scheduler_is_the_same_document(tmp_path, cluster):
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 5, steps=4, straggler=3, at_step=2)
    runner = CliRunner()
    local = runner.invoke(app, ["report", truth["job"], "--json", "--no-hta"])
    remote = runner.invoke(app, ["report", truth["job"], "--json", "--no-hta", "--scheduler", cluster.scheduler_address])
    assert local.exit_code == remote.exit_code == 0, (local.output, remote.output)
    assert json.loads(local.stdout) == json.loads(remote.stdout)
    env = runner.invoke(app, ["doctor", truth["job"], "--json"], env={"COMMSCOPE_SCHEDULER": cluster.scheduler_address})
    assert env.exit_code == 0 and json.loads(env.stdout)["culprit_ranks"] == [3]


def test_unreachable_scheduler_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    from commscope.load import engine

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 2.0)
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 2, steps=2)
    with pytest.raises(SystemExit) as e:
        main(["doctor", truth["job"], "--scheduler", "tcp://127.0.0.1:1"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err


def test_a_peer_that_is_not_a_scheduler_or_has_no_workers_is_one_error(monkeypatch, tmp_path):
    """A port that accepts and stays silent (an HTTP server, the dashboard), one that answers garbage, and a
    scheduler without workers: each a UserError within the connect timeout, never a hang or a traceback."""
    pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    import socket
    import threading

    from commscope.errors import UserError
    from commscope.load import engine
    from commscope.load.kineto import parse_file

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 2.0)

    def serve(reply: bytes) -> str:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        held = []

        def loop():
            while True:
                c, _ = s.accept()
                held.append(c)  # keep it open: a silent peer
                if reply:
                    c.sendall(reply)
        threading.Thread(target=loop, daemon=True).start()
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"

    with pytest.raises(UserError, match="no Dask answer within 2 s"):
        map_files(parse_file, ["x"], scheduler=serve(b""))
    with pytest.raises(UserError, match="does not answer as a Dask scheduler"):
        map_files(parse_file, ["x"], scheduler=serve(b"SSH-2.0-OpenSSH_9.6\r\n" * 10))
    with local_cluster(tmp_path, n_workers=0, processes=False) as cl:
        with pytest.raises(UserError, match="has no workers"):
            map_files(parse_file, ["x"], scheduler=cl.scheduler_address)
