"""Launch the reference trainer through torch's own elastic launcher and supervise the job.

`launch_training` checks the trainer's options in this process (the trainer's own `parse_args` and
`check_args`, so a bad option is one UserError, not one traceback per rank), claims the run directory
(instrumented_model.out_dir: a lock, the run marker, --overwrite), starts torch.distributed.run through
`python -m instrumented_model.torchrun ... -m instrumented_model.train`, streams every output line into
`launcher.log` (one per node with several nodes) while the live bar shows rank 0's `@@commscope`
progress lines, and when the job ends has instrumented_model.run_summary build and write `summary.json`
(docs/run_format.md). What the user sees
goes through a `RunView` that the caller passes: `commscope run`'s command module supplies the terminal
one (reports/run_terminal.py's output, the doctor's verdict on a failed run), so the trainer neither
renders nor analyzes, and reaches no module downstream of the run directory it writes.

Invariants:
- One process tree (instrumented_model.job): the launcher is a subreaper, every child dies with its
  parent, and SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to torchrun; whatever is still running
  _SHUTDOWN_GRACE_S later is killed (_NO_RANK_GRACE_S where no rank had started). A rank stopped (SIGSTOP) past the hang timeout is a hang and is
  killed. summary.json is built only once no process of the job is left, so no rank changes a run after
  it is summarized, and no /tmp/commscope-torchrun-* folder outlives the job.
- summary.json is written whatever happens (completed, failed, crashed, hung, interrupted), with the
  exit code `commscope run` exits with; when the run directory cannot be written (disk full, read-only)
  the run ends with one UserError line (exit 2) after the summary table, and no temp file is left; so
  does a run whose ranks refused their options before the first step (nodes launched with different
  ones), with no verdict and no report suggested: the command was wrong, not the job.
- A fault (a watchdog report, a failed rank) ends the whole job within _FAULT_TEARDOWN_S of its first
  sign, so `run` ends within the hang timeout + a few seconds.
- A CPU launch with more ranks on this node than usable cores warns once on stderr when it starts and
  again as a note under the summary table (`oversubscription_note`): its timings include CPU scheduling.
  The run and its exit code are unchanged; each rank records its cores in meta.json (`cpu_cores`), from
  which `report` notes the same of the run.
- Several nodes share one run directory, each with its own launcher: each writes its own
  `launcher.<node>.log` (schema.launcher_log_name), so no node's output replaces another's, and only the
  node that ran rank 0 writes summary.json, once every rank folder holds a status (or _SHUTDOWN_GRACE_S
  has passed), so the summary does not call a rank of a node still ending "crashed". What else a node
  does with the others (the live bar from rank 0's progress.jsonl, SIGTERM to its torchrun after a fault
  on another node, the user's signal to one node stopping all) is instrumented_model.nodes.NodeSync's,
  ticked by the same monitor thread that watches this node's processes.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import ContextManager, Protocol

import psutil

from commscope.errors import UserError
from commscope.rundir import rank_dirs, read_status, write_status
from commscope.rundir.schema import (CAPTURE_DIR_PREFIX, EVENTS, FLIGHT_RECORDER_DIR, FLIGHT_RECORDER_PREFIX,
                                     PROGRESS, STORAGE_ERROR, STORAGE_ERRORS, WATCHDOG, launcher_log_name,
                                     rank_dir_name)
from commscope.util.cpus import usable_cores  # also in each rank's meta.json (cpu_cores), for the report
from instrumented_model import out_dir, train  # train: the trainer's own option parsing and checks; no torch import
from instrumented_model.job import PARENT_PID_ENV, RUN_ID_ENV, TRAINER_MODULE, Job, become_subreaper, signame
from instrumented_model.nodes import NodeSync, ProgressFollower, await_statuses
from instrumented_model.run_summary import JobEnd, RunProgress, build_summary, signal_on_another_node, write_summary
from instrumented_model.torchrun import LOG_DIR_ENV

# After a signal to the launcher, or once torchrun has ended: the ranks' time to write their status and
# exit before whatever is left is killed.
_SHUTDOWN_GRACE_S = 10
# After the first sign of a fault (a watchdog report, a failed rank) torch.distributed.run gets this long to
# tear the job down before everything left is killed.
_FAULT_TEARDOWN_S = 10
# After the user's signal when no rank has started: torchrun's time to end before it is killed
_NO_RANK_GRACE_S = 2
_POLL_S = 0.25
_LOG_DIR_PREFIX = "commscope-torchrun-"
# The doctor's verdicts that a run the user stopped already tells by its own line (interrupted): its verdict
# is printed only where it finds more, such as the hang the user saw and stopped.
SAID_BY_INTERRUPTED = ("interrupted", "ok", "insufficient")


class StepProgress(Protocol):
    """The live progress of a job: rank 0's step records, and other lines the ranks print for the user."""

    def step(self, rec: dict) -> None: ...
    def note(self, line: str) -> None: ...


class RunView(Protocol):
    """What the user sees of a launch. The launcher calls these in order: `run_dir`, `note`s and `warn`,
    `progress` for the job's duration, then `summary` (with the --profile text, whose steps the figures
    leave out), the launcher's `note`s, and `verdict` on a failed run or a drill (--inject), and on an
    interrupted one unless the doctor finds only that (`unless`: the verdicts not to show)."""

    def run_dir(self, out: str) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def progress(self, total_steps: int) -> ContextManager[StepProgress]: ...
    def summary(self, summary: dict, out: str, profile: str | None, log: str, recorded: bool = True) -> None: ...
    def verdict(self, out: str, unless: tuple[str, ...] = ()) -> None: ...


class QuietView:
    """A launch that shows nothing: `commscope hooks`' capture run, and library callers."""

    def run_dir(self, out: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def progress(self, total_steps: int) -> ContextManager[StepProgress]:
        return contextlib.nullcontext(self)

    def step(self, rec: dict) -> None:
        pass

    def summary(self, summary: dict, out: str, profile: str | None, log: str, recorded: bool = True) -> None:
        pass

    def verdict(self, out: str, unless: tuple[str, ...] = ()) -> None:
        pass


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

    def check(self) -> None:
        """UserError for a topology torch.distributed.run would refuse later, or in every rank."""
        if self.nproc < 1 or self.nnodes < 1:
            raise UserError(f"--nproc and --nnodes must be >= 1 (got {self.nproc}, {self.nnodes})")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise UserError(f"--node-rank must be in 0..{self.nnodes - 1} (--nnodes {self.nnodes}), got {self.node_rank}")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise UserError(f"--master-port must be a TCP port, 1..65535, got {self.master_port}")
        if self.rdzv_endpoint is not None:
            _endpoint(self.rdzv_endpoint)

    def check_hosts(self) -> None:
        """UserError for a rendezvous or master host name that does not resolve: torch's store would retry
        connecting to it for minutes, silently, where the mistake is a typo. A host that resolves but is not
        up yet is left to torch, which waits for it as a rendezvous should."""
        hosts = [("--rdzv-endpoint", _endpoint(self.rdzv_endpoint)[0])] if self.rdzv_endpoint else []
        hosts += [("--master-addr", self.master_addr)] if self.master_addr else []
        for option, host in hosts:
            try:
                socket.getaddrinfo(host, None)
            except (socket.gaierror, UnicodeError) as e:
                raise UserError(f"{option}: host {host!r} does not resolve ({getattr(e, 'strerror', None) or e})") \
                    from None

    def node_name(self) -> str | None:
        """This node's name in the files each node of a several-node job writes (its launcher log): None
        on one node; `node<K>` with a static rendezvous (--node-rank K); `<host>.<pid>` where the c10d
        rendezvous assigns node ranks only after the launch."""
        if self.nnodes == 1:
            return None
        if self.rdzv_endpoint is None and self.node_rank is not None:
            return f"node{self.node_rank}"
        return f"{socket.gethostname()}.{os.getpid()}"

    def writes_summary(self, job: Job, out: str) -> bool:
        """Whether this node's launcher writes summary.json: the one node, node 0 of a static rendezvous,
        or the node whose torchrun started rank 0 (the c10d rendezvous decides which that is)."""
        if self.nnodes == 1:
            return True
        if self.rdzv_endpoint is None and self.node_rank is not None:
            return self.node_rank == 0
        # no rank started anywhere (the rendezvous timed out): each such node says so
        return 0 in job.ranks() or (not job.ranks() and not rank_dirs(out))

    def torchrun_args(self) -> list[str]:
        self.check()
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



def _endpoint(text: str) -> tuple[str, int]:
    """--rdzv-endpoint's HOST:PORT ([v6 address]:PORT), checked."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise UserError(f"--rdzv-endpoint must be HOST:PORT (a TCP port, 1..65535), got {text!r}")
    return host, int(port)


def default_run_dir(preset: str, world_size: int) -> str:
    return os.path.join("runs", f"{dt.datetime.now():%Y%m%d-%H%M%S}-{preset}-{world_size}")


def _gpu_count() -> int:
    import torch  # only when the GPU count matters: a CPU launch with --nproc never imports it here

    return torch.cuda.device_count()


def _checked_args(trainer_argv: list[str], topology: Topology, out: str | None
                  ) -> tuple[argparse.Namespace, Topology]:
    """The trainer's options as it will see them, and the topology with its rank count resolved."""
    args = train.parse_args([*trainer_argv, f"--out={out or '.'}"])  # also resolves --device's default
    if topology.nproc is None:
        # max(1, …): without a GPU, check_args below names that, instead of refusing 0 ranks
        topology = dataclasses.replace(topology, nproc=max(1, _gpu_count()) if args.device == "cuda" else 2)
    topology.check()
    train.check_args(args, topology.world_size)
    check_batch_memory(args, topology.world_size, topology.nproc, psutil.virtual_memory().total)
    topology.check_hosts()
    if args.backend == "nccl":
        if topology.nproc > _gpu_count():
            raise UserError(f"--backend nccl needs one GPU per rank: {topology.nproc} ranks, "
                            f"{_gpu_count()} GPUs here (--backend gloo lets ranks share a GPU)")
    return args, topology


# Host bytes per token while a rank makes a step's global batch (data.py's synthetic source: numpy's
# random draws, the cycle indices and the int64 tokens; 41 measured with tracemalloc), rounded up
BATCH_BYTES_PER_TOKEN = 48


def check_batch_memory(args: argparse.Namespace, world_size: int, ranks_here: int, host_bytes: int) -> None:
    """UserError for a --batch-size whose token batches alone exceed this machine's memory: every rank
    makes the whole global batch each step, so a node needs ranks × batch × (seq_len + 1) × 48 bytes before
    any activation. A lower bound, so a batch it lets through may still not fit."""
    from instrumented_model.config import make_config

    seq_len = make_config(args.preset, world_size).seq_len
    need = ranks_here * args.batch_size * (seq_len + 1) * BATCH_BYTES_PER_TOKEN
    if need > host_bytes:
        ranks = f"{ranks_here} rank{'s' if ranks_here != 1 else ''}"
        raise UserError(f"--batch-size {args.batch_size}: the token batches alone need {need / 2**30:,.1f} GiB of "
                        f"memory on this node ({ranks} each making the global batch of {args.batch_size:,} × "
                        f"{seq_len + 1} tokens), more than its {host_bytes / 2**30:,.1f} GiB")


def oversubscription_note(device: str, nproc: int, cores: int) -> str | None:
    """Why a CPU run's timings mislead when it has more ranks on this node than cores, else None: the
    ranks take turns on the cores, and a rank descheduled in a collective makes its peers wait for it."""
    if device != "cpu" or nproc <= cores:
        return None
    return (f"{nproc} CPU ranks on {cores} CPU core{'s' if cores != 1 else ''}: the ranks take turns on the cores, "
            "so step times and communication waits (exposed communication, skew) include CPU scheduling; "
            f"--nproc {cores} or fewer gives timings of the training itself")


def launch_training(trainer_argv: list[str], topology: Topology, out: str | None,
                    view: RunView | None = None, *, overwrite: bool = False) -> dict:
    """Run the reference trainer on `topology`; return the summary (also written to OUT/summary.json).
    Raises UserError before anything starts for a bad option or an --out that may not be used, and at
    the end when the run directory could not be written (the summary is printed first)."""
    view = view or QuietView()
    if out is not None and not out.strip():  # `--out=` names no folder: not the default's runs/<timestamp>
        raise UserError("--out is empty: give the run directory, or leave --out out for "
                        "runs/<timestamp>-<preset>-<world size>")
    args, topology = _checked_args(trainer_argv, topology, out)
    if out is None and topology.nnodes > 1:  # each node's default would name its own timestamp
        raise UserError(f"--nnodes {topology.nnodes}: give every node the same --out, a folder on a filesystem "
                        "all nodes share")
    out = out or default_run_dir(args.preset, topology.world_size)
    torchrun_args = topology.torchrun_args()
    log_name = launcher_log_name(topology.node_name())
    run_id = uuid.uuid4().hex[:12]
    claim = out_dir.claim(out, overwrite=overwrite, run_id=run_id, shared=topology.nnodes > 1, log_name=log_name)
    started = False
    try:
        view.run_dir(out)
        if topology.nnodes > 1:  # the rendezvous prints nothing while it waits, for up to its timeout
            where = topology.rdzv_endpoint or f"{topology.master_addr}:{topology.master_port or 29500}"
            view.note(f"waiting at {where} for all {topology.nnodes} nodes to join before any rank starts")
        for note in claim.notes:
            view.note(note)
        claim.notes.clear()
        oversubscribed = oversubscription_note(args.device, topology.nproc, usable_cores())
        if oversubscribed:
            view.warn(oversubscribed)
        _sweep_log_dirs()
        with _Signals() as sigs:
            started = True
            end, prog, job = _run_job(out, args, torchrun_args, trainer_argv, run_id, claim, view, sigs, log_name)
            writer = topology.writes_summary(job, out)
            if topology.nnodes > 1:  # the other nodes' ranks may still be writing their ends
                await_statuses(out, topology.world_size, _SHUTDOWN_GRACE_S, _POLL_S)
                if end.signal is None:  # the user's Ctrl-C or SIGTERM may have stopped another node
                    end.signal = signal_on_another_node(out, log_name)
            # the writer speaks for every rank of the job; another node only for the folders it can see
            ranks = range(topology.world_size) if writer else sorted(rank_dirs(out))
            summary = build_summary(out, args, topology.world_size, ranks, end, prog)
            written = False
            if writer:
                try:
                    write_summary(out, summary)
                    written = True
                except OSError as e:  # the first cause (a rank's write) explains more than this one
                    end.storage_error = end.storage_error or f"{out}: cannot write summary.json ({e.strerror or e})"
                    summary = build_summary(out, args, topology.world_size, ranks, end, prog)
        # Settled first: a replacing run with no step moves its files out of `out` (the replaced run is
        # back there), and every path printed below must name the folder that holds this run's files.
        here = claim.settle(had_step=bool(summary["losses"]))
        view.summary(summary, here, args.profile, log_name, recorded=args.trace != "off")
        for note in job.notes:
            view.note(note)
        # the oversubscription warning was printed once at launch (stderr); the report repeats it from meta.json
        # a failed run, or a drill (--inject) that completed: what the doctor makes of it is the point; a run
        # the user stopped, where the doctor finds more than that (a hang the user saw and stopped)
        failed = summary["status"] not in ("completed", "interrupted")
        interrupted = summary["status"] == "interrupted"
        if (failed or interrupted or (args.inject and summary["status"] == "completed")) and not end.storage_error \
                and not summary.get("usage_error"):  # a mistake in the command has no verdict to find
            view.verdict(here, unless=SAID_BY_INTERRUPTED if interrupted else ())
        for note in claim.notes:
            view.note(note)
    except BaseException:
        if not started:  # Ctrl-C before the job began: as if this run had never claimed the folder
            claim.abandon()
        raise  # after the start, a replaced run stays where it was moved aside: nothing is lost
    finally:
        claim.release()
    if summary.get("usage_error"):
        raise UserError(summary["usage_error"])
    if end.storage_error:
        raise UserError(f"{end.storage_error}; the run ended after {len(summary['losses'])}/{args.steps} steps "
                        f"({'summary.json written' if written else 'no summary.json'})")
    return summary


def _run_job(out: str, args: argparse.Namespace, torchrun_args: list[str], trainer_argv: list[str], run_id: str,
             claim: out_dir.OutDir, view: RunView, sigs: "_Signals", log_name: str) -> tuple[JobEnd, RunProgress, Job]:
    """Start torchrun, supervise it to its end and until no process of the job is left; leave a status
    for every rank the launcher had to kill."""
    logdir = tempfile.mkdtemp(prefix=f"{_LOG_DIR_PREFIX}{os.getpid()}-")
    cmd = [sys.executable, "-m", "instrumented_model.torchrun", *torchrun_args, "--tee", "3", "--log-dir", logdir,
           "-m", TRAINER_MODULE, *trainer_argv, f"--out={out}"]  # joined: a path may start with "-"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", RUN_ID_ENV: run_id, PARENT_PID_ENV: str(os.getpid()),
           LOG_DIR_ENV: logdir}
    if args.backend == "nccl":
        env.update(flight_recorder_env(out, env))
    try:
        end, prog, job = _supervise(cmd, env, out, view, args, claim, sigs, run_id, log_name)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    _write_last_words(out, job, prog)
    return end, prog, job


class _Log:
    """The node's launcher log in OUT. A write that fails (disk full) ends the logging, never the job:
    `error` says why."""

    def __init__(self, path: str):
        self.error: str | None = None
        self._lock = threading.Lock()  # the main thread copies the stream; the monitor may add a line
        try:
            self._f = open(path, "w")
        except OSError as e:
            self._f, self.error = None, f"{path}: {e.strerror or e}"

    def _do(self, fn, *a) -> None:
        with self._lock:
            if self._f is None:
                return
            try:
                fn(*a)
            except OSError as e:
                self.error = f"{self._f.name}: {e.strerror or e}"
                with contextlib.suppress(OSError):
                    self._f.close()
                self._f = None

    def write(self, text: str) -> None:
        self._do(lambda t: self._f.write(t), text)

    def flush(self) -> None:
        self._do(lambda: self._f.flush())

    def close(self) -> None:
        self._do(lambda: self._f.close())
        with self._lock:
            self._f = None


class _Signals:
    """SIGINT, SIGTERM and SIGHUP to the launcher while a job runs: the first is forwarded to torchrun
    (which passes it to its ranks) and starts the teardown clock; a second kills the job at once.
    Installed only on the main thread (elsewhere Python cannot), restored on exit. A signal the launcher
    was started ignoring stays ignored: SIGHUP under `nohup` (closing the terminal must not stop the run),
    SIGINT in a shell's background job (`commscope run … &`: only the foreground job's Ctrl-C is meant)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.received: int | None = None
        self.job: Job | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                if signal.getsignal(s) is not signal.SIG_IGN:
                    self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def attach(self, job: Job) -> None:
        self.job = job
        if self.received is not None:  # arrived while torchrun was starting
            self._stop(self.received)

    def _stop(self, sig: int) -> None:
        self.job.forward(sig)
        # no rank started (torchrun waits at a rendezvous, where it ignores SIGINT): nothing to write
        self.job.start_teardown(_SHUTDOWN_GRACE_S if self.job.ranks() else _NO_RANK_GRACE_S)

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            if self.job is not None:
                self._stop(signum)
        elif self.job is not None:
            self.job.kill_all(f"killed at once on a second {signame(signum)}")


def _supervise(cmd: list[str], env: dict, out: str, view: RunView, args: argparse.Namespace,
               claim: out_dir.OutDir, sigs: _Signals, run_id: str,
               log_name: str) -> tuple[JobEnd, RunProgress, Job]:
    """Run the job, copying its output into OUT/`log_name` and rank 0's steps onto the live bar, while a
    monitor thread watches for faults and stopped ranks (and, with several nodes, keeps this node in step
    with the others: instrumented_model.nodes); return once no process of the job is left."""
    prog = RunProgress()
    log = _Log(os.path.join(out, log_name))
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()  # a node waiting for the others in the rendezvous shows what it runs
    storage = None
    # several nodes: rank 0's lines reach only its own node's stream, so every node's bar follows the file
    follower = ProgressFollower(os.path.join(out, PROGRESS)) if claim.shared else None
    become_subreaper(True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            bufsize=1, env=env, start_new_session=True)
    job = Job(proc.pid, run_id, args.hang_timeout)
    sigs.attach(job)
    nodes = NodeSync(out, job, sigs, log, log_name, follower, _SHUTDOWN_GRACE_S) if follower else None
    code = None
    try:
        with view.progress(args.steps) as live, _watching(job, out, nodes, live):
            for line in proc.stdout:
                log.write(line)
                if storage is None and (m := STORAGE_ERROR.search(line)):  # the run directory took no more writes
                    storage = (f"{out}: {STORAGE_ERRORS.get(m.group(1) or '', (m.group(2) or '').lower())} "
                               "(a rank could not write)")
                rec = prog.feed(line)
                if rec and rec.get("event") == "step":
                    log.flush()
                    if nodes is None:
                        live.step(rec)
                    claim.first_step()
                elif rec is None and "commscope:" in line:
                    live.note(line)
            code = proc.wait()
    finally:
        job.drain(_SHUTDOWN_GRACE_S)  # also kills and reaps torchrun if we got here by an exception
        if code is None:
            code = proc.wait()
        become_subreaper(False)
        if nodes is not None:
            nodes.ended()
        log.close()
    return JobEnd(code, sigs.received, dict(job.stopped), storage or log.error, args.hang_timeout,
                  torn_down=job.torn_down), prog, job


@contextlib.contextmanager
def _watching(job: Job, out: str, nodes: NodeSync | None, live: StepProgress):
    """The monitor thread for the duration of the `with` block: every _POLL_S, stopped ranks
    (instrumented_model.job), and the first fault sign starts the teardown; with several nodes,
    `nodes.tick` too. When the block ends, the thread is stopped and joined before `nodes.close`."""
    stop = threading.Event()

    def monitor() -> None:
        while not stop.wait(_POLL_S):
            try:
                if nodes is not None:
                    with contextlib.suppress(OSError):  # the shared folder unreadable this tick: this node's
                        nodes.tick(live)                # processes are still watched, the next tick looks again
                job.poll()
                if job.deadline is None and fault_seen(out):
                    job.start_teardown(_FAULT_TEARDOWN_S)
                    if nodes is not None:
                        nodes.fault_seen()
            except OSError:  # the run directory vanished or cannot be read: keep watching the processes
                continue

    thread = threading.Thread(target=monitor, name="commscope-job-monitor", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if nodes is not None:
            nodes.close(live)


def _last_step(rank_dir: str, prog: RunProgress) -> int:
    """The last finished step in a rank's events.jsonl (its tail), else rank 0's (the loss all_reduce
    keeps ranks in step), -1 when none."""
    try:
        with open(os.path.join(rank_dir, EVENTS), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 262144))
            tail = f.read().splitlines()
    except OSError:
        tail = []
    for line in reversed(tail):
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and rec.get("kind") == "step" and isinstance(rec.get("step"), int):
                return rec["step"]
    return len(prog.losses) - 1


def _write_last_words(out: str, job: Job, prog: RunProgress) -> None:
    """A rank the launcher killed (stopped past the hang timeout, or still running after the teardown
    grace) could not write its status: write it for it, saying who ended it and why, so readers tell it
    from a rank that crashed on its own."""
    for rank, why in sorted(job.killed.items()):
        d = os.path.join(out, rank_dir_name(rank))
        with contextlib.suppress(OSError, ValueError):
            if os.path.isdir(d) and read_status(d) is None:
                write_status(d, "failed", f"{why}; terminated by signal 9 (SIGKILL) by commscope run",
                             _last_step(d, prog))


def _sweep_log_dirs() -> None:
    """Remove the torchrun log folders and `hooks` capture folders of processes that no longer exist (both
    the launcher and its torchrun, or the hooks command, were SIGKILLed: nothing else could). Each name
    carries its owner's pid; a live pid (its own, or one reused) keeps the folder."""
    for prefix in (_LOG_DIR_PREFIX, CAPTURE_DIR_PREFIX):
        for d in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
            m = re.match(rf"{prefix}(\d+)-", os.path.basename(d))
            if m and os.path.isdir(d) and not os.path.islink(d) and not psutil.pid_exists(int(m.group(1))):
                shutil.rmtree(d, ignore_errors=True)


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
