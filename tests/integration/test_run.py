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

from commscope.commands._run_view import TerminalView
from commscope.errors import UserError
from instrumented_model.launcher import Topology, launch_training
from instrumented_model.out_dir import claim
from instrumented_model.run_summary import JobEnd, RunProgress, exit_code, progress_from_file, rank_statuses, verdict
from commscope.util.ranges import int_ranges

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
    from commscope.analyze.run_step_stats import step_stats
    from reports.run_terminal import print_run_summary

    times = [5000.0, 80.0, 81.0, 82.0, 120.0]  # warm-up, three steady steps, one slow one
    tokens = 49152
    summary = {"status": "completed", "world_size": 1, "device": "cuda", "backend": "nccl", "preset": "speedrun",
               "steps": 5, "losses": [11.5, 9.0, 8.0, 7.0, 6.0], "step_times_ms": times,
               "tokens_per_s": tokens * 4 / (sum(times[1:]) / 1e3), "ranks": {"0": "completed"},
               "message": "1 rank completed 5 steps"}
    con = Console(record=True, width=200)
    print_run_summary(con, summary, "/tmp/x", step_stats(summary))
    text = con.export_text()
    # rank 0's figures (its progress records), named so: report and doctor give every rank's
    assert "rank 0's mean step   │ 90.8 ms (excluding step 0)" in text  # the mean, pulled up by the slow step
    assert f"rank 0's median step │ 81.5 ms, {tokens / 0.0815:,.0f} tokens/s" in text  # median of 80, 81, 82, 120


def _st(status, error=None, last_step=0, ending=None, ended_ns=None):
    return {"status": status, "error": error, "last_step": last_step, "ending": ending, "ended_ns": ended_ns}


def test_verdict_names_the_rank_behind_the_ending_not_its_victims():
    ok = {"0": _st("completed", ending="completed"), "1": _st("completed", ending="completed")}
    assert verdict(ok, JobEnd(0), 5, 5) == ("completed", "2 ranks completed 5 steps")
    assert verdict({"0": ok["0"]}, JobEnd(0), 1, 1) == ("completed", "1 rank completed 1 step")
    assert verdict(ok, JobEnd(1), 5, 5)[0] == "failed"  # the launcher's exit code counts too
    assert verdict(ok, JobEnd(1, signal=2), 4, 200) == ("interrupted", "interrupted by SIGINT after 4/200 steps")
    # a signal that came as the job ended, once every rank had completed every step, cut nothing short
    assert verdict(ok, JobEnd(143, signal=15), 5, 5) == \
        ("completed", "2 ranks completed 5 steps; SIGTERM reached the launcher after every rank had completed")
    assert exit_code("completed", JobEnd(143, signal=15)) == 0
    one_short = {**ok, "1": _st("interrupted", "KeyboardInterrupt", 3, "signalled")}
    assert verdict(one_short, JobEnd(1, signal=2), 5, 5)[0] == "interrupted"
    assert exit_code("interrupted", JobEnd(1, signal=2)) == 130 and exit_code("interrupted", JobEnd(1, signal=15)) == 143
    assert exit_code("completed", JobEnd(0)) == 0 and exit_code("hung", JobEnd(1)) == 1
    assert exit_code("failed", JobEnd(1, storage_error="full")) == 2
    term = "Terminated: terminated by signal 15 (SIGTERM)"
    mixed = {"0": _st("failed", term, 3, "signalled"), "1": _st("failed", "RuntimeError: boom", 2, "error"),
             "2": _st("crashed", "no status.json", None, "no-status")}
    assert verdict(mixed, JobEnd(1), 3, 10)[0] == "crashed"
    # the rank that failed on its own is named, not the one torn down by the launcher
    assert verdict({k: mixed[k] for k in ("0", "1")}, JobEnd(1), 3, 10) == \
        ("failed", "failed: rank 1 failed after step 2: RuntimeError: boom")
    # --trace off hang: the peers' backend timeout makes them the victims; the rank that did not time out
    # (terminated by the teardown) is the culprit
    # (a peer's timeout closes its connections: a rank still waiting sees "connection closed", a victim too)
    off = {"0": _st("failed", "RuntimeError: Application timeout caused pair closure", -1, "waited"),
           "1": _st("failed", term, 0, "signalled"), "2": _st("failed", "Timed out waiting 15000ms", -1, "waited"),
           "3": _st("failed", "RuntimeError: [pair.cc:553] Connection closed by peer", -1, "peer-gone")}
    status, msg = verdict(off, JobEnd(1), 1, 3)
    assert status == "hung" and "rank(s) 0,2,3 waited on a collective that rank(s) 1 never joined" in msg
    # with two ranks the hung rank's own timeout may close the connection first: no rank says it waited,
    # but no step came for longer than the hang timeout before anything failed
    two = {"0": off["3"], "1": off["1"]}
    assert verdict(two, JobEnd(1, hang_timeout=5), 1, 3)[0] == "failed"  # no stall known: not a hang
    assert verdict(two, JobEnd(1, hang_timeout=5), 1, 3, stalled_s=4.0)[0] == "failed"
    assert verdict(two, JobEnd(1, hang_timeout=5), 1, 3, stalled_s=15.2) == \
        ("hung", "hung: rank(s) 0 waited on a collective that rank(s) 1 never joined; rank(s) 1 were then terminated")
    # every rank ended by a signal: the first to end is named (the others were torn down after it)
    sig = {"0": _st("failed", term, 1, "signalled", 300), "1": _st("failed", term, 1, "signalled", 100),
           "2": _st("failed", "Connection closed by peer", 1, "peer-gone", 200)}
    assert verdict(sig, JobEnd(1), 2, 9)[1].startswith("failed: rank 1 ended first")
    # torchrun killed from outside: its ranks' SIGTERM is a consequence
    assert verdict({"0": sig["0"]}, JobEnd(-9), 2, 9)[1] == \
        "failed: torch.distributed.run was killed by SIGKILL after 2/9 steps; its ranks were terminated"
    stopped = {"0": _st("hung", "hang watchdog", 1, "waited"), "1": _st("hung", "stopped", 1, "stopped")}
    status, msg = verdict(stopped, JobEnd(1, stopped={1: 6.2}), 2, 9)
    assert status == "hung" and msg.startswith("hung: rank(s) 1 stopped (SIGSTOP)") and "rank(s) 0 waited" in msg
    assert verdict(ok, JobEnd(1, storage_error="OUT: no space left on device"), 1, 5) == \
        ("failed", "failed: OUT: no space left on device, after 1/5 steps")


def test_rank_statuses_mark_missing_hung_and_how_each_ended(tmp_path):
    for r in (0, 1, 2, 4):
        (tmp_path / f"rank{r}").mkdir()
    (tmp_path / "rank0" / "status.json").write_text(json.dumps({"status": "completed", "error": None, "last_step": 4}))
    (tmp_path / "rank1" / "status.json").write_text("{torn")
    (tmp_path / "rank2" / "status.json").write_text(json.dumps({"status": "failed", "error": "x", "last_step": 1}))
    (tmp_path / "rank2" / "watchdog.json").write_text("{}")
    (tmp_path / "rank4" / "status.json").write_text(json.dumps({"status": "failed", "error": "y", "last_step": 1}))
    st = rank_statuses(str(tmp_path), range(5), stopped={4: 7.0})
    assert [st[str(r)]["status"] for r in range(5)] == ["completed", "crashed", "hung", "not started", "hung"]
    assert [st[str(r)]["ending"] for r in range(5)] == ["completed", "no-status", "waited", "no-folder", "stopped"]
    assert "unreadable status.json" in st["1"]["error"] and "no rank folder" in st["3"]["error"]
    assert st["0"]["ended_ns"] == os.stat(tmp_path / "rank0" / "status.json").st_mtime_ns and st["3"]["ended_ns"] is None


def test_a_rank_that_ended_first_while_waiting_long_is_said_to_have_waited(tmp_path):
    """SIGTERM to rank 0 while it waited 9.5 s on a collective a stuck rank 1 never launched: rank 0 ended
    first, but it is the stuck rank's victim. Its inflight.json (written at its end) says how long it had
    waited: the message says so and points at the doctor; a wait under a second is no news."""
    term = "Terminated: terminated by signal 15 (SIGTERM)"
    for r in (0, 1):
        (tmp_path / f"rank{r}").mkdir()
        (tmp_path / f"rank{r}" / "status.json").write_text(json.dumps(
            {"status": "failed", "error": term, "last_step": 1, "ended_ns": 10_000_000_000 + 2_000_000_000 * r}))
    inflight = {"rank": 0, "inflight": [{"label": "attn", "call_ns": 400_000_000, "wait_ns": 500_000_000},
                                        {"label": "scalars", "call_ns": 600_000_000, "wait_ns": None}]}
    (tmp_path / "rank0" / "inflight.json").write_text(json.dumps(inflight))
    st = rank_statuses(str(tmp_path), range(2))
    assert st["0"]["waiting"] == (9.5, "attn") and st["1"]["waiting"] is None
    assert verdict(st, JobEnd(1), 2, 9)[1] == (
        f"failed: rank 0 ended first ({term}) after step 1, 9.5 s into its wait on 'attn', which had not "
        "completed (a rank it waited on may have been stuck: commscope doctor says); torch.distributed.run then "
        "stopped the others")
    inflight["inflight"][0]["wait_ns"] = 9_200_000_000  # 0.8 s: a moment's wait
    (tmp_path / "rank0" / "inflight.json").write_text(json.dumps(inflight))
    assert rank_statuses(str(tmp_path), range(2))["0"]["waiting"] is None


def _claim(path, overwrite=False, run_id="new"):
    out = claim(str(path), overwrite=overwrite, run_id=run_id)
    out.release()
    return out


def test_out_dir_is_claimed_only_when_new_empty_or_a_marked_run(tmp_path):
    _claim(tmp_path / "new")
    assert json.loads((tmp_path / "new" / "commscope-run.json").read_text())["run_id"] == "new"
    for name, files in {"hf": {"config.json": '{"model_type": "gpt2"}'}, "ck": {"rank0/shard.pt": "w"},
                        "old": {"summary.json": "{}", "rank0/status.json": "{}"}, "notes": {"notes.txt": "mine"}}.items():
        d = tmp_path / name
        for f, text in files.items():
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text(text)
        for overwrite in (False, True):
            with pytest.raises(UserError, match="holds no commscope run"):
                _claim(d, overwrite)
        assert {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} == set(files)  # untouched
    with pytest.raises(UserError, match="pass --overwrite"):
        _claim(tmp_path / "new")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="cannot create the run directory: Not a directory"):
        _claim(tmp_path / "afile" / "sub")
    with pytest.raises(UserError, match="exists and is not a directory"):
        _claim(tmp_path / "afile")


def test_overwrite_moves_the_old_run_aside_until_the_first_step(tmp_path):
    old = tmp_path / "old"
    _claim(old, run_id="r1")
    (old / "rank0").mkdir()
    (old / "rank0" / "events.jsonl").write_text("{}\n")
    (old / "summary.json").write_text('{"status": "completed"}')
    (old / "report.html").write_text("keep")  # not the run's: stays in place throughout
    out = _claim(old, overwrite=True, run_id="r2")
    aside = old / ".commscope-previous-r1"
    assert sorted(os.listdir(aside)) == ["commscope-run.json", "rank0", "summary.json"]
    assert sorted(os.listdir(old)) == [".commscope-previous-r1", "commscope-run.json", "report.html"]
    (old / "rank0").mkdir()  # the new run's files
    (old / "summary.json").write_text('{"status": "crashed"}')
    # a new run with no step gives the folder back to the old one and keeps its own files beside it
    assert out.settle(had_step=False) == str(old / ".commscope-unfinished-r2")
    assert sorted(os.listdir(old)) == [".commscope-unfinished-r2", "commscope-run.json", "rank0", "report.html",
                                       "summary.json"]
    kept = old / ".commscope-unfinished-r2"
    assert sorted(os.listdir(kept)) == ["commscope-run.json", "rank0", "summary.json"]
    assert json.loads((kept / "commscope-run.json").read_text())["run_id"] == "r2"
    assert "crashed" in (kept / "summary.json").read_text()
    assert json.loads((old / "commscope-run.json").read_text())["run_id"] == "r1"
    assert (old / "rank0" / "events.jsonl").exists() and "completed" in (old / "summary.json").read_text()
    out = _claim(old, overwrite=True, run_id="r3")
    out.first_step()
    assert sorted(os.listdir(old)) == [".commscope-unfinished-r2", "commscope-run.json", "report.html"]
    assert json.loads((old / "commscope-run.json").read_text())["run_id"] == "r3"


def test_a_second_claim_of_a_folder_in_use_is_refused(tmp_path):
    first = claim(str(tmp_path / "run"), overwrite=False, run_id="a")
    try:
        for overwrite in (False, True):
            with pytest.raises(UserError, match="in use by another commscope run \\(run id a"):
                claim(str(tmp_path / "run"), overwrite=overwrite, run_id="b")
    finally:
        first.release()
    assert json.loads((tmp_path / "run" / "commscope-run.json").read_text())["run_id"] == "a"


def test_topology_builds_torchrun_rendezvous_options():
    assert Topology(4).torchrun_args() == ["--nproc-per-node", "4", "--nnodes", "1", "--standalone"]
    assert Topology(8, nnodes=2, rdzv_endpoint="h:29500").torchrun_args() == [
        "--nproc-per-node", "8", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29500"]
    assert Topology(2, nnodes=2, node_rank=1, master_addr="h", master_port=1234).torchrun_args()[-6:] == [
        "--master-addr", "h", "--master-port", "1234", "--node-rank", "1"]
    with pytest.raises(UserError, match="several nodes"):
        Topology(2, nnodes=2).torchrun_args()
    assert Topology(3, nnodes=2, rdzv_endpoint="h:1").world_size == 6
    assert int_ranges(["0", "1", "2", "5", "7", "6"]) == "0-2,5-7"


# ---------------------------------------------------------------- CLI: bad options

@pytest.mark.parametrize("args, nproc, message", [
    ([], 3, "cannot be sharded over 3 ranks"),
    (["--head-layout", "sideways"], 2, "invalid choice"),
    (["--batch-size", "6"], 4, "must be a positive multiple"),
    (["--work-order", "attn,mlp"], 2, "must list every label exactly once"),
    (["--device", "cpu", "--backend", "nccl"], 2, "needs --device cuda"),
    (["--trace", "off", "--profile", "2:4"], 2, "needs tracing on"),
    (["--trace", "off", "--flush", "overlap"], 2, "--flush overlap needs tracing on"),
    (["--flush", "later"], 2, "invalid choice"),
    (["--with-stack"], 2, "--with-stack records Python stacks in the profiler's trace: give --profile"),
    (["--trace", "off", "--with-stack"], 2, "--with-stack records Python stacks in the profiler's trace"),
    (["--profile", "4:2"], 2, "--profile 4:2: selects no step"),
    (["--steps", "6", "--profile", "5:8"], 2, "--profile 5:8 reaches past the last step: --steps 6 runs steps 0..5"),
    (["--steps", "3", "--profile", "3"], 2, "--profile 3 reaches past the last step"),
    (["--steps", "2", "--trace", "full"], 2, "--trace full profiles steps 1:3 (step 0 carries the warm-up), past the "
     "last step: --steps 2 runs steps 0..1; give --steps 3 or more, or a window that fits with --profile"),
    (["--steps", "0"], 2, "--steps must be in 1..2**53-1, got 0"),
    (["--inject", "crash@rank=1,step=1,label=nope"], 2, "no collective is labelled 'nope'; the labels are attn, mlp,"),
    (["--inject", "hang@rank=1,step=1,label=embed"], 2, "--inject hang@rank=1,step=1,label=embed: embed carries no "
     "collective at step 1: it is tied to lm_head throughout (no --split-step), whose collectives carry both"),
    (["--split-step", "2", "--inject", "crash@rank=0,step=1,label=embed"], 2, "embed carries no collective at step 1: "
     "it is tied to lm_head until --split-step 2"),
    (["--hang-timeout", "inf"], 2, "--hang-timeout must be > 0 seconds and at most 604800 (a week), got inf"),
    (["--hang-timeout", "nan"], 2, "--hang-timeout must be > 0 seconds"),
    (["--seed", "-1"], 2, "--seed must be in 0..4294967295"),
    (["--seed", str(2**32)], 2, "--seed must be in 0..4294967295"),
    (["--lr", "nan"], 2, "--lr must be a finite number >= 0"),
    (["--wd", "-1"], 2, "--wd must be a finite number >= 0"),
])
def test_bad_options_are_refused_before_launch(tmp_path, args, nproc, message):
    out = tmp_path / "run"
    with pytest.raises(UserError, match=re.escape(message)):
        launch_training(args, Topology(nproc), str(out))
    assert not out.exists()  # nothing is launched or written


def test_a_fault_on_embed_is_taken_from_the_step_it_is_untied():
    """From --split-step on, embed has collectives of its own (a run's events say so: none labelled embed
    before the split, some at and after it), so a fault there fires and is accepted."""
    from instrumented_model.train import check_args, parse_args

    for split, step in (("2", "2"), ("0", "0")):
        args = parse_args(["--split-step", split, "--inject", f"hang@rank=1,step={step},label=embed", "--out", "."])
        check_args(args, 2)


def test_a_batch_whose_tokens_alone_exceed_the_machines_memory_is_refused():
    from instrumented_model.launcher import check_batch_memory
    from instrumented_model.train import parse_args

    args = parse_args(["--batch-size", "1000000", "--out", "."])
    check_batch_memory(args, 2, 2, 1_000_000 * 65 * 48 * 2)  # exactly fits
    with pytest.raises(UserError, match=re.escape(
            "--batch-size 1000000: the token batches alone need 5.8 GiB of memory on this node (2 ranks each making "
            "the global batch of 1,000,000 × 65 tokens), more than its 5.8 GiB")):
        check_batch_memory(args, 2, 2, 1_000_000 * 65 * 48 * 2 - 1)


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
def test_more_cpu_ranks_than_cores_warns_and_still_completes(tmp_path, monkeypatch, capsys):
    """2 CPU ranks on (what the launcher sees as) 1 core: one warning on stderr at launch and no second copy
    as a note under the summary table (on a terminal both reach the screen); the run and its exit code are
    unchanged."""
    from instrumented_model import launcher

    monkeypatch.setattr(launcher, "usable_cores", lambda: 1)
    console = Console(file=io.StringIO(), width=400)
    out = tmp_path / "run"
    summary = launch_training(["--device", "cpu", "--steps", "2"], Topology(2), str(out), view=TerminalView(console))
    assert (summary["status"], summary["exit_code"]) == ("completed", 0)
    note = launcher.oversubscription_note("cpu", 2, 1)
    assert capsys.readouterr().err.count(note) == 1
    printed = console.file.getvalue()
    assert note not in printed and "commscope run: completed" in printed


@pytest.mark.slow
def test_losses_agree_across_world_sizes(tmp_path):
    """Same seed and global batch: the sharded optimizer must make 1, 2 and 4 ranks compute the same run."""
    losses = {}
    for n in (1, 2, 4):  # in-process launcher (the CLI wrapper is covered above): one torch import less
        out = tmp_path / f"ws{n}"
        s = launch_training(["--steps", "6", "--batch-size", "8", "--grad-accum", "2", "--trace", "off",
                             "--seed", "7"], Topology(n), str(out), view=TerminalView(_quiet()))
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
                             "--preset", "tiny"], Topology(1), str(out), view=TerminalView(_quiet()))
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
                               Topology(2), str(out), view=TerminalView(_quiet()))
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
    s = launch_training(["--steps", "1", "--trace", "off"], Topology(1), str(tmp_path / "default"), view=TerminalView(_quiet()))
    assert s["status"] == "completed", s["message"]
    assert json.loads((tmp_path / "default" / "config.json").read_text())["args"]["fp32_residual"] is False
