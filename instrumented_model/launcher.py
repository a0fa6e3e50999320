"""Launch the reference trainer through torch's own elastic launcher and supervise the job.

`launch_training` checks the trainer's options in this process (the trainer's own `parse_args` and
`check_args`, so a bad option is one UserError, not one traceback per rank), prepares the run directory,
starts `python -m torch.distributed.run ... -m instrumented_model.train`, streams every output line into
`launcher.log` while the live bar shows rank 0's `@@commscope` progress lines, and when the job ends has
instrumented_model.run_summary build and write `summary.json` (docs/run_format.md). The terminal output
is reports/run_terminal.py's; `commscope run` reaches this module through its command module only.

Invariants:
- summary.json is written whatever happens (completed, failed, crashed, interrupted).
- A directory is reused as --out only if it is empty or holds a previous commscope run (then the old run's
  files are replaced); anything else is refused, so commscope never overwrites unrelated data.
- A fault (a watchdog report, a failed rank) ends the whole job within _FAULT_TEARDOWN_S of its first
  sign, so `run` ends within the hang timeout + a few seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from rich.console import Console

from commscope.errors import UserError
from commscope.rundir import is_run_dir, rank_dirs, read_status
from commscope.rundir.schema import (CONFIG, FLIGHT_RECORDER_DIR, FLIGHT_RECORDER_PREFIX, LAUNCHER_LOG, PROGRESS,
                                     SUMMARY, WATCHDOG)
from instrumented_model import train  # the trainer's own option parsing and checks; does not import torch
from instrumented_model.run_summary import RunProgress, build_summary, step_stats, write_summary
from reports.run_terminal import LiveProgress, print_run_dir, print_run_summary, print_run_verdict

_RUN_FILES = (SUMMARY, CONFIG, LAUNCHER_LOG, PROGRESS)
_SHUTDOWN_GRACE_S = 30
# After the first sign of a fault (a watchdog report, a failed rank) torch.distributed.run gets this long to
# tear the job down before the whole session is killed.
_FAULT_TEARDOWN_S = 10


@dataclass
class Topology:
    """Where the ranks run: processes on this node and how the nodes meet (torch.distributed.run options)."""

    nproc: int | None  # None: one per GPU with --device cuda, else 2 (resolved by launch_training)
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def torchrun_args(self) -> list[str]:
        if self.nproc < 1 or self.nnodes < 1:
            raise UserError(f"--nproc and --nnodes must be >= 1 (got {self.nproc}, {self.nnodes})")
        a = ["--nproc-per-node", str(self.nproc), "--nnodes", str(self.nnodes)]
        if self.rdzv_endpoint:
            a += ["--rdzv-backend", "c10d", "--rdzv-endpoint", self.rdzv_endpoint]
        elif self.nnodes > 1 or self.master_addr or self.master_port:
            if self.nnodes > 1 and (self.node_rank is None or not self.master_addr):
                raise UserError("several nodes need --rdzv-endpoint HOST:PORT, or --master-addr and --node-rank")
            a += ["--master-addr", self.master_addr or "127.0.0.1", "--master-port", str(self.master_port or 29500)]
        else:
            a += ["--standalone"]  # a free port per job, so parallel local runs do not collide
        if self.node_rank is not None:
            a += ["--node-rank", str(self.node_rank)]
        return a


def default_run_dir(preset: str, world_size: int) -> str:
    return os.path.join("runs", f"{dt.datetime.now():%Y%m%d-%H%M%S}-{preset}-{world_size}")


def prepare_run_dir(path: str) -> None:
    """Create the run directory; replace a previous commscope run in it; refuse any other content."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"--out {path} exists and is not a directory")
    os.makedirs(path, exist_ok=True)
    entries = os.listdir(path)
    if not entries:
        return
    if not is_run_dir(path):
        raise UserError(f"--out {path} is not empty and holds no commscope run; choose another directory")
    for d in rank_dirs(path).values():
        shutil.rmtree(d)
    for e in entries:
        p = os.path.join(path, e)
        if e in _RUN_FILES:
            os.remove(p)
        elif e == FLIGHT_RECORDER_DIR and os.path.isdir(p):
            shutil.rmtree(p)


def _gpu_count() -> int:
    import torch  # only when the GPU count matters: a CPU launch with --nproc never imports it here

    return torch.cuda.device_count()


def _checked_args(trainer_argv: list[str], topology: Topology, out: str | None
                  ) -> tuple[argparse.Namespace, Topology]:
    """The trainer's options as it will see them, and the topology with its rank count resolved."""
    args = train.parse_args([*trainer_argv, "--out", out or "."])  # also resolves --device's default
    if topology.nproc is None:
        # max(1, …): without a GPU, check_args below names that, instead of refusing 0 ranks
        topology = dataclasses.replace(topology, nproc=max(1, _gpu_count()) if args.device == "cuda" else 2)
    train.check_args(args, topology.world_size)
    if args.backend == "nccl":
        if topology.nproc > _gpu_count():
            raise UserError(f"--backend nccl needs one GPU per rank: {topology.nproc} ranks, "
                            f"{_gpu_count()} GPUs here (--backend gloo lets ranks share a GPU)")
    return args, topology


def launch_training(trainer_argv: list[str], topology: Topology, out: str | None,
                    console: Console | None = None) -> dict:
    """Run the reference trainer on `topology`; return the summary (also written to OUT/summary.json)."""
    console = console or Console()
    args, topology = _checked_args(trainer_argv, topology, out)
    out = out or default_run_dir(args.preset, topology.world_size)
    torchrun_args = topology.torchrun_args()
    prepare_run_dir(out)
    print_run_dir(console, out)

    logdir = tempfile.mkdtemp(prefix="commscope-torchrun-")
    cmd = [sys.executable, "-m", "torch.distributed.run", *torchrun_args, "--tee", "3", "--log-dir", logdir,
           "-m", "instrumented_model.train", *trainer_argv, "--out", out]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.backend == "nccl":
        env.update(flight_recorder_env(out, env))
    try:
        exit_code, interrupted, prog = _supervise(cmd, env, out, console, args.steps)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)

    ranks = range(topology.world_size) if topology.nnodes == 1 else sorted(rank_dirs(out))
    summary = build_summary(out, args, topology.world_size, ranks, exit_code, interrupted, prog)
    if topology.nnodes == 1 or topology.node_rank in (None, 0):
        write_summary(out, summary)
    print_run_summary(console, summary, out, step_stats(summary))
    if summary["status"] not in ("completed", "interrupted"):
        print_run_verdict(console, out, _diagnose(out))
    return summary


def _supervise(cmd: list[str], env: dict, out: str, console: Console, steps: int
               ) -> tuple[int, bool, RunProgress]:
    """Run the job, copying its output into OUT/launcher.log and rank 0's steps onto the live bar;
    → (exit code, interrupted by the user, rank 0's progress as read from the console)."""
    prog = RunProgress()
    interrupted = False
    with open(os.path.join(out, LAUNCHER_LOG), "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=env, start_new_session=True)
        reaper_stop = threading.Event()
        threading.Thread(target=_reap_after_fault, args=(proc, out, reaper_stop), daemon=True).start()
        try:
            with LiveProgress(console, total=steps) as live:
                for line in proc.stdout:
                    log.write(line)
                    rec = prog.feed(line)
                    if rec and rec.get("event") == "step":
                        log.flush()
                        live.step(rec)
                    elif rec is None and "commscope:" in line:
                        live.note(line)
            exit_code = proc.wait()
        except KeyboardInterrupt:
            interrupted = True
            exit_code = _stop(proc)
            for line in proc.stdout:  # what the ranks said while stopping (their last steps, errors)
                log.write(line)
                prog.feed(line)
        finally:
            reaper_stop.set()
    return exit_code, interrupted, prog


def _diagnose(out: str):
    """`commscope doctor`'s diagnosis of a failed run, or the UserError saying why it cannot be made."""
    from commscope.analyze.doctor import diagnose_path

    try:
        return diagnose_path(out)
    except UserError as e:
        return e


def flight_recorder_env(out: str, env: dict) -> dict:
    """PyTorch's NCCL Flight Recorder, dumping into OUT/flight_recorder/ on a timeout (user settings win)."""
    prefix = os.path.join(os.path.abspath(out), FLIGHT_RECORDER_DIR, FLIGHT_RECORDER_PREFIX)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    wanted = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
              "TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
    return {k: v for k, v in wanted.items() if k not in env}


def fault_seen(out: str) -> bool:
    """True once any rank wrote a watchdog report or a non-completed status."""
    for d in rank_dirs(out).values():
        if os.path.exists(os.path.join(d, WATCHDOG)):
            return True
        try:
            st = read_status(d)
        except ValueError:  # being written, or torn: the next poll looks again
            continue
        if st is not None and st.get("status") != "completed":
            return True
    return False


def _reap_after_fault(proc: subprocess.Popen, out: str, stop: threading.Event) -> None:
    """Kill the job's session if it is still alive _FAULT_TEARDOWN_S after the first fault sign."""
    while not stop.wait(0.5):
        if proc.poll() is not None:
            return
        if fault_seen(out):
            try:
                proc.wait(timeout=_FAULT_TEARDOWN_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # our own session: only the job's processes
            return


def _stop(proc: subprocess.Popen) -> int:
    """Ask torch.distributed.run to stop its workers; kill the whole session if it does not."""
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=_SHUTDOWN_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own session (start_new_session): only the job's processes
        return proc.wait()
