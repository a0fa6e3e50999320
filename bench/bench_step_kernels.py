"""Where the trainer step's device time goes: every GPU kernel of a few steady steps under torch.profiler,
grouped into the categories the speedrun record optimises (matmuls, attention, the softcapped head +
cross-entropy, the optimizer's kernels, the rest).

Why: bench_throughput.py says how far the step is from the 600k tokens/s target; this says which kernels
would have to get faster to close the gap, from measurement rather than a FLOP estimate. It builds the step
exactly as bench_throughput does (benchlib.trainer_variant: `--variant compile` is torch.compile of the model).

On CPU the "kernels" are aten ops (self CPU time), so the script and its categories can be checked without a
GPU; the figures that matter are the CUDA ones.

Invariants: categories come from kernel names only (first matching rule in CATEGORIES wins, "other"
catches the rest), so every kernel is counted once; the per-category ms are per step (total over the
profiled steps / steps); the step total is the sum over all kernels, not wall time (gaps between kernels
are `idle`, from the profiled steps' wall time measured with CUDA events).

Run: python bench/bench_step_kernels.py --device cuda --out OUT [--variant compile]
"""
from __future__ import annotations

import argparse
import re
import statistics

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch
from torch.profiler import ProfilerActivity, profile

from benchlib import (default_seqs, header, md_table, pipelined_losses, provenance_line,
                      parse_trainer_args, single_rank_group, sync, trainer_arg_parser, trainer_step, trainer_variant,
                      write_results)

# (category, regex on the kernel name). Inductor names fused kernels after the ops they contain, so the
# head's softcap (tanh) and cross-entropy (log_softmax / nll) kernels are recognisable by name, as are the
# fused softcap_ce_fwd / _bwd Triton kernels.
CATEGORIES = (
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|nvjet|cutlass|sm90_xmma|cublas|wgmma|aten::(mm|addmm|bmm|baddbmm|matmul|linear)$"),
    ("head softcap + cross-entropy", r"softcap|tanh|log_softmax|_softmax|nll_loss|cross_entropy|logsumexp"),
    # instrumented_model's fused Triton updates (optim_triton); Polar Express's matmuls count as matmul
    ("optimizer elementwise", r"adam|cautious|nesterov|multi_tensor|foreach"),
    ("communication", r"nccl"),
    ("copy / transpose / memset", r"memcpy|memset|copy_kernel|transpose_tile"),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, rx in CATEGORIES:
        if re.search(rx, low):
            return cat
    return "other"


def profile_steps(args: argparse.Namespace, device: torch.device) -> dict:
    batch = args.batch_size or default_seqs(args.preset, 8)
    with single_rank_group(device):
        cfg, forward, _, opt, batches = trainer_variant(args.variant, args.preset, batch, device, args.seed, 4)

        def step(s: int) -> None:
            trainer_step(forward, opt, batches, s)[0].item()

        for s in range(args.warmup):
            step(s)
        sync(device)
        walls = []
        cuda = device.type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            if args.pipelined:  # each loss read after the next step is launched, as bench_throughput's loop
                a, b = (torch.cuda.Event(enable_timing=True) for _ in range(2)) if cuda else (None, None)
                if cuda:
                    a.record()
                pipelined_losses(lambda s: trainer_step(forward, opt, batches, s)[0],
                                 range(args.warmup, args.warmup + args.steps))
                if cuda:
                    b.record()
                    b.synchronize()
                    walls.append(a.elapsed_time(b) / args.steps)
            else:
                for s in range(args.warmup, args.warmup + args.steps):
                    if cuda:
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record()
                        step(s)
                        b.record()
                        b.synchronize()
                        walls.append(a.elapsed_time(b))
                    else:
                        step(s)
        kernels: dict[str, float] = {}
        spans: list[tuple[float, float, str]] = []  # (start µs, end µs, name) of every CUDA kernel
        launchers = launched_by(prof.events(), args.launchers, args.steps) if cuda else {}
        for ev in prof.events():
            # gpu_user_annotation: a record_function range drawn on the GPU's timeline over the kernels it
            # launched; counting it would count those kernels twice (transpose_copy: 1.4 ms per step)
            if getattr(ev, "is_user_annotation", False):
                continue
            if cuda and ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time > 0:
                kernels[ev.name] = kernels.get(ev.name, 0.0) + ev.device_time / 1e3  # µs -> ms
                spans.append((ev.time_range.start, ev.time_range.end, ev.name))
            elif not cuda and ev.name.startswith("aten::") and ev.self_cpu_time_total > 0:
                # CPU: an op's self time is its kernel (nested ops would count twice with total time)
                kernels[ev.name] = kernels.get(ev.name, 0.0) + ev.self_cpu_time_total / 1e3
    per_step = {k: v / args.steps for k, v in kernels.items()}
    by_cat: dict[str, float] = {}
    for name, ms in per_step.items():
        by_cat[category(name)] = by_cat.get(category(name), 0.0) + ms
    kernel_ms = sum(per_step.values())
    step_ms = statistics.median(walls) if walls else None
    return {
        "variant": args.variant, "pipelined": args.pipelined, "preset": cfg.name, "batch_size": batch, "tokens_per_step": batch * cfg.seq_len,
        "steps": args.steps, "step_device_ms": step_ms, "kernel_ms_per_step": kernel_ms,
        "idle_ms_per_step": step_ms - kernel_ms if step_ms is not None else None,
        "by_category_ms": dict(sorted(by_cat.items(), key=lambda kv: -kv[1])),
        "top_kernels": [{"name": n, "ms_per_step": ms, "category": category(n)}
                        for n, ms in sorted(per_step.items(), key=lambda kv: -kv[1])[:args.top]],
        "idle_before": idle_gaps(spans, args.steps, args.top),
        "launched_by": launchers,
        "loss_kernel_configs": _loss_kernel_configs(),  # what the fused loss kernels' autotuning chose
        # every kernel, so a category's contents can be read later without another GPU run
        "all_kernels_ms": {n[:200]: ms for n, ms in sorted(per_step.items(), key=lambda kv: -kv[1])},
    }


GAP_MIN_US = 2.0  # shorter gaps are the launch latency between back-to-back kernels


def idle_gaps(spans: list[tuple[float, float, str]], steps: int, top: int) -> list[dict]:
    """Where the device waits: every gap longer than GAP_MIN_US between consecutive kernels of the
    profiled steps, charged to the kernel that ends it (a kernel the host launched late, or that waited
    on something), as the `top` kernels by gap ms per step. The wait between two steps (host reads the
    loss, then launches) is charged to the next step's first kernel."""
    spans = sorted(spans)
    gaps: dict[str, list[float]] = {}
    busy_until = spans[0][1] if spans else 0.0
    for start, end, name in spans[1:]:
        gap = start - busy_until
        if gap > GAP_MIN_US:
            gaps.setdefault(name[:120], []).append(gap)
        busy_until = max(busy_until, end)
    rows = [{"next_kernel": n, "ms_per_step": sum(g) / 1e3 / steps, "gaps_per_step": len(g) / steps}
            for n, g in gaps.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])[:top]


def launched_by(events, pattern: str, steps: int, depth: int = 6) -> dict[str, dict[str, float]]:
    """Which host code launches the kernels whose name matches `pattern` (a regex): for each such kernel,
    the chain of CPU ops around its launch (innermost first, `depth` deep, " < " between them) and how
    many launches per step came from that chain. Why: a kernel like "Memcpy DtoD" says nothing about which
    tensor operation copies; the enclosing ops (e.g. aten::copy_ < aten::_to_copy < ...) do."""
    rx = re.compile(pattern)
    out: dict[str, dict[str, float]] = {}
    for ev in events:
        matching = [k.name for k in getattr(ev, "kernels", ()) if rx.search(k.name)]
        if not matching:
            continue
        chain, node = [], ev
        while node is not None and len(chain) < depth:
            chain.append(node.name)
            node = node.cpu_parent
        where = " < ".join(chain)
        for name in matching:
            per_chain = out.setdefault(name[:120], {})
            per_chain[where] = per_chain.get(where, 0.0) + 1.0 / steps
    return {k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in sorted(out.items())}


def _loss_kernel_configs() -> dict[str, str]:
    from instrumented_model.softcap_ce import tuned_configs

    return tuned_configs()


def markdown(result: dict) -> str:
    total = result["kernel_ms_per_step"] or 1.0
    lines = ["## Trainer step: device time by kernel category", "", provenance_line(result), "",
             f"{result['variant']} step{' (pipelined loop)' if result.get('pipelined') else ''}, {result['preset']} preset, {result['tokens_per_step']:,} tokens, "
             f"{result['steps']} profiled steps; kernel time {result['kernel_ms_per_step']:.1f} ms per step"
             + (f" of {result['step_device_ms']:.1f} ms between the step's CUDA events "
                f"({result['idle_ms_per_step']:.1f} ms with no kernel running)" if result["step_device_ms"] else "")
             + ".", ""]
    if result.get("loss_kernel_configs"):
        lines += ["Fused loss kernels, autotuned: " + "; ".join(f"{k} {v}" for k, v in result["loss_kernel_configs"].items()), ""]
    lines.append(md_table(["category", "ms per step", "% of kernel time"],
                          [[c, ms, 100 * ms / total] for c, ms in result["by_category_ms"].items()]))
    lines += ["", md_table(["kernel (first 90 characters)", "category", "ms per step"],
                           [[k["name"][:90].replace("|", "/"), k["category"], k["ms_per_step"]]
                            for k in result["top_kernels"]])]
    if result.get("idle_before"):
        lines += ["", "Device idle, charged to the kernel that ends each gap:", "",
                  md_table(["next kernel (first 90 characters)", "idle ms per step", "gaps per step"],
                           [[g["next_kernel"][:90].replace("|", "/"), g["ms_per_step"], g["gaps_per_step"]]
                            for g in result["idle_before"]])]
    for kernel, chains in (result.get("launched_by") or {}).items():
        lines += ["", f"Launched by (CPU ops around the launch, innermost first): {kernel[:90]}", "",
                  md_table(["host ops", "launches per step"],
                           [[c.replace("|", "/"), n] for c, n in list(chains.items())[:8]])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = trainer_arg_parser(__doc__, variant_default="compile on cuda", steps=3)
    ap.add_argument("--top", type=int, default=15, help="kernels listed by name")
    ap.add_argument("--pipelined", action="store_true",
                    help="read each loss one step late (bench_throughput's pipelined loop): no host wait between steps")
    ap.add_argument("--launchers", default=r"^Memcpy DtoD|^void at::native::elementwise_kernel",
                    help="regex of kernel names whose launching host ops are listed (CUDA only)")
    args, device = parse_trainer_args(ap, argv, "compile")
    result = {**header(device, "bench_step_kernels.py", argv), **profile_steps(args, device)}
    name = ("bench_step_kernels" + ("" if args.variant in ("compile", "eager") else f"-{args.variant}")
            + ("-pipelined" if args.pipelined else ""))
    write_results(args.out, name, result, markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
