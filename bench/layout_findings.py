"""Print the layout-mismatch and SM-contention numbers quoted in docs/layout.md.

Usage: python bench/layout_findings.py [RUN_OR_TRACES ...]
Default inputs: the 8×H100 modded-nanogpt traces in tests/data/modded-nanogpt-8xh100 (recorded on NVIDIA
H100 80GB HBM3, NCCL 2.28.9; the first two of the four profiled steps, see tests/data/README.md) and the
two CPU run directories in tests/data/layout (recorded on this project's 2-core CPU machine).
Inputs are only read (the fixture is copied to a temporary directory first).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from commscope.analyze.layout_report import layout_report
from commscope.analyze.layout_report import grouped, short_kernel
from commscope.load import load_path

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = [ROOT / "tests/data/modded-nanogpt-8xh100", ROOT / "tests/data/layout/standard",
            ROOT / "tests/data/layout/transposed"]


def show(path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copytree(path, copy)
        rep = layout_report(load_path(copy))
    print(f"\n== {path}  (device: {rep.device or 'CPU'})")
    for _, r in grouped(rep.findings).iterrows():
        per = r["duration_us"] / r["count"]
        print(f"  {r['op']:<32} n={r['count']:<3} {per:9.1f} µs each  {r['achieved_gbps'] or float('nan'):8.1f} GB/s"
              f"  peak {r['peak_gbps'] or float('nan'):8.1f}  saving {r['est_saving_us'] or float('nan'):9.1f} µs total"
              f"  {r['confidence']:<4} {'deliberate ' if r['deliberate'] else ''}{r['where']}"
              f"  [{short_kernel(r['kernel'])}]")
    c = rep.contention
    if len(c):
        print(f"  contention: {len(c)} collectives; worst: {c.iloc[0]['label']} rank {c.iloc[0]['rank']} "
              f"{c.iloc[0]['duration_us']:.0f} µs vs {c.iloc[0]['alone_us']:.0f} µs alone "
              f"(×{c.iloc[0]['inflation']:.2f}, overlap {c.iloc[0]['overlap_us']:.0f} µs) with "
              f"{short_kernel(c.iloc[0]['kernel'])} of {c.iloc[0]['kernel_blocks']} blocks "
              f"(co-resident max {c.iloc[0]['capacity_blocks']})")
        print(f"  partner kernels: {c['kernel'].map(short_kernel).value_counts().to_dict()}")
    u = rep.contention_unjudged
    if len(u):
        print(f"  not judged (unknown size): {len(u)} collectives on ranks {sorted(set(u['rank']))}, up to "
              f"{u['duration_us'].max():.0f} µs")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="*", type=Path, help="run directories or trace folders (default: the fixtures "
                    "docs/layout.md quotes)")
    for p in ap.parse_args().inputs or DEFAULTS:
        if not p.exists():
            print(f"layout_findings.py: {p} does not exist", file=sys.stderr)
            sys.exit(2)
        show(p)
