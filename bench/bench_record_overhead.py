"""Overhead of recording: plain (NullRecorder) vs light (Recorder) vs torch.profiler, in ONE process.

Two workloads (`--workload`):
- `trainer` (default): the reference trainer's step itself, as `commscope run --nproc 1` runs it: the
  GPT of `--preset` (speedrun on cuda, tiny on cpu; `--seqs` sequences per step, default the trainer's),
  forward / backward / optimizer regions, NorMuonAndAdam with its reduce_scatter / all_gather through
  the recorder, post-accumulate-grad hooks on the 13 labels, the loss all_reduce and `loss.item()`.
  `--variant` picks one of benchlib.TRAINER_VARIANTS (`compile-fp8-head`: `commscope run --compile
  --fp8-head`, the fastest step, where a fixed host cost per event weighs most).
- `linear`: the same instrumentation density on a chain of 13 square Linear layers (`--dim`, `--batch`,
  `--grad-accum`): one all_reduce per label in scatter order, waited in reverse with an `update:<label>`
  region each. Recording costs are per event, so this isolates them from the model.
Hooks are registered only while light blocks run (`Recorder.watch` / `unwatch`), so plain and profiler
steps carry no recording work at all.

Modes are interleaved: each round runs `--steps-per-round` steps of every mode, in an order shuffled per
round (seeded), so drift in machine load hits all modes alike and no mode always follows the same one (a
block can leave state behind for the next: the profiler's freed buffers, a hook registration). Reported, for wall time and for process CPU time (all
threads; robust to other load on a shared CPU machine): median step time per mode and the median over
rounds of (mode median / plain median) within the round. Then where light recording's cost goes: the
records it wrote per step, by kind, and the extra process CPU time per step divided by them (host µs
per record); after the timed rounds, `--breakdown-steps` more light steps time the step-end flush alone
(it runs after the step's sync, so all of it is exposed) and, under cProfile, attribute the recorder's
host time to its functions and to the torch calls they make (cProfile inflates each call, so these are
shares, not the overhead itself).

`--flush overlap` records the light steps with Recorder(flush="overlap"): each step's write moves from after
its sync to behind the next step's first region (the breakdown's "flush" then times the step end alone).

Run: python bench/bench_record_overhead.py [--device cuda] [--workload trainer|linear] [--variant compile-fp8-head]
     [--flush overlap] [--split-hooks] [--rounds 20]
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import contextlib
import json
import pstats
import random
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

import benchlib  # noqa: F401  (puts the repo on sys.path: measure this checkout, not an installed copy)
from benchlib import TRAINER_VARIANTS, default_seqs, machine, setup_device, single_rank_group, trainer_variant
from commscope.recording import NullRecorder, Recorder
from instrumented_model.model import LABELS  # the reference trainer's 13 labels


def linear_step(model, params, rec, step, args, device):
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


def linear_workload(args: argparse.Namespace, device: torch.device):
    """(labelled params, step(rec, step)) of the Linear chain."""
    layers = [torch.nn.Linear(args.dim, args.dim, bias=False) for _ in LABELS]
    model = torch.nn.Sequential(*[m for lin in layers for m in (lin, torch.nn.ReLU())]).to(device)
    params = {lb: lin.weight for lb, lin in zip(LABELS, layers)}
    return params, lambda rec, step: linear_step(model, params, rec, step, args, device)


def trainer_workload(args: argparse.Namespace, device: torch.device):
    """(labelled params, step(rec, step)) of the reference trainer at world size 1 (instrumented_model.train's
    step with one micro-step; the optimizer's recorder is the block's)."""
    _, forward, model, opt, batches = trainer_variant(args.variant, args.preset, args.seqs, device, seed=0, n_batches=2)
    params = model.labelled_params()

    def step(rec, s: int) -> None:
        opt.rec = rec
        x, y = batches[s % len(batches)]
        with rec.step(s) as st:
            with rec.region("forward"):
                loss = forward(x, y)
            with rec.region("backward"):
                loss.backward()
            with rec.region("optimizer"):
                opt.step(s)
            opt.zero_grad()
            metric = loss.detach().float()
            rec.collective(dist.all_reduce, metric, label="loss", phase="metric").wait()
            st.loss = metric.item()

    return params, step


def measure(args: argparse.Namespace, device: torch.device, backend: str):
    """Interleaved blocks of plain / light / profiler steps → (step times per (clock, mode), per-round
    ratios to plain, profiler stop() seconds per profiled step, modes)."""
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    params, one_step = (trainer_workload if args.workload == "trainer" else linear_workload)(args, device)

    with tempfile.TemporaryDirectory(prefix="commscope-bench-") as tmp:
        light = Recorder(tmp, rank=0, world_size=1, device=device, backend=backend, flush=args.flush)
        try:
            timings = _interleave(args, light, params, one_step, cuda)
            step0 = (args.warmup + args.rounds * args.steps_per_round) * len(timings[3])  # after every mode's steps
            breakdown = recorder_breakdown(light, params, one_step, step0, args.breakdown_steps, cuda)
        finally:
            light.close()
        return timings + (records_per_step(tmp), breakdown)


def recorder_breakdown(light, params, one_step, step0: int, n: int, cuda: bool) -> dict:
    """{"flush_ms": median wall ms of the step-end flush, "functions": [(name, calls per step, µs per step
    under cProfile)]} over `n` light steps: first the flush alone, timed around Recorder._flush (with
    flush="overlap" on CUDA: around Recorder._write_behind, the same work run behind the next step's first
    region), then cProfile on the recorder's functions (commscope/recording/) and the calls they make into torch."""
    if n <= 0:
        return {"flush_ms": None, "early": None, "left": None, "functions": []}
    flush_ns: list[int] = []
    split: list[tuple[int, int]] = []  # flush="step": (records resolved inside the step, left to its end)
    timed = "_write_behind" if light._overlap else "_flush"
    inner = getattr(light, timed)

    def timed_flush(*a, **kw):
        if timed == "_flush":
            split.append((len(light._lines), len(light._pending) + len(light._hook_buf) + 1))  # + the step record
        t0 = time.perf_counter_ns()
        try:
            return inner(*a, **kw)
        finally:
            flush_ns.append(time.perf_counter_ns() - t0)

    light.watch(params)
    setattr(light, timed, timed_flush)
    try:
        for i in range(n):
            one_step(light, step0 + i)
    finally:
        delattr(light, timed)
    prof = cProfile.Profile()
    for i in range(n, 2 * n):
        prof.enable()
        one_step(light, step0 + i)
        prof.disable()
        if cuda:
            torch.cuda.synchronize()
    light.unwatch()
    ours = "commscope/recording/"
    per_fn = []
    for (file, line, fn), (_, calls, tottime, _, callers) in pstats.Stats(prof).stats.items():
        if ours in file.replace("\\", "/"):
            per_fn.append((f"{file.rsplit(ours, 1)[1]}:{fn}", calls, tottime))
        elif "_distributed_c10d.wait" not in fn:  # (the collective's own wait: plain steps make it too)
            # a call into torch or the runtime: the share made from the recorder's own functions
            from_us = [(c[1], c[2]) for (cfile, _, _), c in callers.items() if ours in cfile.replace("\\", "/")]
            if from_us:
                per_fn.append((f"{fn} (from the recorder)", sum(c for c, _ in from_us), sum(t for _, t in from_us)))
    per_fn.sort(key=lambda r: -r[2])
    return {"flush_ms": statistics.median(flush_ns) / 1e6,
            "early": statistics.median(e for e, _ in split) if split else None,
            "left": statistics.median(lf for _, lf in split) if split else None,
            "functions": [(name, calls / n, 1e6 * t / n) for name, calls, t in per_fn]}


def records_per_step(run_dir: str) -> dict[str, float]:
    """Light recording's records per recorded step, by kind ("hook", "region", "collective", "step"): over
    the steps that recorded hooks when any did (the "light, no hooks" steps of --split-hooks share the
    recorder and record none)."""
    per_step: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with open(f"{run_dir}/rank0/events.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("step") is not None:
                per_step[rec["step"]][rec.get("kind", "?")] += 1
    steps = [c for c in per_step.values() if c["hook"]] or list(per_step.values())
    total = sum(steps, collections.Counter())
    return {k: n / max(len(steps), 1) for k, n in sorted(total.items())}


# With --split-hooks, two more modes say what the gradient hooks cost and whose cost it is:
# light recording of everything but the hooks (no watch()), and plain steps with a no-op Python
# post-accumulate-grad hook per label (torch's cost of calling any Python hook, none of the recorder's).
LIGHT_NO_HOOKS = "light, no hooks"
PLAIN_NOOP_HOOKS = "plain, no-op hooks"


def _noop_hook(_param) -> None:
    return None


def _interleave(args, light, params, one_step, cuda: bool):
    """The warmup blocks, then `args.rounds` rounds of every mode in a shuffled order (see measure)."""
    plain = NullRecorder()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def run_block(mode: str, n: int, step0: int) -> tuple[list[float], list[float]]:
        rec = light if mode.startswith("light") else plain
        if mode != LIGHT_NO_HOOKS:
            rec.watch(params)
        noop = ([p.register_post_accumulate_grad_hook(_noop_hook) for p in params.values()]
                if mode == PLAIN_NOOP_HOOKS else [])
        ctx = profile(activities=acts, record_shapes=True) if mode == "profiler" else contextlib.nullcontext()
        wall, cpu = [], []
        with ctx:
            for i in range(n):
                t0, c0 = time.perf_counter(), time.process_time()
                # No torch.profiler schedule: every step of the block is recorded (always RECORD), each
                # wrapped in ProfilerStep#<step> like commscope's profiler window (profiler_window.py).
                with record_function(f"ProfilerStep#{step0 + i}") if mode == "profiler" else contextlib.nullcontext():
                    one_step(rec, step0 + i)
                if cuda:
                    torch.cuda.synchronize()
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            t_stop = time.perf_counter()
        rec.unwatch()
        for h in noop:
            h.remove()
        if mode == "profiler":  # stop(): the profiler's deferred post-processing of the block's events
            stop_s.append((time.perf_counter() - t_stop) / n)
        return wall, cpu

    stop_s: list[float] = []
    modes = ["plain", "light", "profiler"] + ([LIGHT_NO_HOOKS, PLAIN_NOOP_HOOKS] if args.split_hooks else [])
    step = 0
    for mode in modes:
        run_block(mode, args.warmup, step)
        step += args.warmup
    # (clock, mode) → step times / per-round ratios; "cpu" is process CPU time (all threads), which a
    # loaded shared machine disturbs far less than wall time.
    per_mode = {(c, m): [] for c in ("wall", "cpu") for m in modes}
    order = random.Random(0)
    ratios = {(c, m): [] for c in ("wall", "cpu") for m in modes}
    for r in range(args.rounds):
        med = {}
        for mode in order.sample(modes, len(modes)):
            wall, cpu = run_block(mode, args.steps_per_round, step)
            step += args.steps_per_round
            for c, t in (("wall", wall), ("cpu", cpu)):
                per_mode[(c, mode)] += t
                med[(c, mode)] = statistics.median(t)
        for c in ("wall", "cpu"):
            for mode in modes:
                ratios[(c, mode)].append(med[(c, mode)] / med[(c, "plain")])
    return per_mode, ratios, stop_s, modes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workload", choices=("trainer", "linear"), default="trainer")
    ap.add_argument("--preset", default=None, help="trainer workload: default speedrun on cuda, tiny on cpu")
    ap.add_argument("--variant", default="eager", choices=tuple(TRAINER_VARIANTS),
                    help="trainer workload: eager, or a compiled variant (compile-fp8-head: the fastest step)")
    ap.add_argument("--seqs", type=int, default=None,
                    help="trainer workload: sequences per step (default: the trainer's per-rank default; 4 on cpu)")
    ap.add_argument("--dim", type=int, default=None, help="linear workload: default 256 on cpu, 2048 on cuda")
    ap.add_argument("--batch", type=int, default=None, help="linear workload: default 64 on cpu, 8192 on cuda")
    ap.add_argument("--grad-accum", type=int, default=2, help="linear workload: micro-steps per step")
    ap.add_argument("--flush", choices=("step", "overlap"), default="step",
                    help="light recording's flush= (overlap: a step's records are written behind the next step's "
                         "first region, on CUDA)")
    ap.add_argument("--split-hooks", action="store_true",
                    help=f"add two modes: '{LIGHT_NO_HOOKS}' (light recording without watch(), so the gradient "
                         f"hooks' share of the cost is the difference) and '{PLAIN_NOOP_HOOKS}' (plain steps with "
                         "a no-op Python hook per label: torch's cost of any Python hook)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps-per-round", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--breakdown-steps", type=int, default=5,
                    help="light steps after the timed rounds that say where recording's time goes (0: none)")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    args.dim = args.dim or (2048 if cuda else 256)
    args.batch = args.batch or (8192 if cuda else 64)
    args.preset = args.preset or ("speedrun" if cuda else "tiny")
    args.seqs = args.seqs or default_seqs(args.preset, 4)
    with single_rank_group(device) as backend:
        per_mode, ratios, stop_s, modes, records, breakdown = measure(args, device, backend)

    print("## Recording overhead\n")
    variant_flag = f" --variant {args.variant}" if args.workload == "trainer" and args.variant != "eager" else ""
    variant_flag += f" --flush {args.flush}" if args.flush != "step" else ""
    variant_flag += " --split-hooks" if args.split_hooks else ""
    shape = (f"reference trainer, {args.variant}, preset {args.preset}, {args.seqs} sequences per step"
             if args.workload == "trainer"
             else f"Linear chain, dim {args.dim}, batch {args.batch}, grad-accum {args.grad_accum}")
    print(f"Machine: {machine(device)}. `python bench/bench_record_overhead.py --device {args.device} --workload "
          f"{args.workload}{variant_flag}` ({shape}, {args.rounds} rounds × {args.steps_per_round} steps per mode, "
          f"interleaved{'' if cuda else ', 1 intra-op thread'}).\n")
    # The mean over every step as well: a cost paid on some steps only (a recompile, a periodic write) is
    # left out by the median; the mean ratio is the amortized cost.
    # Where a mean above the median comes from: the first step of each block (what a mode switch leaves
    # behind: hooks registered, the previous block's state) or long steps anywhere.
    k = args.steps_per_round
    later = {m: [t for i, t in enumerate(per_mode[("wall", m)]) if i % k] for m in modes}
    print("| mode | median step wall (ms) | wall ratio to plain | median step CPU (ms) | CPU ratio to plain "
          "| mean wall ratio | mean CPU ratio | mean wall ratio, blocks' first steps left out "
          "| steps over 1.25× the mode's median (of them first in their block) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in modes:
        cells = [f"{1e3 * statistics.median(per_mode[(c, mode)]):.3f} | {statistics.median(ratios[(c, mode)]):.4f}"
                 for c in ("wall", "cpu")]
        cells += [f"{statistics.fmean(per_mode[(c, mode)]) / statistics.fmean(per_mode[(c, 'plain')]):.4f}"
                  for c in ("wall", "cpu")]
        cells.append(f"{statistics.fmean(later[mode]) / statistics.fmean(later['plain']):.4f}" if k > 1 else "–")
        wall = per_mode[("wall", mode)]
        long = [i for i, t in enumerate(wall) if t > 1.25 * statistics.median(wall)]
        cells.append(f"{len(long)} of {len(wall)} ({sum(i % k == 0 for i in long)})")
        print(f"| {mode} | " + " | ".join(cells) + " |")
    if "compile" in getattr(args, "variant", ""):
        # A guard on the parameters' hooks would recompile or re-dispatch when a block adds or removes them.
        stats = torch._dynamo.utils.counters["stats"]
        print(f"\ntorch.compile over the whole run: {stats.get('unique_graphs', 0)} graphs compiled, "
              f"{sum(torch._dynamo.utils.counters['recompiles'].values())} recompiles.")
    print(f"\ntorch.profiler also defers work to its stop() (outside the step times above): "
          f"{1e3 * statistics.median(stop_s):.3f} ms per profiled step (median over blocks), not counting export.")
    extra_cpu_ms = 1e3 * (statistics.median(per_mode[("cpu", "light")]) - statistics.median(per_mode[("cpu", "plain")]))
    total = sum(records.values())
    print(f"\nWhere light recording's cost goes: {total:.1f} records per step ("
          + ", ".join(f"{n:.1f} {kind}" for kind, n in records.items())
          + f"); {extra_cpu_ms:.3f} ms more process CPU per step than plain, "
          f"{1e3 * extra_cpu_ms / max(total, 1):.1f} µs per record.")
    if breakdown["functions"]:
        shown = breakdown["functions"][:12]
        where = ("written behind the next step's first region" if args.flush == "overlap" and cuda
                 else "after the step's sync, so exposed whole")
        print(f"\nThe step's write ({where}): {breakdown['flush_ms']:.3f} ms per step "
              f"(median of {args.breakdown_steps}).")
        if breakdown["early"] is not None:
            print(f"Records resolved inside the step (at region ends, once the GPU had passed them): "
                  f"{breakdown['early']:.0f}; left to the step end: {breakdown['left']:.0f} (medians).")
        print(f"Host time of the recorder under cProfile, per step ({args.breakdown_steps} steps; cProfile "
              "inflates every call):\n")
        print("| function | calls per step | µs per step (cProfile) |")
        print("|---|---|---|")
        for name, calls, us in shown:
            print(f"| `{name}` | {calls:.1f} | {us:.1f} |")
        print(f"| all {len(breakdown['functions'])} | | {sum(us for _, _, us in breakdown['functions']):.1f} |")


if __name__ == "__main__":
    main()
