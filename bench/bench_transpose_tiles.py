"""Tile sweep of the Triton transpose kernels: each candidate (BLOCK_M, BLOCK_N, num_warps) of
`instrumented_model.kernels.TILES` timed side by side with the aligned copy / add, per dtype.

Why: which tile is best depends on the element size (bytes per contiguous segment on each side of the
transpose), so the sweep runs the production kernel with each candidate written into `kernels.TILES` and
keeps everything else fixed. Times are device-only (benchlib.time_ms device_only): a Triton launch costs
the host ~25–90 µs, longer than a bf16 (768, 50304) copy runs (~44 µs), so back-to-back CUDA events would
time the launch rate and make every tile look alike.

For each dtype, candidate and source shape it times triton copy and add (median of `repeats` after
`warmup`, CUDA events behind a spin kernel), the aligned copy / add right before (so each ratio compares kernels measured
seconds apart), checks the result bit for bit against torch, and ranks candidates by their worst
percentage over shapes and ops. A global `--budget-s` stops starting new candidates (GPU calls are short).
The production tiles (kernels.TILES) are measured first, so "before" is always in the same run.

Run: python bench/bench_transpose_tiles.py --device cuda --out OUT [--budget-s 90]
     (CPU: --device cpu with TRITON_INTERPRET=1 checks the script and exactness on small shapes only)
"""
from __future__ import annotations

import time

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from bench_transpose import CPU_SHAPES, DTYPES, GPU_SHAPES, TARGET_PCT, require_triton
from benchlib import arg_parser, header, md_table, provenance_line, time_ms, write_results

CANDIDATES = [(64, 128, 8), (128, 128, 8), (64, 256, 8), (128, 64, 4), (32, 128, 4), (64, 64, 4),
              (128, 256, 8), (256, 64, 8), (32, 256, 8), (128, 128, 4)]


def candidates() -> list[tuple[int, int, int]]:
    """The production tiles (kernels.TILES) first, so "before" is measured in the same run, then CANDIDATES."""
    from instrumented_model import kernels

    return list(dict.fromkeys([*kernels.TILES.values(), *CANDIDATES]))


def measure(cfg: tuple[int, int, int], shape: tuple[int, int], dtype: torch.dtype, device: torch.device,
            warmup: int, repeats: int) -> dict:
    from instrumented_model import kernels

    es = dtype.itemsize
    saved = kernels.TILES[es]
    kernels.TILES[es] = cfg
    try:
        m, n = shape
        g = torch.Generator(device=device).manual_seed(0)
        src = torch.randn(m, n, generator=g, device=device).to(dtype)
        base = torch.randn(n, m, generator=g, device=device).to(dtype)
        dst, aligned = base.clone(), torch.empty_like(src)
        nbytes = {"copy": 2 * src.numel() * es, "add": 3 * src.numel() * es}
        row: dict = {"tile": list(cfg), "shape": list(shape), "dtype": str(dtype).removeprefix("torch.")}
        for op, tri, ali in (("copy", lambda: kernels.transpose_copy(dst, src, use_triton=True),
                              lambda: aligned.copy_(src)),
                             ("add", lambda: kernels.transpose_add(dst, src, use_triton=True),
                              lambda: aligned.add_(src))):
            t_ali = time_ms(ali, device, warmup=warmup, repeats=repeats, device_only=True)["median_ms"]
            t_tri = time_ms(tri, device, warmup=warmup, repeats=repeats, device_only=True)["median_ms"]
            row[op] = {"ms": t_tri, "aligned_ms": t_ali, "gbps": nbytes[op] / (t_tri * 1e-3) / 1e9,
                       "pct_of_aligned": 100.0 * t_ali / t_tri}
        want_c, got_c = torch.empty_like(base).copy_(src.T), torch.empty_like(base)
        kernels.transpose_copy(got_c, src, use_triton=True)
        want_a, got_a = base.clone().add_(src.T), base.clone()
        kernels.transpose_add(got_a, src, use_triton=True)
        row["exact"] = bool(torch.equal(want_c, got_c) and torch.equal(want_a, got_a))
        return row
    finally:
        kernels.TILES[es] = saved


def rank(rows: list[dict]) -> dict[str, list[dict]]:
    """Per dtype: candidates with every shape measured and exact, best worst-case percentage first."""
    out: dict[str, list[dict]] = {}
    for dt in dict.fromkeys(r["dtype"] for r in rows):
        by_cfg: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["dtype"] == dt:
                by_cfg.setdefault(tuple(r["tile"]), []).append(r)
        shapes = max(len(v) for v in by_cfg.values())
        scored = []
        for cfg, rs in by_cfg.items():
            if len(rs) < shapes or not all(r["exact"] for r in rs):
                continue
            pcts = [r[op]["pct_of_aligned"] for r in rs for op in ("copy", "add")]
            scored.append({"tile": list(cfg), "worst_pct": min(pcts),
                           "copy_pct": [r["copy"]["pct_of_aligned"] for r in rs],
                           "add_pct": [r["add"]["pct_of_aligned"] for r in rs]})
        out[dt] = sorted(scored, key=lambda s: -s["worst_pct"])
    return out


def markdown(result: dict) -> str:
    lines = ["## Transpose tile sweep", "", provenance_line(result), ""]
    rows = [[r["dtype"], f"{tuple(r['shape'])}", "×".join(map(str, r["tile"][:2])) + f" w{r['tile'][2]}",
             r["copy"]["ms"], f"{r['copy']['pct_of_aligned']:.1f}", r["add"]["ms"],
             f"{r['add']['pct_of_aligned']:.1f}", "yes" if r["exact"] else "NO"] for r in result["rows"]]
    lines.append(md_table(["dtype", "src shape", "tile (M×N, warps)", "copy ms", "copy % aligned", "add ms",
                           "add % aligned", "bit-exact"], rows))
    for dt, ranked in result["ranking"].items():
        if ranked:
            b = ranked[0]
            lines += ["", f"{dt}: best tile {tuple(b['tile'])}, worst case {b['worst_pct']:.1f} % of aligned "
                          f"(target {TARGET_PCT:.0f} %)."]
    if result["stopped_early"]:
        lines += ["", f"Stopped after {result['stopped_early']} s budget: later candidates not measured."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--budget-s", type=float, default=90.0)
    ap.add_argument("--candidates", type=int, default=None, help="only the first N candidates")
    args = ap.parse_args(argv)
    device = require_triton(args.device, "bench_transpose_tiles")
    cuda = device.type == "cuda"
    warmup, repeats = (5, 30) if cuda else (0, 1)
    result = header(device, "bench_transpose_tiles.py", argv)
    result["rows"], result["stopped_early"] = [], None
    deadline = time.monotonic() + args.budget_s
    for cfg in candidates()[: args.candidates]:
        if time.monotonic() > deadline:
            result["stopped_early"] = args.budget_s
            break
        for dtype in DTYPES.values():
            for shape in GPU_SHAPES if cuda else CPU_SHAPES:
                result["rows"].append(measure(cfg, shape, dtype, device, warmup, repeats))
        result["ranking"] = rank(result["rows"])
        write_results(args.out, "bench_transpose_tiles", result, markdown(result))  # after each: a killed run keeps them
    return result


if __name__ == "__main__":
    main()
