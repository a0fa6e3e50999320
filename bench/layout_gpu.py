"""GPU proof for `commscope layout`: record both LM-head layouts and print the findings.

Usage (on a CUDA machine, e.g. one H200 or two for SM contention with NCCL):
    python bench/layout_gpu.py OUT_DIR [--nproc 1] [--preset speedrun] [--steps 6] [--profile 4:5]

For each head layout it runs
    commscope run --device cuda --nproc N --preset P --head-layout L --grad-accum 2 --steps S --profile A:B
into OUT_DIR/<layout>, then prints the machine (torch.cuda.get_device_name), the grouped layout findings with
kernel times, and the contention rows, and writes OUT_DIR/<layout>-layout.json (`commscope layout --json`).
Expected on an H200 (docs/layout.md): standard → "backward: lm_head grad accumulation" on
`elementwise_kernel<128, 2, …>` several× slower than an aligned fp32 copy of (50304, 768); transposed →
no lm_head finding in backward (the tied transposes run as Triton kernels, not aten ops).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--preset", default="speedrun")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--profile", default="4:5")
    a = ap.parse_args()

    import torch

    from commscope.analyze.layout_report import layout_report
    from commscope.analyze.layout_report import grouped, short_kernel
    from commscope.load import load_path

    print("machine:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device",
          "| torch", torch.__version__)
    for layout in ("standard", "transposed"):
        run = a.out / layout
        cmd = [sys.executable, "-m", "commscope", "run", "--device", "cuda", "--nproc", str(a.nproc),
               "--preset", a.preset, "--head-layout", layout, "--grad-accum", "2", "--steps", str(a.steps),
               "--profile", a.profile, "--out", str(run)]
        print("\n$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        rep = layout_report(load_path(run))
        (a.out / f"{layout}-layout.json").write_text(json.dumps(rep.to_json(), indent=1, default=str))
        print(f"== {layout}: {len(rep.findings)} finding executions, {len(rep.contention)} contended collectives")
        for _, r in grouped(rep.findings).iterrows():
            print(f"  {r['op']:<28} n={r['count']:<3} {r['duration_us'] / r['count']:9.1f} µs each "
                  f"{r['achieved_gbps'] or float('nan'):8.1f} GB/s (peak {r['peak_gbps'] or float('nan'):.0f}) "
                  f"{r['confidence']} {'deliberate ' if r['deliberate'] else ''}{r['where']} "
                  f"dims={r['dims'][:2]} strides={r['strides'][:2] if isinstance(r['strides'], list) else None} "
                  f"[{short_kernel(r['kernel'])}]")
        for _, c in rep.contention.head(5).iterrows():
            print(f"  contention: rank {c['rank']} step {c['step']} {c['label']} {c['duration_us']:.0f} µs vs "
                  f"{c['alone_us']:.0f} alone ×{c['inflation']:.2f} with {short_kernel(c['kernel'])} "
                  f"({c['kernel_blocks']} blocks > {c['capacity_blocks']})")


if __name__ == "__main__":
    main()
