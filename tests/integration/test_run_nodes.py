"""`commscope run` on several nodes sharing one run directory, each node a launcher of its own: here two
launchers on this host, one rank each, meeting through torch's static rendezvous (--master-addr,
--node-rank) or its c10d rendezvous (--rdzv-endpoint). Each node keeps its own launcher log, and the node
that ran rank 0 writes the one summary.json, speaking for every rank."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from commscope.errors import UserError
from commscope.pipeline import diagnose_path
from commscope.rundir.schema import NODE_ENDED, NOT_STARTED, launcher_log_name
from instrumented_model.job import Job
from instrumented_model.launcher import Topology
from instrumented_model.nodes import ProgressFollower
from instrumented_model.out_dir import claim
from instrumented_model.run_summary import JobEnd, rank_statuses, signal_on_another_node, verdict
from instrumented_model.train import option_differences
from ports import free_port


def _launch(out, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "commscope", "run", "--nnodes", "2", "--nproc", "1", "--out",
                             str(out), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})


def _both(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    outs = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, stdout + stderr))
    return outs


@pytest.mark.slow
def test_two_static_nodes_keep_their_own_logs_and_one_summary_names_the_crashed_rank(tmp_path):
    out, port = tmp_path / "run", str(free_port())
    common = ["--master-addr", "127.0.0.1", "--master-port", port, "--steps", "6", "--inject", "crash@rank=1,step=3"]
    (rc0, said0), (rc1, said1) = _both([_launch(out, "--node-rank", "0", *common),
                                        _launch(out, "--node-rank", "1", *common)])
    assert (rc0, rc1) == (1, 1), said0 + said1
    names = sorted(os.listdir(out))
    assert names == ["commscope-run.json", "config.json", "launcher.node0.log", "launcher.node1.log",
                     "progress.jsonl", "rank0", "rank1", "summary.json"]
    log0, log1 = ((out / f"launcher.node{k}.log").read_text() for k in (0, 1))
    # each log starts with its own node's command and holds its own rank's output
    assert "--node-rank 0 --tee 3" in log0.splitlines()[0] and "--node-rank 1 --tee 3" in log1.splitlines()[0]
    assert "--node-rank 1" not in log0 and "--node-rank 0" not in log1
    assert '"event": "step", "step": 2' in log0 and '"event": "step"' not in log1  # rank 0's progress lines
    assert "exitcode: 134" in log1 and "exitcode: 134" not in log0  # rank 1's os._exit, seen by node 1's torchrun
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["ranks"], summary["world_size"]) == \
        ("crashed", {"0": "failed", "1": "crashed"}, 2)
    assert len(summary["losses"]) == 3
    assert f"output of this node's ranks: {out / 'launcher.node0.log'}" in said0
    assert f"output of this node's ranks: {out / 'launcher.node1.log'}" in said1
    r = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(out), "--json"], capture_output=True,
                       text=True, timeout=120)
    d = json.loads(r.stdout)
    assert (d["verdict"], d["culprit_ranks"]) == ("crash", [1]), r.stdout + r.stderr


@pytest.mark.slow
def test_two_nodes_of_a_c10d_rendezvous_write_one_summary_for_every_rank(tmp_path):
    out = tmp_path / "run"
    common = ["--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--steps", "4"]
    (rc0, said0), (rc1, said1) = _both([_launch(out, *common), _launch(out, *common)])
    assert (rc0, rc1) == (0, 0), said0 + said1
    assert "4/4 loss" in said0 and "4/4 loss" in said1  # each node's bar, wherever rank 0 ran
    logs = [n for n in os.listdir(out) if n.startswith("launcher")]
    pids = sorted(int(n.split(".")[-2]) for n in logs)  # launcher.<host>.<pid>.log: the rendezvous numbers nodes
    assert sorted(logs) == sorted(launcher_log_name(f"{socket.gethostname()}.{pid}") for pid in pids) and len(pids) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["ranks"], len(summary["losses"])) == \
        ("completed", {"0": "completed", "1": "completed"}, 4)
    assert json.loads((out / "commscope-run.json").read_text())["launcher_pid"] in pids  # the first one's marker


def test_the_summary_is_written_by_the_node_that_ran_rank_0(tmp_path):
    job, out = Job(pid=1, run_id="x", hang_timeout=1.0), str(tmp_path)
    assert Topology(2).writes_summary(job, out)
    assert Topology(1, nnodes=2, node_rank=0, master_addr="h").writes_summary(job, out)
    assert not Topology(1, nnodes=2, node_rank=1, master_addr="h").writes_summary(job, out)
    c10d = Topology(1, nnodes=2, rdzv_endpoint="h:1")
    assert c10d.writes_summary(job, out)  # no rank started anywhere: every node says so
    (tmp_path / "rank1").mkdir()
    assert not c10d.writes_summary(job, out)  # its torchrun started no rank 0 that the launcher saw
    assert (Topology(2).node_name(), Topology(1, nnodes=2, node_rank=1, master_addr="h").node_name()) == (None, "node1")
    assert c10d.node_name() == f"{socket.gethostname()}.{os.getpid()}"
    assert launcher_log_name(None) == "launcher.log" and launcher_log_name("a b/c.1") == "launcher.a_b_c.1.log"


def test_nodes_claiming_one_folder_share_the_first_marker_and_leave_a_joined_folder_alone(tmp_path):
    path = str(tmp_path / "run")
    first = claim(path, overwrite=False, run_id="a", shared=True)
    second = claim(path, overwrite=False, run_id="b", shared=True)
    assert (first.wrote_marker, second.wrote_marker) == (True, False)
    assert json.loads((tmp_path / "run" / "commscope-run.json").read_text())["run_id"] == "a"
    (tmp_path / "run" / "rank1").mkdir()  # the second node's rank started
    first.abandon()  # the first node stopped before its launch: the job's folder and marker stay
    assert sorted(os.listdir(path)) == ["commscope-run.json", "rank1"]
    lone = claim(str(tmp_path / "lone"), overwrite=False, run_id="c", shared=True)
    lone.abandon()  # no other node came: the folder it created and its marker go
    assert not (tmp_path / "lone").exists()


def test_replacing_a_several_node_run_moves_every_nodes_log_aside(tmp_path):
    path = tmp_path / "run"
    first = claim(str(path), overwrite=False, run_id="a", shared=True)
    for name in ("launcher.node0.log", "launcher.node1.log", "summary.json", "notes.txt"):
        (path / name).write_text(name)
    first.release()
    again = claim(str(path), overwrite=True, run_id="b")  # one node now, into the finished run's folder
    try:
        aside = path / ".commscope-previous-a"
        assert sorted(os.listdir(aside)) == ["commscope-run.json", "launcher.node0.log", "launcher.node1.log",
                                             "summary.json"]
        assert sorted(os.listdir(path)) == [".commscope-previous-a", "commscope-run.json", "notes.txt"]
    finally:
        again.release()


def test_nodes_launched_with_different_nproc_are_told_so_before_the_preset_refuses_the_world_size(monkeypatch):
    """--nproc 1 on node 0 and 2 on node 1: torch.distributed.run makes one job of 3 ranks over 2 nodes; the
    ranks say which option differs (a real pair of launchers exits 2 on both nodes with this line)."""
    from instrumented_model.train import _check_same_nproc

    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(UserError) as e:
        _check_same_nproc(3)
    assert str(e.value) == ("the nodes were launched with different --nproc: rank 0's node runs 1 of the job's 3 ranks "
                            "over 2 nodes; every node's `commscope run` needs the same --nproc")
    _check_same_nproc(2)  # the same --nproc on both: nothing to say
    monkeypatch.delenv("GROUP_WORLD_SIZE")
    _check_same_nproc(3)  # not under torch.distributed.run: nothing known


def test_ranks_launched_with_other_options_than_rank_0_are_named_with_each_differing_option():
    base = {"steps": 6, "seed": 0, "out": "/a/run", "data": None, "inject": []}
    assert option_differences([base, dict(base, out="/mnt/a/run", data="/mnt/x*.bin")]) is None  # paths per node
    said = option_differences([base, base, dict(base, steps=4, inject=["crash@rank=1,step=1"], compile=True,
                                                trace="full"), dict(base, seed=1)])
    assert said == ("rank 2 was launched with other options than rank 0: --compile on (rank 0: none), --inject "
                    "crash@rank=1,step=1 (rank 0: none), --steps 4 (rank 0: 6), --trace full (rank 0: none); every "
                    "node's `commscope run` needs the same options")


@pytest.mark.slow
def test_nodes_launched_with_different_step_counts_fail_at_the_start_saying_so(tmp_path):
    out, port = tmp_path / "run", str(free_port())
    common = ["--master-addr", "127.0.0.1", "--master-port", port, "--hang-timeout", "60"]
    (rc0, said0), (rc1, said1) = _both([_launch(out, "--node-rank", "0", "--steps", "6", *common),
                                        _launch(out, "--node-rank", "1", "--steps", "4", *common)])
    # a mistake in the command: each node ends as for a bad option, one error line and exit 2, after the
    # summary table; no verdict and no report suggested
    refusal = "rank 1 was launched with other options than rank 0: --steps 4 (rank 0: 6); every node's `commscope run` needs the same options"
    assert (rc0, rc1) == (2, 2), said0 + said1
    for said in (said0, said1):
        assert said.rstrip().splitlines()[-1] == f"commscope: error: {refusal}"
        assert "next: commscope report" not in said and "Details: commscope doctor" not in said
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["ranks"], summary["losses"]) == ("failed", {"0": "failed", "1": "failed"}, [])
    assert (summary["usage_error"], summary["exit_code"]) == (refusal, 2)
    assert summary["message"] == f"failed: the ranks refused the options before the first step: {refusal}"
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.details["usage_error"]) == ("insufficient", [], refusal)


def test_every_nodes_bar_follows_rank_0s_progress_file_from_this_jobs_start(tmp_path):
    path = tmp_path / "progress.jsonl"
    step = lambda s: json.dumps({"event": "step", "step": s, "loss": 5.0 - s, "step_ms": 10.0, "tokens_per_s": 1.0})
    earlier = [json.dumps({"event": "start"}), step(0), step(1), step(2)]  # an earlier attempt's
    path.write_text("\n".join(earlier) + "\n")
    follow, seen = ProgressFollower(str(path)), []

    class Bar:
        def step(self, rec):
            seen.append(rec["step"])

    follow.poll(Bar())
    assert seen == []  # what was there before the job started is not this job's
    path.write_text(json.dumps({"event": "start"}) + "\n" + step(0) + "\n" + step(1)[:20])  # rank 0 rewrote it
    follow.poll(Bar())
    assert seen == [0]  # the torn line waits for its end
    with open(path, "a") as f:
        f.write(step(1)[20:] + "\nnot json\n" + step(2) + "\n")
    follow.poll(Bar())
    assert seen == [0, 1, 2]


def test_a_fresh_node_refuses_a_folder_holding_an_earlier_jobs_records(tmp_path):
    """No rank of a job starts before all its nodes have joined the rendezvous: rank folders or rank 0's
    files at a node's start are a killed earlier job's, whose logs a new job would overwrite."""
    path = tmp_path / "run"
    first = claim(str(path), overwrite=False, run_id="a", shared=True, log_name="launcher.node0.log")
    (path / "launcher.node0.log").write_text("$ earlier job\n")
    assert claim(str(path), overwrite=False, run_id="b", shared=True, log_name="launcher.node1.log").wrote_marker is False
    with pytest.raises(UserError, match=re.escape("holds the records of an earlier run (run id a: launcher.node0.log)")):
        claim(str(path), overwrite=False, run_id="c", shared=True, log_name="launcher.node0.log")
    (path / "rank0").mkdir()
    with pytest.raises(UserError, match=re.escape("(run id a: rank0), not one this job's nodes are starting")):
        claim(str(path), overwrite=False, run_id="d", shared=True, log_name="launcher.node1.log")
    assert (path / "launcher.node0.log").read_text() == "$ earlier job\n"
    first.release()


def test_the_summarys_node_reads_a_signal_that_stopped_another_node_from_that_nodes_log(tmp_path):
    (tmp_path / "launcher.node0.log").write_text("$ cmd\ncommscope run: this node was interrupted by SIGINT\n")
    (tmp_path / "launcher.node1.log").write_text("$ cmd\n[default0]:step\ncommscope run: this node was interrupted by SIGTERM\n")
    assert signal_on_another_node(str(tmp_path), "launcher.node0.log") == 15
    assert signal_on_another_node(str(tmp_path), "launcher.node1.log") == 2
    (tmp_path / "launcher.node1.log").write_text("$ cmd\n")
    assert signal_on_another_node(str(tmp_path), "launcher.node0.log") is None
    statuses = {"0": {"status": NOT_STARTED, "ending": "no-folder"}, "1": {"status": NOT_STARTED, "ending": "no-folder"}}
    assert verdict(statuses, JobEnd(torchrun_code=1), 0, 4)[1].startswith(
        "failed: no rank started (torch.distributed.run exited 1 before any rank made its folder: a rendezvous")
    ran = {"0": {"status": "failed", "ending": "signalled", "error": "terminated by signal 15 (SIGTERM)",
                 "last_step": 2, "ended_ns": 2},
           "1": {"status": "hung", "ending": "waited", "error": "hang watchdog", "last_step": 2, "ended_ns": 1}}
    # the launcher's own teardown of a node's torchrun is no kill from outside
    assert verdict(ran, JobEnd(torchrun_code=-9, torn_down=True), 2, 6)[0] == "hung"
    assert verdict(ran, JobEnd(torchrun_code=-9), 2, 6)[1].startswith("failed: torch.distributed.run was killed by SIGKILL")


@pytest.mark.slow
def test_a_rank_hung_on_the_summarys_node_is_the_hang_and_the_other_nodes_ranks_end_with_a_status(tmp_path):
    """Node 0's torchrun never hears that rank 1 (node 1) timed out: the launcher sends it SIGTERM, as
    torchrun does to its own ranks, so rank 0 writes how it ended and the verdict names it."""
    out, port = tmp_path / "run", str(free_port())
    common = ["--master-addr", "127.0.0.1", "--master-port", port, "--steps", "6", "--inject", "hang@rank=0,step=2",
              "--hang-timeout", "20"]
    (rc0, said0), (rc1, said1) = _both([_launch(out, "--node-rank", "0", *common),
                                        _launch(out, "--node-rank", "1", *common)])
    assert (rc0, rc1) == (1, 1), said0 + said1
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["ranks"]) == ("hung", {"0": "failed", "1": "hung"})
    assert summary["message"] == "hung: rank(s) 1 waited on a collective that rank(s) 0 never joined; rank(s) 0 " \
                                 "were then terminated"
    assert "terminated by signal 15 (SIGTERM)" in json.loads((out / "rank0" / "status.json").read_text())["error"]
    assert "waiting at 127.0.0.1:" in said0 and "for all 2 nodes to join before any rank starts" in said0


def test_several_nodes_need_an_out_they_share(tmp_path):
    from instrumented_model.launcher import launch_training

    with pytest.raises(UserError, match=re.escape("--nnodes 2: give every node the same --out")):
        launch_training([], Topology(1, nnodes=2, node_rank=0, master_addr="127.0.0.1"), None)


def test_a_folder_whose_only_node_ended_waiting_is_an_earlier_jobs(tmp_path):
    """Node 1 alone, stopped at the rendezvous, leaves only the marker and its log: its last line says its
    part ended, so a new job's node 0 does not join it and wait for a node that was refused."""
    path = tmp_path / "run"
    lone = claim(str(path), overwrite=False, run_id="a", shared=True, log_name="launcher.node1.log")
    (path / "launcher.node1.log").write_text(f"$ cmd\ncommscope run: this node was interrupted by SIGINT\n{NODE_ENDED}\n")
    lone.release()
    with pytest.raises(UserError, match=re.escape("(run id a: launcher.node1.log), not one this job's nodes")):
        claim(str(path), overwrite=False, run_id="b", shared=True, log_name="launcher.node0.log")


def test_an_error_quoting_the_hang_timeout_option_is_no_timeout(tmp_path):
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "status.json").write_text(json.dumps({
        "status": "failed", "last_step": -1, "error": "UserError: rank 1 was launched with other options than rank 0: "
                                                      "--hang-timeout 30 (rank 0: 300); every node's …"}))
    (tmp_path / "rank1").mkdir()
    (tmp_path / "rank1" / "status.json").write_text(json.dumps({
        "status": "failed", "last_step": 3, "error": "RuntimeError: Timed out waiting 60000ms for recv"}))
    st = rank_statuses(str(tmp_path), range(2))
    assert (st["0"]["ending"], st["1"]["ending"]) == ("usage", "waited")


@pytest.mark.slow
def test_ctrl_c_on_a_node_waiting_for_the_others_ends_it_at_once(tmp_path):
    out = tmp_path / "run"
    p = _launch(out, "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                "--steps", "4")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out / "launcher.node0.log").exists():
        time.sleep(0.2)
    time.sleep(3)  # torchrun waits at the rendezvous for node 1, which never comes
    p.send_signal(signal.SIGINT)
    t = time.monotonic()
    (rc, said), = _both([p])
    assert rc == 130 and time.monotonic() - t < 8, said  # not the 10 s grace a started rank gets
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["ranks"]) == ("interrupted", {"0": "not started", "1": "not started"})
    assert "torch.distributed.run stopped before any rank started (waiting at the rendezvous" in said
