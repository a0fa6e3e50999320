"""The host side of the trainer step: how long the host takes to launch each phase, and every call in a
step that makes the host wait for the device (what keeps the host from running ahead of the device).

Why: a step whose host time is close to its device time cannot be pipelined: either the host launches
too slowly or something inside the step synchronizes. This tells which, from measurement: it times the
host's forward / backward / optimizer launches of steady steps that never read the loss (each step's loss
is read one step late, and that read is timed separately as the wait for the device), next to the device
step time from CUDA events; then it runs one more step under `torch.cuda.set_sync_debug_mode("warn")`
and lists every synchronizing call with the Python line that made it (calls on the autograd engine's
device threads have no Python line: a backward phase whose host time matches its device time says so). The trainer loop's own host work
(building the global batch, copying it to the device from pageable or pinned memory) is timed too.

Invariants: the step is benchlib.trainer_step, as bench_throughput times it; no measured step syncs
except through the calls this script reports. On CPU there is no device to wait for (sync fields null).

Run: python bench/bench_host.py --device cuda --out OUT [--variant compile-fp8-head]
"""
from __future__ import annotations

import argparse
import statistics
import time
import traceback
import warnings
from pathlib import Path

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import (default_seqs, header, md_table, pipelined_losses, provenance_line,
                      parse_trainer_args, single_rank_group, sync, trainer_arg_parser, trainer_step, trainer_variant,
                      write_results)

REPO = Path(__file__).resolve().parents[1]


def sync_sites(step_fn, device: torch.device) -> list[dict]:
    """Run `step_fn()` under sync debug mode "warn"; one row per distinct (message, repo line) with a count."""
    if device.type != "cuda":
        return []
    found: dict[tuple[str, str], int] = {}
    prev = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        # the innermost frame of this repository is the line to change
        # the innermost frame of this repository is the line to change; the innermost frame of all says
        # where inside it (torch, or code torch.compile generated)
        stack = traceback.extract_stack()[:-1]
        here = [f for f in stack if str(REPO) in f.filename and __file__ != f.filename]
        site = f"{Path(here[-1].filename).relative_to(REPO)}:{here[-1].lineno} {here[-1].line}" if here else "?"
        site += f" (via {Path(stack[-1].filename).name}:{stack[-1].lineno})" if stack else ""
        text = str(message).splitlines()[0][:160]
        if "debug mode is a prototype" in text:  # torch's notice on entering the mode, not a sync
            return
        key = (text, site)
        found[key] = found.get(key, 0) + 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step_fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = prev
    return [{"message": m, "site": s, "count": n} for (m, s), n in sorted(found.items(), key=lambda kv: -kv[1])]


def measure(args: argparse.Namespace, device: torch.device) -> dict:
    from instrumented_model.config import make_config
    from instrumented_model.data import make_source

    batch = args.batch_size or default_seqs(args.preset, 8)
    cuda = device.type == "cuda"
    with single_rank_group(device):
        cfg, forward, _, opt, batches = trainer_variant(args.variant, args.preset, batch, device, args.seed, 4)
        for s in range(args.warmup):
            trainer_step(forward, opt, batches, s)[0].item()
        sync(device)
        host: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "wait_for_loss": []}
        stamp = (lambda: (time.perf_counter(), None))
        if cuda:
            def stamp():
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                return time.perf_counter(), e
        marks_per_step = []

        def step(s: int) -> torch.Tensor:
            loss, marks = trainer_step(forward, opt, batches, s, stamp)
            for name, (a, b) in zip(("forward", "backward", "optimizer"), zip(marks, marks[1:])):
                host[name].append(1e3 * (b[0] - a[0]))
            marks_per_step.append(marks)
            return loss

        pipelined_losses(step, range(args.warmup, args.warmup + args.steps), host["wait_for_loss"])
        sync(device)
        # step start to next step start: marks are (host time, CUDA event) pairs, the first at the step's start
        device_ms = [m0[0][1].elapsed_time(m1[0][1]) for m0, m1 in zip(marks_per_step, marks_per_step[1:])] if cuda else []
        sites = sync_sites(lambda: trainer_step(forward, opt, batches, args.warmup + args.steps)[0], device)
        sync(device)

        # the trainer loop's own host work per step: the global batch and its copy to the device
        data = make_source(None, vocab_size=cfg.vocab_size, seq_len=make_config(args.preset, 1).seq_len,
                           batch_size=batch, seed=args.seed)
        loop: dict[str, list[float]] = {"global_batch": [], "copy_pageable": [], "copy_pinned": []}
        for s in range(5):
            t0 = time.perf_counter()
            x, _ = data.global_batch(s)
            loop["global_batch"].append(1e3 * (time.perf_counter() - t0))
            if cuda:
                big = torch.empty(1 << 26, device=device).normal_()  # keep the device busy during the copies
                for kind in ("copy_pageable", "copy_pinned"):
                    torch.mm(big.view(8192, -1), big.view(-1, 8192))
                    src = x if kind == "copy_pageable" else x.pin_memory()
                    t0 = time.perf_counter()
                    src.to(device, non_blocking=True)
                    loop[kind].append(1e3 * (time.perf_counter() - t0))
                    sync(device)
    med = {k: statistics.median(v) if v else None for k, v in {**host, **loop}.items()}
    return {
        "variant": args.variant, "preset": cfg.name, "batch_size": batch, "steps": args.steps,
        "host_ms": {k: med[k] for k in host}, "host_launch_ms": sum(med[k] for k in ("forward", "backward", "optimizer")),
        "device_step_ms": statistics.median(device_ms) if device_ms else None,
        "loop_ms": {k: med[k] for k in loop},
        "sync_sites": sites,
    }


def markdown(r: dict) -> str:
    h = r["host_ms"]
    lines = ["## Host side of the trainer step", "", provenance_line(r), "",
             f"{r['variant']} step, {r['preset']} preset, batch {r['batch_size']}, {r['steps']} steps whose loss "
             f"is read one step late. Host launch {r['host_launch_ms']:.1f} ms per step"
             + (f" against {r['device_step_ms']:.1f} ms of device step" if r["device_step_ms"] else "") + ".", "",
             md_table(["host phase", "median ms"], [[k, v] for k, v in {**h, **r["loop_ms"]}.items()]), ""]
    if r["sync_sites"]:
        lines += ["Synchronizing calls in one step (torch.cuda.set_sync_debug_mode):", "",
                  md_table(["call", "where", "count"],
                           [[s["message"].replace("|", "/"), s["site"].replace("|", "/"), s["count"]]
                            for s in r["sync_sites"]])]
    elif r["device_step_ms"]:
        lines.append("No synchronizing call in the step.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = trainer_arg_parser(__doc__, variant_default="compile-fp8-head on cuda", steps=10)
    args, device = parse_trainer_args(ap, argv, "compile-fp8-head")
    cuda = device.type == "cuda"
    result = {**header(device, "bench_host.py", argv), **measure(args, device)}
    write_results(args.out, "bench_host" + ("" if cuda else "-cpu"), result, markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
