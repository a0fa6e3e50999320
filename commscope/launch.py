"""Launch the reference trainer through torch's own elastic launcher and summarize the run.

`launch_training` checks the trainer's options in this process (the trainer's own `parse_args` and
`check_args`, so a bad option is one UserError, not one traceback per rank), prepares the run directory,
starts `python -m torch.distributed.run ... -m instrumented_model.train`, streams every output line into
`launcher.log` while rendering rank 0's `@@commscope` progress lines live with rich, and when the job
ends reads each rank's `status.json` and rank 0's `progress.jsonl` (the losses and step times: the
console copy of a record can arrive torn by torch's --tee) and writes `summary.json` (docs/run_format.md).

Invariants:
- summary.json is written whatever happens (completed, failed, crashed, interrupted), and the returned
  summary's status is "completed" only if torch.distributed.run exited 0 and every expected rank wrote
  status "completed".
- A directory is reused as --out only if it is empty or holds a previous commscope run (then the old run's
  files are replaced); anything else is refused, so commscope never overwrites unrelated data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from commscope.rundir import FLIGHT_RECORDER_DIR, SCHEMA_VERSION
from commscope.util.atomic import write_json_atomic
from commscope.errors import UserError
from commscope.rundir import is_run_dir, rank_dirs, read_status
from instrumented_model import train  # the trainer's own option parsing and checks; does not import torch
from instrumented_model.train import PROGRESS_FILE, PROGRESS_PREFIX

# torch.distributed.run --tee prefixes each line with "[<role><local_rank>]:"
_TEE_PREFIX = re.compile(r"^\[[A-Za-z_]*(\d+)\]:")
_JSON = json.JSONDecoder()
_RUN_FILES = ("summary.json", "config.json", "launcher.log", PROGRESS_FILE)
_SHUTDOWN_GRACE_S = 30
# After the first sign of a fault (a watchdog report, a failed rank) torch.distributed.run gets this long to
# tear the job down before the whole session is killed: `run` ends within the hang timeout + a few seconds.
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


@dataclass
class RunProgress:
    """What rank 0 reported, parsed from its progress lines."""

    start: dict = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    step_times_ms: list[float] = field(default_factory=list)

    def feed(self, line: str) -> dict | None:
        """Parse one output line; return the progress record if it is one.

        torch's --tee tails each rank's log file and writes every piece `readline` returns behind the
        rank's prefix: a line it caught half-written arrives with the prefix again in its middle (or,
        when only the newline was missing, at its end). Removing that rank's prefix inside the record and
        reading the first JSON value keeps such a step (one was lost that way under load in CI)."""
        m = _TEE_PREFIX.match(line)
        body = line[m.end():] if m else line
        if not body.startswith(PROGRESS_PREFIX):
            return None
        text = body[len(PROGRESS_PREFIX):]
        if m:
            text = text.replace(m.group(0), "")
        return self.add(text)

    def add(self, text: str) -> dict | None:
        """Take the record that `text` starts with (trailing bytes ignored); None if it holds none."""
        try:
            rec, _end = _JSON.raw_decode(text.strip())
        except json.JSONDecodeError:
            return None
        if not isinstance(rec, dict):
            return None
        if rec.get("event") == "start":
            self.start = rec
        elif rec.get("event") == "step":
            self.losses.append(float(rec["loss"]))
            self.step_times_ms.append(float(rec["step_ms"]))
        return rec

    def tokens_per_s(self) -> float | None:
        """Throughput over the finished steps, leaving out step 0 (warm-up) when there are others."""
        times = self.step_times_ms[1:] if len(self.step_times_ms) > 1 else self.step_times_ms
        if not times or not self.start:
            return None
        tokens = self.start["batch_size"] * self.start["seq_len"]
        return tokens * len(times) / (sum(times) / 1e3)


def progress_from_file(run_dir: str) -> RunProgress | None:
    """Rank 0's progress as it wrote it to RUN/progress.jsonl (a torn last line is skipped), or None
    where the file is not on this host or holds no start record."""
    prog = RunProgress()
    try:
        with open(os.path.join(run_dir, PROGRESS_FILE), errors="replace") as f:
            for line in f:
                prog.add(line)
    except OSError:
        return None
    return prog if prog.start else None


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


def rank_statuses(run_dir: str, ranks: range | list[int]) -> dict[str, dict]:
    """Each expected rank's status.json, or a stand-in saying why there is none."""
    out = {}
    for r in ranks:
        try:
            st = read_status(os.path.join(run_dir, f"rank{r}"))
        except ValueError:
            st = {"status": "crashed", "error": "unreadable status.json", "last_step": None}
        if st is None:
            st = {"status": "crashed", "error": "no status.json: the process ended without writing one", "last_step": None}
        if os.path.exists(os.path.join(run_dir, f"rank{r}", "watchdog.json")):
            st = {**st, "status": "hung"}
        out[str(r)] = st
    return out


def overall_status(exit_code: int, statuses: dict[str, dict], interrupted: bool) -> str:
    kinds = {s["status"] for s in statuses.values()}
    if interrupted:
        return "interrupted"
    if exit_code == 0 and kinds <= {"completed"} and statuses:
        return "completed"
    for k in ("hung", "crashed"):
        if k in kinds:
            return k
    return "failed"


def describe(status: str, statuses: dict[str, dict], steps_done: int, steps: int) -> str:
    """One line saying what happened, naming the first rank that did not complete."""
    if status == "completed":
        return f"{len(statuses)} ranks completed {steps_done} steps"
    if status == "interrupted":
        return f"interrupted by the user after {steps_done}/{steps} steps"
    bad = [(r, s) for r, s in statuses.items() if s["status"] not in ("completed",)]
    # A rank that failed on its own explains more than one torn down afterwards by the launcher.
    bad.sort(key=lambda rs: ("terminated by signal" in str(rs[1].get("error")), int(rs[0])))
    if not bad:
        return f"{status}: torch.distributed.run exited non-zero after {steps_done}/{steps} steps"
    r, s = bad[0]
    return f"{status}: rank {r} {s['status']} after step {s.get('last_step')}: {s.get('error')}"


def _progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[ms]} ms/step"),
        TextColumn("{task.fields[tps]} tok/s"), TimeElapsedColumn(), console=console,
    )


def _gpu_count() -> int:
    import torch  # only when the GPU count matters: a CPU launch with --nproc never imports it here

    return torch.cuda.device_count()


def launch_training(trainer_argv: list[str], topology: Topology, out: str | None,
                    console: Console | None = None) -> dict:
    """Run the reference trainer on `topology`; return the summary (also written to OUT/summary.json)."""
    console = console or Console()
    args = train.parse_args([*trainer_argv, "--out", out or "."])  # also resolves --device's default
    if topology.nproc is None:
        # max(1, …): without a GPU, check_args below names that, instead of refusing 0 ranks
        topology = dataclasses.replace(topology, nproc=max(1, _gpu_count()) if args.device == "cuda" else 2)
    train.check_args(args, topology.world_size)
    if args.backend == "nccl":
        if topology.nproc > _gpu_count():
            raise UserError(f"--backend nccl needs one GPU per rank: {topology.nproc} ranks, "
                            f"{_gpu_count()} GPUs here (--backend gloo lets ranks share a GPU)")
    out = out or default_run_dir(args.preset, topology.world_size)
    torchrun_args = topology.torchrun_args()
    prepare_run_dir(out)
    console.print(f"run directory: [bold]{out}[/]")

    logdir = tempfile.mkdtemp(prefix="commscope-torchrun-")
    cmd = [sys.executable, "-m", "torch.distributed.run", *torchrun_args, "--tee", "3", "--log-dir", logdir,
           "-m", "instrumented_model.train", *trainer_argv, "--out", out]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.backend == "nccl":
        env.update(flight_recorder_env(out, env))
    prog = RunProgress()
    interrupted = False
    with open(os.path.join(out, "launcher.log"), "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=env, start_new_session=True)
        reaper_stop = threading.Event()
        threading.Thread(target=_reap_after_fault, args=(proc, out, reaper_stop), daemon=True).start()
        try:
            with _progress_bar(console) as bar:
                task = bar.add_task("train", total=args.steps, loss="-", ms="-", tps="-")
                for line in proc.stdout:
                    log.write(line)
                    rec = prog.feed(line)
                    if rec and rec.get("event") == "step":
                        log.flush()
                        bar.update(task, completed=rec["step"] + 1, loss=f"{rec['loss']:.4f}",
                                   ms=f"{rec['step_ms']:.1f}", tps=f"{rec['tokens_per_s']:,.0f}")
                    elif rec is None and "commscope:" in line:
                        bar.console.print(line.rstrip(), markup=False, highlight=False)
            exit_code = proc.wait()
        except KeyboardInterrupt:
            interrupted = True
            exit_code = _stop(proc)
            for line in proc.stdout:  # what the ranks said while stopping (their last steps, errors)
                log.write(line)
                prog.feed(line)
        finally:
            reaper_stop.set()
            shutil.rmtree(logdir, ignore_errors=True)

    prog = progress_from_file(out) or prog
    ranks = range(topology.world_size) if topology.nnodes == 1 else sorted(rank_dirs(out))
    statuses = rank_statuses(out, ranks)
    status = overall_status(exit_code, statuses, interrupted)
    start = prog.start
    summary = {
        "schema_version": SCHEMA_VERSION, "status": status, "world_size": topology.world_size,
        "backend": args.backend, "device": args.device, "preset": args.preset, "steps": args.steps,
        "head_layout": args.head_layout, "comm_schedule": args.comm_schedule,
        "losses": prog.losses, "step_times_ms": prog.step_times_ms, "tokens_per_s": prog.tokens_per_s(),
        "ranks": {r: s["status"] for r, s in statuses.items()}, "exit_code": exit_code,
        "message": describe(status, statuses, len(prog.losses), args.steps),
    }
    if start.get("device"):
        summary["device"] = start["device"].split(":")[0]
    if topology.nnodes == 1 or topology.node_rank in (None, 0):
        write_json_atomic(os.path.join(out, "summary.json"), summary)
    print_summary(console, summary, out)
    if status not in ("completed", "interrupted"):
        print_diagnosis(console, out)
    return summary


def print_diagnosis(console: Console, out: str) -> None:
    """`commscope doctor`'s one-paragraph verdict on a failed run (only a note if it cannot be made)."""
    from commscope.analyze.doctor import diagnose_path

    try:
        d = diagnose_path(out)
    except UserError as e:
        console.print(f"commscope doctor could not diagnose {out}: {e}", highlight=False)
        return
    culprits = ",".join(map(str, d.culprit_ranks)) or "-"
    console.print(f"[bold red]{d.verdict}[/] (culprit rank(s) {culprits}): {escape(d.summary)} "
                  f"Details: [bold]commscope doctor {out}[/]", highlight=False)


def flight_recorder_env(out: str, env: dict) -> dict:
    """PyTorch's NCCL Flight Recorder, dumping into OUT/flight_recorder/ on a timeout (user settings win)."""
    prefix = os.path.join(os.path.abspath(out), FLIGHT_RECORDER_DIR, "rank_")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    wanted = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
              "TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
    return {k: v for k, v in wanted.items() if k not in env}


def fault_seen(out: str) -> bool:
    """True once any rank wrote a watchdog report or a non-completed status."""
    for d in rank_dirs(out).values():
        if os.path.exists(os.path.join(d, "watchdog.json")):
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


def print_summary(console: Console, summary: dict, out: str) -> None:
    ok = summary["status"] == "completed"
    t = Table(title=f"commscope run: [{'green' if ok else 'red'}]{summary['status']}[/]", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    losses, times = summary["losses"], summary["step_times_ms"]
    t.add_row("ranks", f"{summary['world_size']} × {summary['device']} ({summary['backend']}), preset {summary['preset']}")
    t.add_row("steps", f"{len(losses)} / {summary['steps']}")
    if losses:
        t.add_row("loss", f"{losses[0]:.4f} → {losses[-1]:.4f}")
    if times:
        tail = times[1:] or times
        t.add_row("mean step time", f"{sum(tail) / len(tail):.1f} ms (excluding step 0)" if len(times) > 1
                  else f"{times[0]:.1f} ms")
    if summary["tokens_per_s"]:
        t.add_row("tokens/s", f"{summary['tokens_per_s']:,.0f}")
    if len(times) > 2 and summary["tokens_per_s"]:
        # a few slow steps (a GPU clock dip, a checkpoint) move the mean; the median says what a step takes
        tail = times[1:]
        median = statistics.median(tail)
        mean = sum(tail) / len(tail)  # tokens_per_s is over the mean step (RunProgress.tokens_per_s)
        t.add_row("median step", f"{median:.1f} ms, {summary['tokens_per_s'] * mean / median:,.0f} tokens/s")
    by_status: dict[str, list[str]] = {}
    for r, s in summary["ranks"].items():
        by_status.setdefault(s, []).append(r)
    t.add_row("rank status", ", ".join(f"{s}: {_ranges(rs)}" for s, rs in by_status.items()))
    t.add_row("message", escape(summary["message"]))  # rank errors hold [file:line] that is not markup
    console.print(t)
    if not ok:
        console.print(f"output of all ranks: {os.path.join(out, 'launcher.log')}")
    console.print(f"next: [bold]commscope report {out}[/]")


def _ranks_key(r: str) -> int:
    return int(r)


def _ranges(ranks: list[str]) -> str:
    """'0-3,5' style list of ranks."""
    nums = sorted(map(_ranks_key, ranks))
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(f"{nums[i]}-{nums[j]}" if j > i else f"{nums[i]}")
        i = j + 1
    return ",".join(parts)
