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
