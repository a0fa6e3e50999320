"""Trainer throughput: tokens/s of the reference trainer's forward + backward + optimizer step at one rank,
bf16 autocast, eager and with torch.compile of the model (target ≥ 600k tokens/s on one H200).

Why: the speedrun's point is tokens per second; this is the number `commscope run` users compare against.
It reuses the trainer's parts (instrumented_model GPT, NorMuonAndAdam, the synthetic data source) and its
loop shape — one step = forward, backward, `opt.step`, `zero_grad` — without the recorder. Batches are
generated and moved to the device before timing, so data generation is not in the figure.

Each variant runs three loops, one after the other in the same process (same compiled model, same
weights going on), so their ratios are side by side:
- `synced`: `loss.item()` after every step, as a traced `commscope run` does (the recorder resolves its
  CUDA events at step end). The GPU idles while the host launches the next step's first kernels.
  Per-step wall times and forward / backward / optimizer device times (CUDA events) come from this loop;
  its tokens/s is the figure of a traced run's step.
- `pipelined`: step s's loss is read after step s+1 is launched, as `commscope run --trace off` does on
  CUDA, through a `PendingScalar` (a pinned copy and a CUDA event right after step s), so the host waits
  for step s only while step s+1 runs. `.item()` instead would wait for the whole stream, step s+1
  included (+0.5% over synced only).
- `accum8`: pipelined, with 8 micro-batches of the same size per optimizer step: the record's own
  configuration on one GPU (its `grad_accum_steps = 8 // world_size`, so every GPU does 1/8 of an
  optimizer step per micro-batch at any world size; at world size 1 and one micro-batch the whole
  optimizer step falls on each micro-batch).

Each variant (eager, compile, ...) runs in its own subprocess under a time limit (`--variant-timeout`), so
a slow or failing compile cannot take the other figures down with it; compile time is reported
separately (first step minus a steady step).

Run: python bench/bench_throughput.py --device cuda --out OUT   (CPU: --device cpu --variants eager)
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import (TRAINER_VARIANTS, default_seqs, header, md_table, pipelined_losses, provenance_line,
                      setup_device, single_rank_group, sync, trainer_step, trainer_variant, write_results)

TARGET_TOKENS_PER_S = 600_000
RECORD_GRAD_ACCUM = 8  # the record's grad_accum_steps at world size 1 (8 // world_size)
MODES = ("synced", "pipelined", f"accum{RECORD_GRAD_ACCUM}")


def accum_step(forward, opt, batches: list, s: int, grad_accum: int):
    """One optimizer step over `grad_accum` micro-batches (each loss / grad_accum, as the trainer does);
    returns the step's loss (a device tensor, not read)."""
    total = None
    for m in range(grad_accum):
        x, y = batches[(s * grad_accum + m) % len(batches)]
        loss = forward(x, y) / grad_accum
        loss.backward()
        # a copy, not the output itself: under CUDA graphs the next micro-step's replay reuses its memory
        total = loss.detach().clone() if total is None else total + loss.detach()
    opt.step(s)
    opt.zero_grad()
    return total


LEARNS_RATIO = 0.75  # the loss after all three loops must be below this fraction of the first step's


def learns(loss_first: float, loss_after: float) -> bool:
    """Whether the variant still trains: a throughput figure from a step that computes garbage is void
    (a Gram-space Polar Express leaves the loss at ln V = 10.83, from 11.58 at step 0, at 672k tokens/s).
    The speedrun preset reaches ~0.35 after all loops, the CPU tiny preset ~0.5 × its first loss."""
    return loss_after < LEARNS_RATIO * loss_first


def best_per_mode(variants: list[dict]) -> tuple[dict, dict]:
    """(best tokens/s per loop, whether it meets the target) over the variants that ran and still learn."""
    ok = [r for r in variants if "error" not in r and r.get("learns", True)]
    best = {k: max(r["modes"][k]["tokens_per_s"] for r in ok) if ok else None for k in MODES}
    return best, {k: v is not None and v >= TARGET_TOKENS_PER_S for k, v in best.items()}


def pipelined_run(step_fn, first: int, n: int, device: torch.device, tokens: int) -> tuple[dict, list[float]]:
    """Steps first..first+n-1 with each loss read after the next step is launched: (the mode's figures,
    losses). tokens/s is over the wall time of all n steps; on CUDA the per-step device periods are kept
    too, and tokens/s at their median, which a few slow steps (GPU clock dips) do not move."""
    sync(device)
    t0 = time.perf_counter()
    periods: list[float] = []
    losses = pipelined_losses(step_fn, range(first, first + n), periods_ms=periods, device=device)
    wall = time.perf_counter() - t0
    mode = {"tokens_per_step": tokens, "steps": n, "step_ms": 1e3 * wall / n, "tokens_per_s": tokens * n / wall}
    if periods:
        median = statistics.median(periods)
        mode.update(periods_ms=periods, median_period_ms=median, tokens_per_s_median=tokens / (median / 1e3))
    return mode, losses


def run_variant(variant: str, args: argparse.Namespace, device: torch.device) -> dict:
    batch = args.batch_size or default_seqs(args.preset, 8)  # 8 sequences keep the CPU run short
    with single_rank_group(device) as backend:
        total = args.warmup + args.steps
        cfg, forward, _, opt, batches = trainer_variant(variant, args.preset, batch, device, args.seed,
                                                         min(total, 4))
        cuda = device.type == "cuda"
        timed: dict[str, list] = {"forward": [], "backward": [], "optimizer": []}

        def mark():
            if not cuda:
                return None
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e

        losses, step_s = [], []
        for s in range(total):
            t0 = time.perf_counter()
            loss, (e0, e1, e2, e3) = trainer_step(forward, opt, batches, s, mark)
            losses.append(loss.item())  # syncs, like a traced trainer's step end
            step_s.append(time.perf_counter() - t0)
            if cuda and s >= args.warmup:
                for name, (a, b) in zip(timed, ((e0, e1), (e1, e2), (e2, e3))):
                    timed[name].append(a.elapsed_time(b))
        steady = step_s[args.warmup:]
        tokens = batch * cfg.seq_len
        median_step = statistics.median(steady)
        modes = {"synced": {"grad_accum": 1, "tokens_per_step": tokens, "steps": args.steps,
                            "step_ms": 1e3 * sum(steady) / len(steady),
                            "tokens_per_s": tokens * len(steady) / sum(steady)}}
        mode, plosses = pipelined_run(lambda s: trainer_step(forward, opt, batches, s)[0], total, args.steps,
                                      device, tokens)
        modes["pipelined"] = {"grad_accum": 1, **mode}
        ga = RECORD_GRAD_ACCUM
        n_accum = max(1, args.steps // 4)  # an accumulated step is 8 micro-steps long
        first = total + args.steps
        accum_step(forward, opt, batches, first, ga).item()  # warm: accumulating into existing grads
        mode, alosses = pipelined_run(lambda s: accum_step(forward, opt, batches, s, ga), first + 1, n_accum,
                                      device, tokens * ga)
        modes[f"accum{ga}"] = {"grad_accum": ga, **mode}
        sync(device)
        return {
            "variant": variant, "backend": backend, "preset": cfg.name, "batch_size": batch,
            "seq_len": cfg.seq_len, "tokens_per_step": tokens, "warmup": args.warmup, "steps": args.steps,
            "first_step_s": step_s[0],
            "compile_s": step_s[0] - median_step if TRAINER_VARIANTS[variant][0] is not None else None,
            "median_step_ms": 1e3 * median_step,
            "tokens_per_s": modes["synced"]["tokens_per_s"],
            "modes": modes,
            "median_device_ms": {k: statistics.median(v) for k, v in timed.items()} if cuda else None,
            "loss_first": losses[0], "loss_last": losses[-1],
            "loss_last_pipelined": plosses[-1], f"loss_last_accum{ga}": alosses[-1],
            "learns": learns(losses[0], alosses[-1]),
            "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9 if cuda else None,
        }


def run_isolated(variant: str, argv: list[str], timeout: float) -> dict:
    """Run one variant in a fresh interpreter with a time limit; an error or timeout becomes a record."""
    with tempfile.TemporaryDirectory() as tmp:
        child_json = Path(tmp) / "variant.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--variant", variant,
               "--child-json", str(child_json)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"variant": variant, "error": f"timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not child_json.exists():
            return {"variant": variant, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
        result = json.loads(child_json.read_text())
        result["wall_s"] = time.perf_counter() - t0
        return result


def markdown(result: dict) -> str:
    lines = ["## Trainer throughput", "", provenance_line(result), "",
             f"Reference trainer step (forward + backward + NorMuonAndAdam), {result['preset']} preset, "
             f"one rank, bf16 autocast on CUDA; target ≥ {TARGET_TOKENS_PER_S:,} tokens/s. Loops (module "
             f"docstring): synced = loss read every step; pipelined = loss read one step late; "
             f"accum{RECORD_GRAD_ACCUM} = pipelined, {RECORD_GRAD_ACCUM} micro-batches per optimizer step "
             "(the record's configuration on one GPU).", ""]
    rows = []
    for r in result["variants"]:
        if "error" in r:
            rows.append([r["variant"], *([None] * (len(MODES) + 4)), f"failed: {r['error'][:200]}"])
            continue
        dev = r["median_device_ms"]
        split = (f"fwd {dev['forward']:.1f} / bwd {dev['backward']:.1f} / opt {dev['optimizer']:.1f} ms"
                 if dev else "")
        m = r["modes"]
        rows.append([r["variant"], *(m[k]["tokens_per_s"] for k in MODES), m["pipelined"].get("tokens_per_s_median"),
                     r["median_step_ms"],
                     r["compile_s"] if r["compile_s"] is not None else "-",
                     f"{r['loss_first']:.3f} → {r['loss_last']:.3f}"
                     + ("" if r.get("learns", True) else " (does not learn: figures void)"),
                     split])
    lines.append(md_table(["variant", *(f"tokens/s {k}" for k in MODES), "pipelined, at the median step period",
                           "median step ms (synced)", "compile s",
                           "loss first → last", "device time split (synced)"], rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default=None, help="results folder (required unless --child-json)")
    ap.add_argument("--preset", default=None, help="default: speedrun on cuda, tiny on cpu")
    ap.add_argument("--batch-size", type=int, default=None, help="sequences per step (default: the trainer's per-rank default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=None, help="default: 5 on cuda, 1 on cpu")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: 20 on cuda, 2 on cpu)")
    ap.add_argument("--variants", default=None,
                    help=f"comma list of {','.join(TRAINER_VARIANTS)} (default: eager,compile on cuda, eager on cpu)")
    ap.add_argument("--variant-timeout", type=float, default=240.0, help="seconds per variant subprocess")
    ap.add_argument("--in-process", action="store_true", help="run variants in this process (no time limit)")
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    raw = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(raw)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    args.preset = args.preset or ("speedrun" if cuda else "tiny")
    args.warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    args.steps = args.steps if args.steps is not None else (20 if cuda else 2)
    if args.child_json:
        Path(args.child_json).write_text(json.dumps(run_variant(args.variant, args, device)))
        return None
    if not args.out:
        ap.error("--out is required")
    variants = (args.variants or ("eager,compile" if cuda else "eager")).split(",")
    for v in variants:
        if v not in TRAINER_VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(TRAINER_VARIANTS)}")

    result = header(device, "bench_throughput.py", argv)
    result.update(preset=args.preset, target_tokens_per_s=TARGET_TOKENS_PER_S, variants=[])
    for v in variants:
        if args.in_process:
            result["variants"].append(run_variant(v, args, device))
        else:
            result["variants"].append(run_isolated(v, raw, args.variant_timeout))
        write_results(args.out, "bench_throughput", result, markdown(result))  # keep what is done so far
    result["best_tokens_per_s"], result["target_met"] = best_per_mode(result["variants"])
    write_results(args.out, "bench_throughput", result, markdown(result))
    return result


if __name__ == "__main__":
    main()
