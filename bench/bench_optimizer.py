"""NorMuonAndAdam step time per phase and per label update, explicit vs hooks schedule.

Why: the optimizer step *is* the communication schedule (instrumented_model/optimizer.py); knowing what
each phase and each label's update costs on the GPU tells which reorderings can pay off. This measures the
real optimizer on the real model's 13 labelled parameters (instrumented_model.model.GPT) at one rank:
gradients come from a backward of a fixed random linear functional of the parameters (so every gradient
is the same random tensor each step, and the hooks schedule's post-accumulate-grad hooks really fire).

Timing goes through the optimizer's own recorder interface: `PhaseTimer` is a NullRecorder whose
`region()` brackets each region with CUDA events (device time) and perf_counter (host time), so the regions
timed are exactly the trainer's `opt.phase1..3` and `update:<label>`.

World size 1 (nccl on cuda, gloo on cpu, as the trainer): the optimizer communicates nothing at one rank
(every label is "local"), so the schedules differ only in where the tied-embedding fold runs (inside
phase 1 for explicit, in the backward's hook for hooks); comm overlap needs several ranks (`commscope run`).
The bank vs alpha-lpt partition comparison is not measured: the optimizer has one partition (banks).

Run: python bench/bench_optimizer.py --device cuda --out OUT   (CPU: --device cpu, tiny preset)
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import arg_parser, header, md_table, provenance_line, setup_device, single_rank_group, sync, write_results
from commscope.recording.api import NullRecorder


class PhaseTimer(NullRecorder):
    """NullRecorder that times every region: host ms always, device ms (CUDA events) on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.pending: list[tuple[str, float, object, object]] = []  # (name, host_ms, start_evt, end_evt)
        self.host: dict[str, list[float]] = defaultdict(list)
        self.device: dict[str, list[float]] = defaultdict(list)

    @contextlib.contextmanager
    def region(self, name: str):
        start = end = None
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            host_ms = (time.perf_counter_ns() - t0) / 1e6
            if self.cuda:
                end.record()
            self.pending.append((name, host_ms, start, end))

    def flush(self, keep: bool) -> None:
        """After a synchronize: move this step's regions into the per-name lists (or drop warmup steps)."""
        for name, host_ms, start, end in self.pending:
            if keep:
                self.host[name].append(host_ms)
                if self.cuda:
                    self.device[name].append(start.elapsed_time(end))
        self.pending.clear()


def run_schedule(schedule: str, preset: str, head_layout: str, device: torch.device, warmup: int,
                 steps: int) -> dict:
    from instrumented_model.config import make_config
    from instrumented_model.model import GPT
    from instrumented_model.optimizer import NorMuonAndAdam

    torch.manual_seed(0)
    with torch.device(device):
        model = GPT(make_config(preset, 1), head_layout=head_layout)
    params = model.labelled_params()
    g = torch.Generator(device=device).manual_seed(1)
    directions = {label: torch.randn(p.shape, generator=g, device=device) * 1e-2 for label, p in params.items()}
    timer = PhaseTimer(device)
    opt = NorMuonAndAdam(params, rank=0, world_size=1, recorder=timer, comm_schedule=schedule,
                         head_layout=head_layout)
    if schedule == "hooks":
        opt.install_hooks()

    for s in range(warmup + steps):
        opt.set_last_micro_step(True)
        with timer.region("backward"):
            sum((p * directions[label]).sum() for label, p in params.items()).backward()
        with timer.region("optimizer"):
            opt.step(s)
        opt.zero_grad()
        sync(device)
        timer.flush(keep=s >= warmup)

    def medians(samples: dict[str, list[float]]) -> dict[str, float]:
        return {name: statistics.median(v) for name, v in samples.items()}

    return {"schedule": schedule, "host_ms": medians(timer.host),
            "device_ms": medians(timer.device) if timer.cuda else None, "steps": steps,
            "numel": {label: p.numel() for label, p in params.items()}}


def markdown(result: dict) -> str:
    cuda = result["device"] == "cuda"
    lines = ["## Optimizer step per phase", "", provenance_line(result), "",
             f"NorMuonAndAdam on the {result['preset']} model's 13 labels, world size 1 ({result['backend']}), "
             f"head {result['head_layout']}; medians over {result['steps']} steps. At one rank nothing is "
             "communicated: explicit and hooks differ only in where the tied-embedding fold runs "
             "(phase 1 vs the backward's hook).", ""]
    by = {r["schedule"]: r for r in result["schedules"]}
    names = [n for n in by["explicit"]["host_ms"] if not n.startswith("update:")]
    names += sorted(n for n in by["explicit"]["host_ms"] if n.startswith("update:"))
    cols = ["region"]
    for s in by:
        cols += [f"{s} host ms"] + ([f"{s} device ms"] if cuda else [])
    rows = []
    for n in names:
        row = [n]
        for r in by.values():
            row.append(r["host_ms"].get(n))
            if cuda:
                row.append(r["device_ms"].get(n))
        rows.append(row)
    lines.append(md_table(cols, rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--preset", default=None, help="default: speedrun on cuda, tiny on cpu")
    ap.add_argument("--head-layout", default="transposed", choices=("transposed", "standard"))
    ap.add_argument("--warmup", type=int, default=None, help="default: 3 on cuda, 1 on cpu")
    ap.add_argument("--steps", type=int, default=None, help="default: 20 on cuda, 3 on cpu")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    preset = args.preset or ("speedrun" if cuda else "tiny")
    warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    steps = args.steps if args.steps is not None else (20 if cuda else 3)

    result = header(device, "bench_optimizer.py", argv)
    with single_rank_group(device) as backend:
        result.update(preset=preset, head_layout=args.head_layout, backend=backend, world_size=1, steps=steps)
        result["schedules"] = [run_schedule(s, preset, args.head_layout, device, warmup, steps)
                               for s in ("explicit", "hooks")]
    write_results(args.out, "bench_optimizer", result, markdown(result))
    return result


if __name__ == "__main__":
    main()
