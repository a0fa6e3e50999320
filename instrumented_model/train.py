"""The reference trainer's per-rank entry point: `python -m torch.distributed.run ... -m instrumented_model.train`.

One process per rank. It joins the process group (nccl on CUDA, gloo on CPU, `--backend` to override),
builds the banked GPT and the unified optimizer from the same seed on every rank, and runs the loop

    for each step:   with rec.step(s):  micro-steps of  forward → backward,  then  optimizer,  then the
                     global mean loss (an all_reduce labelled "loss", phase "metric"),  then step s+1's
                     batch is made and queued (while the device still runs step s),  then a loss is read

with every phase and collective going through the recorder (NullRecorder with `--trace off`), so tracing
cannot change what is computed. Rank 0 prints one machine-readable progress line per step,
`@@commscope {json}`, which `commscope run` parses and renders. Every rank leaves `rank{R}/status.json`.

Invariants:
- The global batch of step s depends only on (data, seed, step) and each rank takes its own rows of it
  (instrumented_model.data), so with the same seed and global batch the losses agree across world sizes.
- instrumented_model.options is the single table of the trainer's options; `parse_args` + `check_args`
  are their single parser and checks; the launcher calls them before launching, so a bad option fails
  fast with a UserError instead of eight tracebacks.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Sequence

from commscope.errors import UserError
from commscope.recording.api import STEP_MAX, NullRecorder, end_status
from commscope.recording.termguard import Terminated, interrupt_timed, raise_terminated, signal_words
from commscope.rundir import write_config, write_status
from commscope.rundir.schema import PROGRESS, STATUS, rank_dir_name
from instrumented_model import faults, options
from instrumented_model.job import die_with_parent

PROGRESS_PREFIX = "@@commscope "
PG_TIMEOUT_MARGIN_S = 10  # the process-group timeout is the hang timeout plus this
MAX_HANG_TIMEOUT_S = 7 * 86400  # a week: beyond it a timeout is no longer a hang check (and overflows backends)
MAX_SEED = 2**32 - 1  # numpy's SeedSequence and torch.manual_seed both take it
LOSS_LABEL = "loss"  # the metric all_reduce; with the parameter labels, every label --inject can name
# Signals that end a rank: torchrun passes on what the launcher got (SIGINT, SIGTERM, SIGHUP), and the
# kernel sends SIGTERM when torchrun dies (instrumented_model.job). Each leaves a status, in the recording
# API's words (commscope.recording.api.end_status): SIGINT is Ctrl-C, a KeyboardInterrupt, status
# "interrupted"; SIGTERM and SIGHUP raise Terminated ("terminated by signal 15 (SIGTERM)"), status "failed".
END_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_HANDLERS = {signal.SIGINT: interrupt_timed}  # KeyboardInterrupt, timed; the others: termguard.raise_terminated


class _Parser(argparse.ArgumentParser):
    """argparse that raises UserError instead of printing usage and exiting."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        raise UserError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m instrumented_model.train", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="run directory (rank folders are created in it)")
    options.add_to_parser(p)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the trainer's options and fill in the defaults that depend on the device and preset."""
    import torch

    args = build_parser().parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.backend is None:
        args.backend = "nccl" if args.device == "cuda" else "gloo"
    if args.preset is None:
        args.preset = "speedrun" if args.device == "cuda" else "tiny"
    if args.steps is None:
        args.steps = 50 if args.preset == "speedrun" else 40
    return args


# 24 × 2048 = 48·1024 tokens per rank and step: the record's train_seq_len per GPU, so a speedrun-preset
# step moves the record's tokens (393k globally on 8 ranks). Measured on one H200 with torch.compile
# (bench_throughput.py): 8 sequences 412k tokens/s, 24 sequences 490k, as the optimizer step (6.4 ms,
# independent of the batch) is shared by 3× the tokens.
SPEEDRUN_SEQS_PER_RANK = 24


def default_batch_size(args: argparse.Namespace, world_size: int) -> int:
    return SPEEDRUN_SEQS_PER_RANK * world_size if args.preset == "speedrun" else 16


def _check_same_nproc(world_size: int) -> None:
    """UserError where the nodes were launched with different --nproc: torch.distributed.run then makes one
    job of all their ranks (GROUP_WORLD_SIZE nodes, LOCAL_WORLD_SIZE ranks on this one), which no node's
    launcher expects, and a preset may refuse the odd world size with words that hide the cause."""
    nodes, local = os.environ.get("GROUP_WORLD_SIZE"), os.environ.get("LOCAL_WORLD_SIZE")
    if nodes and local and nodes.isdigit() and local.isdigit() and int(nodes) * int(local) != world_size:
        node = f"rank {os.environ['RANK']}'s node" if os.environ.get("RANK", "").isdigit() else "one node"
        raise UserError(f"the nodes were launched with different --nproc: {node} runs {local} of the job's "
                        f"{world_size} ranks over {nodes} nodes; every node's `commscope run` needs the same --nproc")


def check_args(args: argparse.Namespace, world_size: int) -> None:
    """Raise UserError for any option that cannot work with this world size; fills args.batch_size."""
    import torch

    from instrumented_model.faults import parse_faults
    from commscope.util.step_range import parse_step_range
    from instrumented_model.config import make_config
    from instrumented_model.data import make_source
    from instrumented_model.param_table import PARAM_TABLE, check_order

    _check_same_nproc(world_size)
    cfg = make_config(args.preset, world_size)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here (use --device cpu)")
    if args.fp8_head and args.device != "cuda":
        raise UserError("--fp8-head needs --device cuda (FP8 matmuls and the fused loss kernels run on the GPU)")
    if args.backend == "nccl" and args.device != "cuda":
        raise UserError("--backend nccl needs --device cuda (gloo runs on CPU)")
    for name in ("steps", "grad_accum"):
        if not 1 <= getattr(args, name) <= STEP_MAX:  # step numbers are recorded exactly up to 2**53-1
            raise UserError(f"--{name.replace('_', '-')} must be in 1..2**53-1, got {getattr(args, name)}")
    if args.batch_size is None:
        args.batch_size = default_batch_size(args, world_size)
    if args.batch_size < 1 or args.batch_size % (world_size * args.grad_accum):
        raise UserError(
            f"--batch-size {args.batch_size} (global, in sequences) must be a positive multiple of "
            f"world size × grad-accum = {world_size} × {args.grad_accum}"
        )
    if args.split_step is not None and not 0 <= args.split_step < args.steps:  # as --inject's steps: a split
        raise UserError(f"--split-step must be a step of this run, 0..{args.steps - 1} (--steps {args.steps}), "
                        f"got {args.split_step}: embed and lm_head would never be untied")
    for opt in ("scatter_order", "work_order"):
        if getattr(args, opt) is not None:
            check_order(f"--{opt.replace('_', '-')}", split_labels(getattr(args, opt)), PARAM_TABLE)
    if args.profile is not None and args.trace == "off":
        raise UserError("--profile needs tracing on (--trace light or full)")
    if args.with_stack and args.profile is None and args.trace != "full":
        # the Python stacks go into the profiler window's trace: without a window nothing would record them
        raise UserError("--with-stack records Python stacks in the profiler's trace: give --profile START:STOP "
                        "(or --trace full, which profiles steps 1:3)")
    if args.flush != "step" and args.trace == "off":
        raise UserError(f"--flush {args.flush} needs tracing on (--trace light or full): --trace off writes no records")
    window = parse_step_range(args.profile, "--profile", closed=True)
    if window is not None and window[1] > args.steps:
        # a window the run never finishes would leave its profiler open, and its trace unwritten or partial
        raise UserError(f"--profile {args.profile} reaches past the last step: --steps {args.steps} runs steps "
                        f"0..{args.steps - 1}")
    if window is None and args.trace == "full":
        from commscope.recording.recorder import DEFAULT_FULL_WINDOW

        first, stop = DEFAULT_FULL_WINDOW
        if stop > args.steps:  # the same window, asked for without --profile: the same rule
            raise UserError(f"--trace full profiles steps {first}:{stop} (step 0 carries the warm-up), past the last "
                            f"step: --steps {args.steps} runs steps 0..{args.steps - 1}; give --steps {stop} or more, "
                            "or a window that fits with --profile")
    if not (math.isfinite(args.hang_timeout) and 0 < args.hang_timeout <= MAX_HANG_TIMEOUT_S):
        raise UserError(f"--hang-timeout must be > 0 seconds and at most {MAX_HANG_TIMEOUT_S} (a week), "
                        f"got {args.hang_timeout}")
    if not 0 <= args.seed <= MAX_SEED:
        raise UserError(f"--seed must be in 0..{MAX_SEED} (numpy's and torch's seed range), got {args.seed}")
    for name in ("lr", "adam_lr", "wd"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise UserError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    for f in parse_faults(args.inject, world_size=world_size, steps=args.steps, labels=(*PARAM_TABLE, LOSS_LABEL)):
        # the tied embed's gradient rides lm_head's collectives (optimizer module docstring): a fault
        # labelled embed before the split would never fire, and the drill would pass with no fault
        if f.label == "embed" and (args.split_step is None or f.step < args.split_step):
            tied = "throughout (no --split-step)" if args.split_step is None else f"until --split-step {args.split_step}"
            raise UserError(f"--inject {f}: embed carries no collective at step {f.step}: it is tied to lm_head "
                            f"{tied}, whose collectives carry both; label lm_head, or inject at a step after the split")
    if args.data:  # validates every shard's header now, not in eight ranks later
        make_source(args.data, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, batch_size=args.batch_size, seed=args.seed)


def split_labels(s: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in s.split(",") if x.strip())


def make_recorder(args: argparse.Namespace, rank: int, world_size: int, device):
    """NullRecorder for --trace off, else a Recorder writing rank{R}/ of the run directory."""
    from commscope.recording import record

    return record(args.out, trace=args.trace, rank=rank, world_size=world_size, device=device,
                  backend=args.backend, profile_steps=args.profile, with_stack=args.with_stack, flush=args.flush)


def progress(record: dict, out: str) -> None:
    """Rank 0's progress: a line on stdout for the launcher's live bar, and the same record appended to
    OUT/progress.jsonl, which the summary is built from (docs/run_format.md says why not from stdout)."""
    line = json.dumps(record) + "\n"
    with open(os.path.join(out, PROGRESS), "w" if record["event"] == "start" else "a") as f:
        f.write(line)  # one write per record: a crash leaves at most a torn last line, which readers skip
    # one write with its newline: print() writes the end apart, a second write under PYTHONUNBUFFERED
    sys.stdout.write(PROGRESS_PREFIX + line)
    sys.stdout.flush()


@dataclass
class RankRun:
    """This rank's place in the job, and what `finish` must close: whatever `train` got to start."""

    rank: int
    local_rank: int
    world_size: int
    last_step: int = -1  # the last step whose loss was read
    pg: bool = False  # the process group is up
    rec: Any = None
    watchdog: Any = None


def init_distributed(args: argparse.Namespace, run: RankRun):
    """Join the process group; → this rank's device."""
    import torch
    import torch.distributed as dist

    if args.device == "cuda":
        device = torch.device("cuda", run.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # The backend's own timeout backs up the watchdog (and is the only hang detection with --trace off).
    dist.init_process_group(backend=args.backend, rank=run.rank, world_size=run.world_size,
                            device_id=device if args.backend == "nccl" else None,
                            timeout=datetime.timedelta(seconds=args.hang_timeout + PG_TIMEOUT_MARGIN_S))
    run.pg = True
    return device


# Options a node may give otherwise than the others: paths, which may differ where the nodes mount the
# shared filesystem at different places
_PER_NODE_OPTIONS = ("out", "data")


def _shown(value) -> str:
    """An option's value as the command line gives it: a flag on/off, a list comma-joined, none unset."""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def option_differences(everyone: Sequence[dict]) -> str | None:
    """What makes the ranks' options (one dict of `vars(args)` per rank, by rank) differ from rank 0's,
    the first rank that differs and each option that does; None where they agree."""
    first = everyone[0]
    for r, theirs in enumerate(everyone):
        keys = sorted(k for k in set(first) | set(theirs)
                      if k not in _PER_NODE_OPTIONS and theirs.get(k) != first.get(k))
        if keys:
            said = ", ".join(f"--{k.replace('_', '-')} {_shown(theirs.get(k))} (rank 0: {_shown(first.get(k))})"
                             for k in keys)
            return (f"rank {r} was launched with other options than rank 0: {said}; every node's "
                    "`commscope run` needs the same options")
    return None


def check_same_options(args: argparse.Namespace, run: RankRun) -> None:
    """UserError on every rank when the nodes were launched with different options: ranks training
    different step counts, seeds or models would wait on each other's missing collectives until the hang
    timeout, or diverge silently. One all_gather_object before the first step; on one node (one launcher
    checks for all its ranks) there is nothing to compare."""
    import torch.distributed as dist

    if int(os.environ.get("LOCAL_WORLD_SIZE", run.world_size)) == run.world_size:
        return
    everyone: list = [None] * run.world_size
    dist.all_gather_object(everyone, vars(args))
    differ = option_differences(everyone)
    if differ:
        raise UserError(differ)


def start_recording(args: argparse.Namespace, run: RankRun, device):
    """The recorder (it aligns clocks as it starts) with its hang watchdog, behind the injected faults."""
    run.rec = make_recorder(args, run.rank, run.world_size, device)
    if run.rec.enabled:
        from commscope.recording.watchdog import Watchdog

        run.watchdog = Watchdog(run.rec, args.hang_timeout).start()
    return faults.wrap(run.rec, faults.parse_faults(args.inject), run.rank)


def build_model(args: argparse.Namespace, cfg, run: RankRun, device, rec):
    """→ (labelled params, forward, optimizer): the same initial parameters on every rank and world size."""
    import torch

    from instrumented_model.model import GPT
    from instrumented_model.optimizer import NorMuonAndAdam
    from instrumented_model.partition import matrix_owners

    torch.manual_seed(args.seed)
    model = GPT(cfg, head_layout=args.head_layout, fp8_head=args.fp8_head,
                bf16_residual=not args.fp32_residual).to(device)
    params = model.labelled_params()
    # The compiled wrapper shares the module's parameters, so hooks and the optimizer see the same tensors.
    forward = torch.compile(model) if args.compile else model
    opt_kwargs = {k: getattr(args, k) for k in ("lr", "adam_lr", "wd") if getattr(args, k) is not None}
    for k in ("scatter_order", "work_order"):
        if getattr(args, k) is not None:
            opt_kwargs[k] = split_labels(getattr(args, k))
    opt = NorMuonAndAdam(
        params, rank=run.rank, world_size=run.world_size, recorder=rec, comm_schedule=args.comm_schedule,
        head_layout=args.head_layout, split_step=args.split_step,
        matrix_owners=matrix_owners(cfg, run.world_size, args.optimizer_partition), **opt_kwargs,
    )
    if args.comm_schedule == "hooks":
        opt.install_hooks()
    return params, forward, opt


def device_batches(data, step: int, run: RankRun, grad_accum: int, device) -> list | Exception:
    """This rank's (inputs, targets) of each micro-step of `step`, on the device (copies queued); a
    failure is returned, to be raised when `step` begins: bad data fails its own step, not the one that
    made it early."""
    from instrumented_model.data import rank_slice
    from instrumented_model.host_transfer import to_device

    try:
        inputs, targets = data.global_batch(step)
        return [tuple(to_device(rank_slice(t, run.rank, run.world_size, m, grad_accum), device)
                      for t in (inputs, targets))
                for m in range(grad_accum)]
    except Exception as e:  # noqa: BLE001 - re-raised as it was, one step later
        return e


class LossReader:
    """Reads each step's global mean loss `lag` steps after the step queued it, times the step, and has
    rank 0 report it (`progress`).

    Without a recorder (--trace off) on CUDA each loss is read one step late (lag 1): the host launches
    step s+1, then waits for step s's loss through a PendingScalar (its own event, not the whole stream),
    so the GPU never idles while the host launches a step. A recorder resolves its CUDA events at every
    step end anyway, and a step record carries its own loss, so traced runs read at lag 0.

    Pipelined, a step's period is timed on the device, from the previous step's loss event (or the first
    step's start) to its own: the host reads a loss one launch late, so the gap between two reads is the
    next step's launch, and the last step, with no launch after it, would show only its final wait."""

    def __init__(self, args: argparse.Namespace, run: RankRun, tokens_per_step: int, lag: int):
        self.args, self.run, self.tokens_per_step, self.lag = args, run, tokens_per_step, lag
        self.unread: list[tuple[int, Any, int]] = []  # (step, summed loss on its way, start ns), not read yet
        self.last_read_ns = 0
        self.last_event = None

    def begin(self, step: int) -> None:
        import torch

        if self.lag and step == 0:
            self.last_event = torch.cuda.Event(enable_timing=True)
            self.last_event.record()

    def queue(self, step: int, summed_loss, t0: int) -> None:
        from instrumented_model.host_transfer import PendingScalar

        self.unread.append((step, PendingScalar(summed_loss, timing=bool(self.lag)), t0))

    def read_due(self, step: int) -> float | None:
        """Read the losses now due; → `step`'s own loss if it was one of them."""
        own = None
        while len(self.unread) > self.lag:
            done = self.unread.pop(0)
            loss = self._read(*done)
            if done[0] == step:
                own = loss
        return own

    def read_all(self) -> None:
        while self.unread:
            self._read(*self.unread.pop(0))

    def _read(self, step: int, summed, t0: int) -> float:
        before = time.perf_counter_ns()
        global_loss = summed.item() / self.run.world_size
        now = time.perf_counter_ns()
        if self.lag and self.last_event is not None:
            step_ms = self.last_event.elapsed_time(summed.event)
            self.last_event = summed.event
        else:  # since the step started, or since the previous loss arrived (host time)
            step_ms = (now - max(t0, self.last_read_ns)) / 1e6
        self.last_read_ns = now
        self.run.last_step = step
        if self.run.rank == 0:
            # wait_ms: how long the host waited for the loss; near 0 with --trace off means the host, not
            # the device, sets the pace (or something inside the step synchronized)
            progress({"event": "step", "step": step, "loss": global_loss, "step_ms": step_ms,
                      "tokens_per_s": self.tokens_per_step / (step_ms / 1e3), "wait_ms": (now - before) / 1e6},
                     self.args.out)
        return global_loss


def train(args: argparse.Namespace, run: RankRun) -> None:
    import torch
    import torch.distributed as dist

    from instrumented_model.config import make_config
    from instrumented_model.data import make_source

    device = init_distributed(args, run)
    check_same_options(args, run)
    rec = start_recording(args, run, device)
    cfg = make_config(args.preset, run.world_size)
    params, forward, opt = build_model(args, cfg, run, device, rec)
    rec.watch(params)
    if run.rank == 0:
        config = {"args": vars(args), "model": cfg.to_dict(), "world_size": run.world_size, **opt.config()}
        write_config(args.out, config)  # also with --trace off, when no recorder writes it
        progress({"event": "start", "world_size": run.world_size, "backend": args.backend, "device": str(device),
                  "preset": args.preset, "steps": args.steps, "batch_size": args.batch_size,
                  "seq_len": cfg.seq_len, "params": sum(p.numel() for p in params.values())}, args.out)

    data = make_source(args.data, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len,
                       batch_size=args.batch_size, seed=args.seed)
    ga, hooks = args.grad_accum, args.comm_schedule == "hooks"
    tokens_per_step = args.batch_size * cfg.seq_len
    losses = LossReader(args, run, tokens_per_step, lag=1 if args.trace == "off" and device.type == "cuda" else 0)
    upcoming = device_batches(data, 0, run, ga, device) if args.steps > 0 else []
    try:
        for s in range(args.steps):
            t0 = time.perf_counter_ns()
            losses.begin(s)
            batches, upcoming = upcoming, []
            if isinstance(batches, Exception):
                raise batches
            with rec.step(s) as st:
                local_loss = torch.zeros((), device=device, dtype=torch.float32)
                for m, (x, y) in enumerate(batches):
                    rec.set_micro_step(m)
                    if hooks:
                        opt.set_last_micro_step(m == ga - 1)
                    with rec.region("forward"):
                        loss = forward(x, y) / ga
                    with rec.region("backward"):
                        loss.backward()
                    local_loss += loss.detach().float()
                with rec.region("optimizer"):
                    opt.step(s)
                opt.zero_grad()
                # Every rank's loss is a mean over an equal share of the batch, so the global mean is sum / ws.
                rec.collective(dist.all_reduce, local_loss, label=LOSS_LABEL, phase="metric").wait()
                losses.queue(s, local_loss, t0)
                # The next step's batch is made (and its copies queued) while the device still runs this
                # one: made after the loss read (a synchronization when traced), it would sit between two
                # steps with the GPU idle, 3.8 ms a step and 12-17 ms in a third of the steps of a traced
                # speedrun on an H200 (host time in numpy and pin_memory; docs/benchmarks.md).
                if s + 1 < args.steps:
                    upcoming = device_batches(data, s + 1, run, ga, device)
                loss_value = losses.read_due(s)
                if loss_value is not None:
                    st.loss = loss_value
                st.tokens = tokens_per_step
    except BaseException:
        with contextlib.suppress(Exception):  # the finished steps before a failing one keep their losses
            losses.read_all()
        raise
    losses.read_all()


def finish(args: argparse.Namespace, run: RankRun, status: str, error: str | None) -> None:
    """Leave this rank's last words: stop the watchdog, close the recorder (which writes in-flight
    collectives on an abnormal end, and status.json) and make sure status.json exists (--trace off, or a
    recorder that failed). Runs once, on the main thread or the TermGuard."""
    if run.watchdog is not None:
        run.watchdog.stop()
    if run.rec is not None:
        try:
            run.rec.close(status, error)
        except OSError as e:  # disk full, read-only: one line; the status below is tried all the same
            print(f"commscope: rank {run.rank}: closing the recorder failed: {e}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - the status below still has to be written
            traceback.print_exc()
    if not os.path.exists(os.path.join(args.out, rank_dir_name(run.rank), STATUS)):
        try:
            write_status(os.path.join(args.out, rank_dir_name(run.rank)), status, error, run.last_step)
        except OSError as e:  # disk full, read-only: the status goes where it can, the launcher's stream
            print(f"commscope: rank {run.rank}: cannot write {STATUS} ({e.strerror or e}); status {status}: {error}",
                  file=sys.stderr)


def _ignore(signals: Sequence[int]) -> None:
    for sig in signals:
        signal.signal(sig, signal.SIG_IGN)


def main(argv: Sequence[str] | None = None) -> int:
    from commscope.recording.termguard import TermGuard

    run = RankRun(rank=int(os.environ.get("RANK", "0")), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                  world_size=int(os.environ.get("WORLD_SIZE", "1")))
    rank = run.rank
    for sig in END_SIGNALS:
        signal.signal(sig, _HANDLERS.get(sig, raise_terminated))
    die_with_parent()  # after the handlers: a torchrun already gone ends this rank with a status
    try:
        args = parse_args(argv)
        os.makedirs(os.path.join(args.out, rank_dir_name(rank)), exist_ok=True)
    except (UserError, OSError, Terminated) as e:
        print(f"commscope: error: rank {rank}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the rank has a folder: nothing to leave a status in
        return 128 + signal.SIGINT

    def stuck(signum: int) -> None:  # a signal while the main thread sits in a collective's C++ wait
        # the status the main thread would have written, in the words of the recording API's guard
        status, error = end_status(KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signal_words(signum)))
        # no recorder yet while it starts (its clock alignment is a collective too)
        where = run.rec.blocked_where() if run.rec is not None else NullRecorder().blocked_where()
        error = f"{error} while blocked {where}"
        print(f"commscope: rank {rank}: {error}", file=sys.stderr)
        finish(args, run, status, error)

    guard = TermGuard(stuck, signals=END_SIGNALS).start()
    status, error, code = "completed", None, 0
    try:
        check_args(args, run.world_size)
        train(args, run)
    except BaseException as e:  # noqa: BLE001 - every way out must leave a status behind
        # The launcher's SIGTERM (sent to all ranks when one fails) must not cut this cleanup short and
        # leave no status.json (doctor would read that as a crash); SIGKILL still ends a stuck cleanup.
        _ignore(END_SIGNALS)
        status, error = end_status(e)  # Ctrl-C: "interrupted", as a script recording through commscope.record
        code = 2 if isinstance(e, UserError) else 1
        if not isinstance(e, (UserError, Terminated, KeyboardInterrupt)):
            traceback.print_exc()
        else:
            print(f"commscope: rank {rank}: {error}", file=sys.stderr)
    _ignore(END_SIGNALS)  # from here on: finish writing, then exit
    if not guard.claim("main"):  # the guard thread wrote this rank's status (claim waited for it)
        return 128 + signal.SIGTERM
    guard.stop()
    finish(args, run, status, error)
    if run.pg and status == "completed":
        import torch.distributed as dist

        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
