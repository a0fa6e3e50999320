"""Overhead of recording: plain (NullRecorder) vs light (Recorder) vs torch.profiler, in ONE process.

The loop has the instrumentation density of the reference trainer's step: 13 labelled weights (a chain
of square Linear layers) with post-accumulate-grad hooks, `--grad-accum` micro-steps with forward and
backward regions, one all_reduce per label launched in scatter order and waited in reverse with an
`update:<label>` region each, a loss all_reduce, and the step context. Recording costs are per event, so
matching the event count per step is what makes the ratio transferable; `--dim`/`--batch` set the step
time (on a GPU choose them so a step takes ~40 ms like the speedrun step).

Modes are interleaved: each round runs `--steps-per-round` steps of every mode, in a rotating order, so
drift in machine load hits all modes alike. Reported, for wall time and for process CPU time (all
threads; robust to other load on a shared CPU machine): median step time per mode and the median over
rounds of (mode median / plain median) within the round.

Run: python bench/bench_record_overhead.py [--device cuda] [--rounds 20]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

import benchlib  # also puts the repo on sys.path: measure this checkout, not an installed copy
from benchlib import machine, setup_device, single_rank_group
from commscope.record import NullRecorder, Recorder
from instrumented_model.model import LABELS  # the reference trainer's 13 labels


def one_step(model, params, rec, step, args, device):
    with rec.step(step) as st:
        total = torch.zeros((), device=device)
        for m in range(args.grad_accum):
            rec.set_micro_step(m)
            x = torch.randn(args.batch, args.dim, device=device)
            with rec.region("forward"):
                loss = model(x).square().mean() / args.grad_accum
            with rec.region("backward"):
                loss.backward()
            total += loss.detach()
        rec.set_micro_step(None)
        with rec.region("optimizer"), torch.no_grad():
            with rec.region("opt.phase1"):
                handles = {lb: rec.collective(dist.all_reduce, p.grad, label=lb, phase="reduce")
                           for lb, p in params.items()}
                loss_h = rec.collective(dist.all_reduce, total, label="loss", phase="allreduce")
            with rec.region("opt.phase2"):
                for lb in reversed(LABELS):
                    handles[lb].wait()
                    with rec.region(f"update:{lb}"):
                        p = params[lb]
                        p.add_(p.grad, alpha=-1e-3)
                        p.grad = None
            loss_h.wait()
        st.loss = total.item()


def measure(args: argparse.Namespace, device: torch.device, backend: str):
    """Interleaved blocks of plain / light / profiler steps → (step times per (clock, mode), per-round
    ratios to plain, profiler stop() seconds per profiled step, modes)."""
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.dim, args.dim, bias=False) for _ in LABELS]
    model = torch.nn.Sequential(*[m for lin in layers for m in (lin, torch.nn.ReLU())]).to(device)
    params = {lb: lin.weight for lb, lin in zip(LABELS, layers)}

    tmp = tempfile.mkdtemp(prefix="commscope-bench-")
    light = Recorder(tmp, rank=0, world_size=1, device=device, backend=backend)
    light.watch(params)
    plain = NullRecorder()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def run_block(mode: str, n: int, step0: int) -> tuple[list[float], list[float]]:
        rec = light if mode == "light" else plain
        ctx = profile(activities=acts, record_shapes=True) if mode == "profiler" else contextlib.nullcontext()
        wall, cpu = [], []
        with ctx:
            for i in range(n):
                t0, c0 = time.perf_counter(), time.process_time()
                # No torch.profiler schedule: every step of the block is recorded (always RECORD), each
                # wrapped in ProfilerStep#<step> like commscope's profiler window (profiler_window.py).
                with record_function(f"ProfilerStep#{step0 + i}") if mode == "profiler" else contextlib.nullcontext():
                    one_step(model, params, rec, step0 + i, args, device)
                if cuda:
                    torch.cuda.synchronize()
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            t_stop = time.perf_counter()
        if mode == "profiler":  # stop(): the profiler's deferred post-processing of the block's events
            stop_s.append((time.perf_counter() - t_stop) / n)
        return wall, cpu

    stop_s: list[float] = []
    modes = ["plain", "light", "profiler"]
    step = 0
    for mode in modes:
        run_block(mode, args.warmup, step)
        step += args.warmup
    # (clock, mode) → step times / per-round ratios; "cpu" is process CPU time (all threads), which a
    # loaded shared machine disturbs far less than wall time.
    per_mode = {(c, m): [] for c in ("wall", "cpu") for m in modes}
    ratios = {(c, m): [] for c in ("wall", "cpu") for m in modes}
    for r in range(args.rounds):
        med = {}
        for mode in modes[r % 3:] + modes[: r % 3]:
            wall, cpu = run_block(mode, args.steps_per_round, step)
            step += args.steps_per_round
            for c, t in (("wall", wall), ("cpu", cpu)):
                per_mode[(c, mode)] += t
                med[(c, mode)] = statistics.median(t)
        for c in ("wall", "cpu"):
            for mode in modes:
                ratios[(c, mode)].append(med[(c, mode)] / med[(c, "plain")])
    light.close()
    return per_mode, ratios, stop_s, modes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dim", type=int, default=None, help="default: 256 on cpu, 2048 on cuda")
    ap.add_argument("--batch", type=int, default=None, help="default: 64 on cpu, 8192 on cuda")
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps-per-round", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    args.dim = args.dim or (2048 if cuda else 256)
    args.batch = args.batch or (8192 if cuda else 64)
    with single_rank_group(device) as backend:
        per_mode, ratios, stop_s, modes = measure(args, device, backend)

    print(f"## Recording overhead\n")
    print(f"Machine: {machine(device)}. `python bench/bench_record_overhead.py --device {args.device}` "
          f"(dim {args.dim}, batch {args.batch}, grad-accum {args.grad_accum}, {args.rounds} rounds × "
          f"{args.steps_per_round} steps per mode, interleaved{'' if cuda else ', 1 intra-op thread'}).\n")
    print("| mode | median step wall (ms) | wall ratio to plain | median step CPU (ms) | CPU ratio to plain |")
    print("|---|---|---|---|---|")
    for mode in modes:
        cells = [f"{1e3 * statistics.median(per_mode[(c, mode)]):.3f} | {statistics.median(ratios[(c, mode)]):.4f}"
                 for c in ("wall", "cpu")]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print(f"\ntorch.profiler also defers work to its stop() (outside the step times above): "
          f"{1e3 * statistics.median(stop_s):.3f} ms per profiled step (median over blocks), not counting export.")


if __name__ == "__main__":
    main()
