"""Ctrl-C of a running `commscope run` (2 gloo CPU ranks): doctor says `interrupted` with every rank's last
finished step, not a crash or a failure. One multi-process run (slow)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from commscope.pipeline import diagnose_path

pytestmark = pytest.mark.slow


def finished_steps(out, rank) -> int:
    try:
        lines = (out / f"rank{rank}" / "events.jsonl").read_text().splitlines()
    except OSError:
        return 0
    return sum(1 for x in lines if '"kind":"step"' in x.replace(" ", ""))


def test_ctrl_c_is_interrupted(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "commscope", "run", "--nproc", "2", "--steps", "500",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and min(finished_steps(out, 0), finished_steps(out, 1)) < 2:
            assert proc.poll() is None, "the run ended before it could be interrupted"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks) == ("interrupted", []), d.summary
    assert [e["rank"] for e in d.evidence] == [0, 1] and d.step >= 1


def test_ctrl_c_on_a_hang_prints_the_doctors_hang(tmp_path):
    """The user sees the job hang (rank 1 never launches 'mlp' in step 2) and presses Ctrl-C: `commscope run`
    says it was interrupted and, as the doctor finds more than that, the hang on rank 1; a run interrupted
    while healthy prints no verdict beyond its own line (the test above)."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "commscope", "run", "--nproc", "2", "--steps", "50",
                             "--hang-timeout", "120", "--inject", "hang@rank=1,step=2,label=mlp", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and finished_steps(out, 0) < 2:
            assert proc.poll() is None, "the run ended before it could be interrupted"
            time.sleep(0.2)
        time.sleep(4.0)  # rank 0 waits in step 2's 'mlp' well past the stall bar
        proc.send_signal(signal.SIGINT)
        printed, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, printed
    printed = " ".join(printed.split())  # rich wraps lines at the terminal's width
    assert "interrupted by SIGINT" in printed, printed
    assert "hang (culprit rank(s) 1): rank(s) 0 launched reduce_scatter 'mlp'" in printed, printed
    assert f"Details: commscope doctor {out}" in printed
