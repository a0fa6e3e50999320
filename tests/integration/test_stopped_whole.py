"""A script's own torchrun job, ended by a signal (no commscope launcher, so no summary.json): each rank's
status.json holds when its end began (`ended_ns`, the signal's arrival), and the doctor tells a job stopped
whole while a rank was stuck (hang, by SIGTERM or Ctrl-C), one stopped while it ran (interrupted) and one
rank killed first (crash) apart by it. Real processes: torch.distributed.run, gloo, 2 ranks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commscope.pipeline import diagnose_path
from ports import free_port
from paths import ROOT



def _job(tmp_path: Path, *extra: str, script: str = "stall_loop.py") -> tuple[subprocess.Popen, Path]:
    script = ROOT / "examples" / script
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"),
           "--master-port", str(free_port()), str(script), "--out", str(out), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, out


def _wait_for_step(out: Path, step: int, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        p = out / "rank0" / "events.jsonl"
        if p.exists() and f'"kind":"step","rank":0,"step":{step},' in p.read_text().replace(" ", ""):
            return
        time.sleep(0.1)
    raise AssertionError(f"step {step} not recorded within {timeout_s} s")


def _end(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _statuses(out: Path) -> dict[int, dict]:
    return {r: json.loads((out / f"rank{r}" / "status.json").read_text()) for r in (0, 1)}


def test_stopped_whole_while_rank_1_is_stuck_is_a_hang_on_rank_1(tmp_path):
    proc, out = _job(tmp_path, "--stall-at", "3")
    _wait_for_step(out, 2)
    time.sleep(2.5)  # rank 0 waits in step 3's first all_reduce past the one-second stall bar
    proc.send_signal(signal.SIGTERM)
    _end(proc)
    st = _statuses(out)
    assert all("terminated by signal 15 (SIGTERM)" in s["error"] for s in st.values())
    # both ends began at the signal's arrival, though rank 0 sat in C++ and wrote its status 2 s later
    assert abs(st[0]["ended_ns"] - st[1]["ended_ns"]) < 50_000_000
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step, d.label) == ("hang", [1], 3, "weight")
    assert "when the job was stopped whole from outside: SIGTERM reached both ranks within" in d.summary
    assert d.details["waited_ms"] >= 2_000


def test_ctrl_c_while_rank_1_is_stuck_is_the_hang_not_just_an_interruption(tmp_path):
    proc, out = _job(tmp_path, "--stall-at", "3")
    _wait_for_step(out, 2)
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    _end(proc)
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step) == ("hang", [1], 3)
    assert d.summary.endswith("when the run was stopped by the user.")
    # the stuck rank's region was open when Ctrl-C came: timed, so the region is said to be cut by it
    assert "rank 1 was in region data (step 3) when its end came (status.json ended_ns)" in d.summary


def test_stopped_whole_while_every_rank_is_stuck_outside_communication_is_a_hang(tmp_path):
    """Both ranks sleep in their own region 'data' (a data loader, a lock): no collective is pending and no
    rank is missing from one, but neither recorded anything for seconds when SIGTERM came."""
    proc, out = _job(tmp_path, "--stall-at", "3", "--stall-ranks", "all")
    _wait_for_step(out, 2)
    time.sleep(2.5)
    proc.send_signal(signal.SIGTERM)
    _end(proc)
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step) == ("hang", [], 2)
    assert d.summary.startswith("hang: no rank had recorded anything for ")
    assert "every rank was stuck outside communication" in d.summary
    assert "Rank 0 was in region data (step 3) when its end came (status.json ended_ns)" in d.summary
    assert d.details["silent_ms"] >= 2_000


def test_ddp_stopped_whole_while_rank_1_is_stuck_is_a_hang_on_rank_1(tmp_path):
    """DDP: rank 0 blocks in backward's bucket all_reduce; SIGTERM ends rank 1 at once, and rank 0's wait
    then raises gloo's connection error before its own handler runs. Its status says SIGTERM had begun its
    end (status.json `signal`), so the job still reads as stopped whole while rank 1 was stuck."""
    proc, out = _job(tmp_path, "--stall-at", "3", "--steps", "100000", script="ddp_loop.py")
    _wait_for_step(out, 2)
    time.sleep(2.5)
    proc.send_signal(signal.SIGTERM)
    _end(proc)
    st = _statuses(out)
    assert [s.get("signal") for s in st.values()] == ["SIGTERM", "SIGTERM"]
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step) == ("hang", [1], 3)
    assert d.label.startswith("ddp_bucket") and "SIGTERM reached both ranks within" in d.summary
    # the launcher's summary reads these ends as the doctor does: one signal to the whole job, no rank first
    from instrumented_model.run_summary import JobEnd, rank_statuses, verdict

    status, line = verdict(rank_statuses(str(out), range(2)), JobEnd(torchrun_code=1), 3, 100000)
    assert status == "interrupted" and "reached every rank within" in line, line


def test_stopped_whole_while_running_is_interrupted(tmp_path):
    proc, out = _job(tmp_path)
    _wait_for_step(out, 20)
    proc.send_signal(signal.SIGTERM)
    _end(proc)
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks) == ("interrupted", [])
    assert d.summary.startswith("interrupted: the job was stopped whole from outside while it ran: SIGTERM reached "
                                "both ranks within")


def test_rank_1_killed_from_outside_is_a_crash_of_rank_1(tmp_path):
    """Killed a moment into step 3, before rank 0 had waited the stall bar (1 s) for it: the kill is what
    rank 0 then lacked, a crash."""
    proc, out = _job(tmp_path, "--stall-at", "3")
    _wait_for_step(out, 2)
    time.sleep(0.2)
    os.kill(json.loads((out / "rank1" / "meta.json").read_text())["pid"], signal.SIGTERM)
    _end(proc)
    st = _statuses(out)
    assert st[1]["ended_ns"] < st[0]["ended_ns"]
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1]), d.summary
    assert d.summary.startswith("crash: rank(s) 1 ended by SIGTERM from outside the job")


def test_the_stuck_rank_killed_after_the_others_waited_past_the_bar_is_the_hang(tmp_path):
    """The user sees the job hang and kills the stuck rank: rank 0 had waited 2.5 s (over the 1 s stall bar)
    in the collective rank 1 never launched when rank 1 was ended, so rank 1 was stuck: a hang on rank 1,
    not a crash."""
    proc, out = _job(tmp_path, "--stall-at", "3")
    _wait_for_step(out, 2)
    time.sleep(2.5)
    os.kill(json.loads((out / "rank1" / "meta.json").read_text())["pid"], signal.SIGTERM)
    _end(proc)
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step) == ("hang", [1], 3), d.summary
    assert "rank 0 had waited " in d.summary
    assert d.summary.endswith("when rank(s) 1 were ended by SIGTERM from outside the job.")
    assert d.details["waited_ms"] >= 2000


@pytest.fixture(autouse=True)
def _no_leftover_processes():
    yield
    left = subprocess.run(["pgrep", "-f", "(stall|ddp)_loop.py --out"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"
