"""Tile sweep of the Triton transpose kernels: each candidate (BLOCK_M, BLOCK_N, num_warps) of each kernel
variant in `instrumented_model.kernels.TILES` timed side by side with the aligned copy / add (issue 8).

Why: with the default 64×128 tile, the 16-bit transpose_copy reached only 34–74 % of an aligned copy on an
H200 (bench_transpose.py), far from the ≥ 90 % target. Which tile is best depends on the variant: "b32"
(fp32 copy and add), "b16" (16-bit add) and "b16_pairs" (16-bit copy on 32-bit words). The sweep runs the
production kernels with each candidate written into `kernels.TILES[variant]` and keeps everything else fixed.

For each variant, candidate and source shape it times the ops that variant serves (median of `repeats`
after `warmup`, CUDA events), the aligned copy / add right before (so each ratio compares kernels measured
seconds apart), checks the result bit for bit against torch, and ranks candidates by their worst
percentage over shapes and ops. Variants take turns candidate by candidate, so a global `--budget-s`
(GPU calls are short) cuts all of them alike. Each list starts with the current default, so "before" is
always in the same run.

Run: python bench/bench_transpose_tiles.py --device cuda --out OUT [--budget-s 90]
     (CPU: --device cpu with TRITON_INTERPRET=1 checks the script and exactness on small shapes only)
"""
from __future__ import annotations

import time

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from bench_transpose import GPU_SHAPES, TARGET_PCT, triton_usable
from benchlib import arg_parser, header, md_table, provenance_line, setup_device, time_ms, write_results

CANDIDATES = {
    "b32": [(64, 128, 8), (128, 128, 8), (256, 64, 8), (64, 256, 8), (128, 64, 4), (32, 256, 8)],
    "b16": [(64, 128, 8), (256, 64, 8), (128, 128, 8), (64, 256, 8), (128, 256, 8), (256, 128, 8)],
    "b16_pairs": [(64, 64, 8), (32, 128, 8), (64, 128, 8), (32, 64, 4), (128, 64, 8), (16, 128, 4)],
}
CPU_SHAPES = [(66, 130), (130, 66)]  # even (every variant applies) and ragged in both tile dimensions
VARIANT_DTYPE = {"b32": torch.float32, "b16": torch.bfloat16, "b16_pairs": torch.bfloat16}
VARIANT_OPS = {"b32": ("copy", "add"), "b16": ("add",), "b16_pairs": ("copy",)}


def measure(variant: str, cfg: tuple[int, int, int], shape: tuple[int, int], device: torch.device,
            warmup: int, repeats: int) -> dict:
    from instrumented_model import kernels

    saved = kernels.TILES[variant]
    kernels.TILES[variant] = cfg
    try:
        dtype = VARIANT_DTYPE[variant]
        m, n = shape
        g = torch.Generator(device=device).manual_seed(0)
        src = torch.randn(m, n, generator=g, device=device).to(dtype)
        base = torch.randn(n, m, generator=g, device=device).to(dtype)
        dst, aligned = base.clone(), torch.empty_like(src)
        ops = {"copy": (kernels.transpose_copy, aligned.copy_, 2), "add": (kernels.transpose_add, aligned.add_, 3)}
        row: dict = {"variant": variant, "tile": list(cfg), "shape": list(shape),
                     "dtype": str(dtype).removeprefix("torch."), "exact": True}
        for op in VARIANT_OPS[variant]:
            fn, aligned_fn, passes = ops[op]
            assert kernels.tile_key(dst, src, add=op == "add") == variant, (variant, op, shape)
            t_ali = time_ms(lambda: aligned_fn(src), device, warmup=warmup, repeats=repeats)["median_ms"]
            t_tri = time_ms(lambda: fn(dst, src, use_triton=True), device, warmup=warmup, repeats=repeats)["median_ms"]
            row[op] = {"ms": t_tri, "aligned_ms": t_ali, "gbps": passes * src.numel() * dtype.itemsize / (t_tri * 1e-3) / 1e9,
                       "pct_of_aligned": 100.0 * t_ali / t_tri}
            got, want = base.clone(), base.clone()
            fn(got, src, use_triton=True)
            (want.copy_ if op == "copy" else want.add_)(src.T)
            row["exact"] &= bool(torch.equal(got, want))
        return row
    finally:
        kernels.TILES[variant] = saved


def rank(rows: list[dict]) -> dict[str, list[dict]]:
    """Per variant: candidates with every shape measured and exact, best worst-case percentage first."""
    out: dict[str, list[dict]] = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        by_cfg: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["variant"] == variant:
                by_cfg.setdefault(tuple(r["tile"]), []).append(r)
        shapes = max(len(v) for v in by_cfg.values())
        scored = []
        for cfg, rs in by_cfg.items():
            if len(rs) < shapes or not all(r["exact"] for r in rs):
                continue
            pct = {op: [r[op]["pct_of_aligned"] for r in rs] for op in VARIANT_OPS[variant]}
            scored.append({"tile": list(cfg), "worst_pct": min(min(v) for v in pct.values()),
                           **{f"{op}_pct": v for op, v in pct.items()}})
        out[variant] = sorted(scored, key=lambda s: -s["worst_pct"])
    return out


def markdown(result: dict) -> str:
    lines = ["## Transpose tile sweep", "", provenance_line(result), ""]
    def cells(r, op):
        return [r[op]["ms"], f"{r[op]['pct_of_aligned']:.1f}"] if op in r else ["", ""]

    rows = [[r["variant"], r["dtype"], f"{tuple(r['shape'])}", "×".join(map(str, r["tile"][:2])) + f" w{r['tile'][2]}",
             *cells(r, "copy"), *cells(r, "add"), "yes" if r["exact"] else "NO"] for r in result["rows"]]
    lines.append(md_table(["variant", "dtype", "src shape", "tile (M×N, warps)", "copy ms", "copy % aligned",
                           "add ms", "add % aligned", "bit-exact"], rows))
    for variant, ranked in result["ranking"].items():
        if ranked:
            b = ranked[0]
            lines += ["", f"{variant}: best tile {tuple(b['tile'])}, worst case {b['worst_pct']:.1f} % of "
                          f"aligned (target {TARGET_PCT:.0f} %)."]
    if result["stopped_early"]:
        lines += ["", f"Stopped after {result['stopped_early']} s budget: later candidates not measured."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--budget-s", type=float, default=90.0)
    ap.add_argument("--candidates", type=int, default=None, help="only the first N candidates")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    ok, why = triton_usable(device)
    if not ok:
        raise SystemExit(f"bench_transpose_tiles: {why}")
    cuda = device.type == "cuda"
    warmup, repeats = (5, 30) if cuda else (0, 1)
    result = header(device, "bench_transpose_tiles.py", argv)
    result["rows"], result["stopped_early"] = [], None
    deadline = time.monotonic() + args.budget_s
    rounds = max(len(c) for c in CANDIDATES.values())
    for i in range(min(rounds, args.candidates or rounds)):
        if time.monotonic() > deadline:
            result["stopped_early"] = args.budget_s
            break
        for variant, cfgs in CANDIDATES.items():
            for shape in (GPU_SHAPES if cuda else CPU_SHAPES) if i < len(cfgs) else ():
                result["rows"].append(measure(variant, cfgs[i], shape, device, warmup, repeats))
        result["ranking"] = rank(result["rows"])
        write_results(args.out, "bench_transpose_tiles", result, markdown(result))  # after each: a killed call keeps them
    return result


if __name__ == "__main__":
    main()
