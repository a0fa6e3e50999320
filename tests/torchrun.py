"""`torchrun(script, out, *extra)`: a user's job run as they would run it, `python -m torch.distributed.run
--nproc-per-node N script --out OUT ...` on gloo with one thread per rank, its launcher logs in
`<out>-logs` beside OUT (without --log-dir torch.distributed.run leaves a /tmp/torchelastic_* folder behind).

torch 2.13 on CPU now and then aborts a rank as its process ends or as its profiler stops (SIGABRT,
"terminate called without an active exception"), in scripts that import no commscope as well: that is the
job failing under the test, not what commscope records or reads of it. Such a job is run again, up to three
times in all, from an empty OUT, but only where `rerun_after_abort(out)` says the abort cannot have come
from the code under test (for a recorded job: every rank's recording had completed)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from paths import ROOT
from ports import free_port

ATTEMPTS = 3


def torchrun(script: Path, out: Path, *extra: str, nproc: int = 2, timeout: float = 180,
             rerun_after_abort: Callable[[Path], bool] = lambda out: True) -> subprocess.CompletedProcess:
    logs = out.parent / f"{out.name}-logs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--log-dir", str(logs),
           "--master-port", str(free_port()), str(script), "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for _ in range(ATTEMPTS):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        if proc.returncode == 0 or "SIGABRT" not in proc.stdout + proc.stderr or not rerun_after_abort(out):
            return proc
        # the next attempt starts from nothing: a profiler folder keeping the aborted attempt's traces would
        # hold two runs' files for one rank and step
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
    return proc
