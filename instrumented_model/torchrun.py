"""`python -m instrumented_model.torchrun ARGS`: torch.distributed.run ARGS, tied to the launcher.

What `commscope run` starts instead of `python -m torch.distributed.run`: the same launcher, run in this
process, after it (1) starts a thread that notices the launcher's death (this process is re-parented)
and then points stdout/stderr at /dev/null and sends itself SIGTERM, so torchrun tears its ranks down
as on any SIGTERM (writing into the dead launcher's pipe instead would keep torchrun ~10 s in failing
writes), (2) names itself as the parent its ranks must die with (instrumented_model.job), and (3)
deletes its log folder (COMMSCOPE_TORCHRUN_LOG_DIR, under /tmp) however it ends short of SIGKILL, so no
/tmp/commscope-torchrun-* folder outlives the job even when the launcher was killed.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time

from instrumented_model.job import PARENT_PID_ENV

LOG_DIR_ENV = "COMMSCOPE_TORCHRUN_LOG_DIR"
_WATCH_S = 0.2


def _watch_launcher(launcher_pid: int) -> None:
    while os.getppid() == launcher_pid:
        time.sleep(_WATCH_S)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    launcher = os.environ.get(PARENT_PID_ENV)
    if launcher:
        threading.Thread(target=_watch_launcher, args=(int(launcher),), name="commscope-launcher-watch",
                         daemon=True).start()
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the ranks' parent is this process
    log_dir = os.environ.pop(LOG_DIR_ENV, None)
    try:
        from torch.distributed.run import main as torchrun

        torchrun(sys.argv[1:])
    finally:
        if log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
