"""`commscope run` and its launcher: option checks, run-directory handling, status aggregation, and real
multi-process runs on CPU (8 gloo ranks complete; losses agree across world sizes; a failing rank is
reported as a failed run with a non-zero exit)."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from rich.console import Console

from commscope.errors import UserError
from instrumented_model.launcher import Topology, launch_training, prepare_run_dir
from instrumented_model.run_summary import RunProgress, describe, overall_status, progress_from_file, rank_statuses
from reports.run_terminal import _ranges

SUMMARY_KEYS = {"schema_version", "status", "world_size", "backend", "device", "preset", "steps", "head_layout",
                "comm_schedule", "losses", "step_times_ms", "tokens_per_s", "ranks", "exit_code", "message"}


def commscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commscope", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


# ---------------------------------------------------------------- unit: launcher pieces

def test_progress_lines_are_parsed_through_the_tee_prefix():
    p = RunProgress()
    assert p.feed("[default0]:@@commscope " + json.dumps({"event": "start", "batch_size": 4, "seq_len": 10})) is not None
    for s, (loss, ms) in enumerate([(6.0, 1000.0), (5.0, 100.0), (4.0, 300.0)]):
        p.feed("[default0]:@@commscope " + json.dumps({"event": "step", "step": s, "loss": loss, "step_ms": ms,
                                                         "tokens_per_s": 1.0}) + "\n")
    assert p.feed("[default3]:some warning\n") is None
    assert p.feed("@@commscope {not json") is None
    assert p.feed("@@commscope [1, 2]") is None  # JSON, but not a record
    assert p.losses == [6.0, 5.0, 4.0] and p.step_times_ms == [1000.0, 100.0, 300.0]
    # 40 tokens a step over steps 1-2 (step 0 is warm-up): 80 tokens in 0.4 s
    assert p.tokens_per_s() == pytest.approx(200.0)


def test_progress_lines_read_in_pieces_by_the_tee_are_kept():
    """torch's --tee writes each piece of a half-written line behind the rank's prefix: in the middle of a
    record, or alone before its newline. Both steps survive; another rank's prefix is not removed."""
    p = RunProgress()
    rec = json.dumps({"event": "step", "step": 0, "loss": 6.5, "step_ms": 12.0, "tokens_per_s": 1.0})
    assert p.feed("[default0]:@@commscope " + rec[:20] + "[default0]:" + rec[20:] + "\n")["step"] == 0
    assert p.feed("[default0]:@@commscope " + rec.replace('"step": 0', '"step": 1') + "[default0]:\n")["step"] == 1
    assert p.losses == [6.5, 6.5] and p.step_times_ms == [12.0, 12.0]
    # (another rank's output inside a record cannot be undone here: the summary reads progress.jsonl)


def test_summary_progress_comes_from_rank0s_file_and_skips_a_torn_last_line(tmp_path):
    assert progress_from_file(str(tmp_path)) is None  # no file on this host: the console copy stays
    lines = [json.dumps({"event": "start", "batch_size": 2, "seq_len": 5})]
    lines += [json.dumps({"event": "step", "step": s, "loss": 5.0 - s, "step_ms": 10.0 + s}) for s in range(3)]
    (tmp_path / "progress.jsonl").write_text("\n".join(lines) + '\n{"event": "step", "st')
    p = progress_from_file(str(tmp_path))
    assert p.losses == [5.0, 4.0, 3.0] and p.step_times_ms == [10.0, 11.0, 12.0] and p.start["seq_len"] == 5
    (tmp_path / "progress.jsonl").write_text(lines[1] + "\n")  # steps without a start: not a run's progress
    assert progress_from_file(str(tmp_path)) is None


def test_summary_table_gives_the_median_step_beside_the_mean():
    from instrumented_model.run_summary import step_stats
    from reports.run_terminal import print_run_summary

    times = [5000.0, 80.0, 81.0, 82.0, 120.0]  # warm-up, three steady steps, one slow one
    tokens = 49152
    summary = {"status": "completed", "world_size": 1, "device": "cuda", "backend": "nccl", "preset": "speedrun",
               "steps": 5, "losses": [11.5, 9.0, 8.0, 7.0, 6.0], "step_times_ms": times,
               "tokens_per_s": tokens * 4 / (sum(times[1:]) / 1e3), "ranks": {"0": "completed"},
               "message": "1 ranks completed 5 steps"}
    con = Console(record=True, width=200)
    print_run_summary(con, summary, "/tmp/x", step_stats(summary))
    text = con.export_text()
    assert "90.8 ms (excluding step 0)" in text  # the mean, pulled up by the slow step
    assert f"81.5 ms, {tokens / 0.0815:,.0f} tokens/s" in text  # median of 80, 81, 82, 120


def test_overall_status_and_message():
    ok = {"0": {"status": "completed"}, "1": {"status": "completed"}}
    assert overall_status(0, ok, False) == "completed"
    assert overall_status(1, ok, False) == "failed"  # the launcher's exit code counts too
    assert overall_status(0, ok, True) == "interrupted"
    assert describe("interrupted", ok, 4, 200) == "interrupted by the user after 4/200 steps"
    mixed = {"0": {"status": "failed", "error": "Terminated: terminated by signal 15", "last_step": 3},
             "1": {"status": "failed", "error": "RuntimeError: boom", "last_step": 2},
             "2": {"status": "crashed", "error": "no status.json", "last_step": None}}
    assert overall_status(1, mixed, False) == "crashed"
    # the rank that failed on its own is named, not the one torn down by the launcher
    assert describe("failed", {k: mixed[k] for k in ("0", "1")}, 3, 10) == \
        "failed: rank 1 failed after step 2: RuntimeError: boom"
    assert describe("completed", ok, 5, 5) == "2 ranks completed 5 steps"


def test_rank_statuses_mark_missing_and_hung(tmp_path):
    for r in (0, 1, 2):
        (tmp_path / f"rank{r}").mkdir()
    (tmp_path / "rank0" / "status.json").write_text(json.dumps({"status": "completed", "error": None, "last_step": 4}))
    (tmp_path / "rank1" / "status.json").write_text("{torn")
    (tmp_path / "rank2" / "status.json").write_text(json.dumps({"status": "failed", "error": "x", "last_step": 1}))
    (tmp_path / "rank2" / "watchdog.json").write_text("{}")
    st = rank_statuses(str(tmp_path), range(4))
    assert [st[str(r)]["status"] for r in range(4)] == ["completed", "crashed", "hung", "crashed"]
    assert "no status.json" in st["3"]["error"]


def test_run_dir_reuse_only_for_previous_runs(tmp_path):
    prepare_run_dir(str(tmp_path / "new"))
    assert (tmp_path / "new").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds no commscope run"):
        prepare_run_dir(str(other))
    assert (other / "notes.txt").read_text() == "mine"
    old = tmp_path / "old"
    (old / "rank0").mkdir(parents=True)
    (old / "summary.json").write_text("{}")
    (old / "progress.jsonl").write_text('{"event": "start"}\n')  # the old run's steps must not mix in
    (old / "report.html").write_text("keep")
    prepare_run_dir(str(old))
    assert sorted(os.listdir(old)) == ["report.html"]


def test_topology_builds_torchrun_rendezvous_options():
    assert Topology(4).torchrun_args() == ["--nproc-per-node", "4", "--nnodes", "1", "--standalone"]
    assert Topology(8, nnodes=2, rdzv_endpoint="h:29500").torchrun_args() == [
        "--nproc-per-node", "8", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29500"]
    assert Topology(2, nnodes=2, node_rank=1, master_addr="h", master_port=1234).torchrun_args()[-6:] == [
        "--master-addr", "h", "--master-port", "1234", "--node-rank", "1"]
    with pytest.raises(UserError, match="several nodes"):
        Topology(2, nnodes=2).torchrun_args()
    assert Topology(3, nnodes=2, rdzv_endpoint="h:1").world_size == 6
    assert _ranges(["0", "1", "2", "5", "7", "6"]) == "0-2,5-7"


# ---------------------------------------------------------------- CLI: bad options

@pytest.mark.parametrize("args, nproc, message", [
    ([], 3, "cannot be sharded over 3 ranks"),
    (["--head-layout", "sideways"], 2, "invalid choice"),
    (["--batch-size", "6"], 4, "must be a positive multiple"),
    (["--work-order", "attn,mlp"], 2, "must list every label exactly once"),
    (["--device", "cpu", "--backend", "nccl"], 2, "needs --device cuda"),
    (["--trace", "off", "--profile", "2:4"], 2, "needs tracing on"),
    (["--profile", "4:2"], 2, "--profile 4:2: selects no step"),
    (["--steps", "0"], 2, "--steps must be >= 1"),
])
def test_bad_options_are_refused_before_launch(tmp_path, args, nproc, message):
    out = tmp_path / "run"
    with pytest.raises(UserError, match=re.escape(message)):
        launch_training(args, Topology(nproc), str(out))
    assert not out.exists()  # nothing is launched or written


def test_bad_option_exits_2_with_one_line(tmp_path):
    out = tmp_path / "run"
    r = commscope("run", "--nproc", "3", "--out", str(out), timeout=120)
    assert r.returncode == 2
    assert r.stderr == "commscope: error: preset 'tiny' cannot be sharded over 3 ranks: " \
        "vocab rows (ve0-2, embed) = 512 is not divisible by 3\n"
    assert not out.exists()


# ---------------------------------------------------------------- end to end (torch.distributed.run, gloo)

def _quiet() -> Console:
    return Console(file=io.StringIO())


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
def test_run_nproc_8_completes_on_cpu(tmp_path):
    out = tmp_path / "run8"
    r = commscope("run", "--nproc", "8", "--steps", "12", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    s = _summary(out)
    assert set(s) == SUMMARY_KEYS
    assert (s["schema_version"], s["status"], s["world_size"], s["backend"], s["device"], s["preset"]) == \
        (1, "completed", 8, "gloo", "cpu", "tiny")
    assert (s["steps"], s["head_layout"], s["comm_schedule"], s["exit_code"]) == (12, "transposed", "explicit", 0)
    assert s["ranks"] == {str(r): "completed" for r in range(8)}
    assert len(s["losses"]) == len(s["step_times_ms"]) == 12 and s["tokens_per_s"] > 0
    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [r["event"] for r in progress] == ["start"] + ["step"] * 12
    assert [r["loss"] for r in progress[1:]] == s["losses"]
    assert all(t > 0 for t in s["step_times_ms"])
    # starts near ln(vocab) = ln(512) = 6.24 and visibly falls
    assert 5.0 < s["losses"][0] < 7.5
    assert np.mean(s["losses"][-3:]) < s["losses"][0] - 0.5
    for rank in range(8):
        st = json.loads((out / f"rank{rank}" / "status.json").read_text())
        assert st["status"] == "completed" and st["error"] is None
    config = json.loads((out / "config.json").read_text())
    assert len(config["scatter_order"]) == 13 and config["args"]["steps"] == 12
    assert (out / "launcher.log").stat().st_size > 0
    assert f"commscope report {out}" in r.stdout.replace("\n", "")


@pytest.mark.slow
def test_losses_agree_across_world_sizes(tmp_path):
    """Same seed and global batch: the sharded optimizer must make 1, 2 and 4 ranks compute the same run."""
    losses = {}
    for n in (1, 2, 4):  # in-process launcher (the CLI wrapper is covered above): one torch import less
        out = tmp_path / f"ws{n}"
        s = launch_training(["--steps", "6", "--batch-size", "8", "--grad-accum", "2", "--trace", "off",
                             "--seed", "7"], Topology(n), str(out), console=_quiet())
        assert s["status"] == "completed", s["message"]
        assert _summary(out)["losses"] == s["losses"]
        losses[n] = s["losses"]
    assert len(losses[1]) == 6
    np.testing.assert_allclose(losses[2], losses[1], rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(losses[4], losses[1], rtol=2e-4, atol=2e-4)
    assert losses[1][-1] < losses[1][0]  # and it trains


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_untraced_run_reads_each_loss_one_step_late_with_the_same_values(tmp_path, device):
    """--trace off (on CUDA: each loss read one step late, through its own event) and light: the losses,
    their order and the step count must be those of a traced run, which reads every loss at its own step
    end; and every step's period is a real one, the last included (timed between two late `.item()` reads the
    last step would get a ~0 ms period)."""
    runs = {}
    for trace in ("off", "light"):
        out = tmp_path / trace
        s = launch_training(["--steps", "6", "--trace", trace, "--seed", "3", "--device", device,
                             "--preset", "tiny"], Topology(1), str(out), console=_quiet())
        assert s["status"] == "completed", s["message"]
        progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
        assert [r.get("step") for r in progress[1:]] == list(range(6))
        assert all(r["step_ms"] > 0 and r["tokens_per_s"] > 0 and 0 <= r["wait_ms"] <= r["step_ms"]
                   for r in progress[1:])
        periods = [r["step_ms"] for r in progress[2:]]  # step 0 carries the warm-up
        assert periods[-1] > 0.25 * float(np.median(periods)), periods
        assert json.loads((out / "rank0" / "status.json").read_text())["last_step"] == 5
        runs[trace] = s["losses"]
    assert len(runs["off"]) == 6
    if device == "cpu":
        assert runs["off"] == runs["light"]
    else:  # the same kernels; only reductions that are not bitwise reproducible may differ
        np.testing.assert_allclose(runs["off"], runs["light"], rtol=1e-4)
    events = [json.loads(line) for line in (tmp_path / "light" / "rank0" / "events.jsonl").read_text().splitlines()]
    steps = [r for r in events if r["kind"] == "step"]
    assert [r["loss"] for r in steps] == runs["light"]  # the traced step records carry their own step's loss


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["off", "light"])
def test_failing_rank_gives_failed_summary(tmp_path, trace):
    """Shards whose later tokens lie outside the vocabulary: the header check passes, step 2 fails. Step 2's
    batch is made during step 1 (the trainer prepares the next batch early), yet step 1 completes: its
    record is written (traced) and only step 2 fails."""
    from instrumented_model.data import write_shard

    tokens = np.arange(2 * 16 * 64 + 1) % 512
    bad = np.full(16 * 64, 9999)
    write_shard(str(tmp_path / "shard_000.bin"), np.concatenate([tokens, bad]))
    out = tmp_path / "run"
    launched = launch_training(["--steps", "5", "--trace", trace, "--data", str(tmp_path / "shard_*.bin")],
                               Topology(2), str(out), console=_quiet())
    s = _summary(out)
    assert s == launched
    assert s["status"] == "failed" and s["exit_code"] != 0 and len(s["losses"]) == 2
    assert set(s["ranks"].values()) == {"failed"}
    assert "outside the model's vocabulary" in s["message"]
    st = json.loads((out / "rank1" / "status.json").read_text())
    assert st["status"] == "failed" and st["last_step"] == 1
    if trace == "light":
        for r in (0, 1):
            recs = [json.loads(line) for line in (out / f"rank{r}" / "events.jsonl").read_text().splitlines()]
            assert [x["step"] for x in recs if x["kind"] == "step"] == [0, 1]


def test_fp32_residual_flag_reaches_the_trainer_and_its_config(tmp_path):
    """`commscope run --fp32-residual` is passed to the trainer, whose config.json records it (a default
    run records false: bf16 stream under CUDA autocast; on CPU there is no autocast, so only the record
    differs here)."""
    out = tmp_path / "run"
    r = commscope("run", "--nproc", "1", "--steps", "1", "--trace", "off", "--fp32-residual", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["args"]["fp32_residual"] is True
    s = launch_training(["--steps", "1", "--trace", "off"], Topology(1), str(tmp_path / "default"), console=_quiet())
    assert s["status"] == "completed", s["message"]
    assert json.loads((tmp_path / "default" / "config.json").read_text())["args"]["fp32_residual"] is False
