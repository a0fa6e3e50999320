"""The FP8 head's loss backward (softcap_ce_bwd_e5m2) on the speedrun shape: every launch choice timed side
by side with an aligned copy moving the same bytes (issue 8).

Why: session 13 measured this kernel at 11.8 ms per step, ~5× what its traffic needs. It reads z (N, V)
bf16 once and writes two e5m2 copies of the gradient, (N, V) and (V, N): 2·N·V bytes in, 2·N·V out,
exactly what an aligned bf16 copy of z moves, so "% of copy" is how close a choice gets to bandwidth.

What it times (device only, CUDA events behind a spin kernel, median of `repeats`):
- fused: one kernel writing both layouts, for every tile of softcap_ce.E5M2_TILES and every element size
  the tile is transposed in (T_BYTES 1, 2, 4);
- split: the kernel writing dz8 only (T_BYTES 0, per tile), then a separate tiled transpose of the e5m2
  bytes (instrumented_model.transpose_triton, per tile in SPLIT_TRANSPOSE_TILES); the best row tile plus
  the best transpose tile is the split's time;
- references: the aligned copy, the bf16 backward (softcap_ce_bwd, autotuned, writes dz once) and torch's
  own transpose of the e5m2 bytes (`copy_(src.T)`).
Every fused and split result is checked byte for byte against the first fused one.

Run: python bench/bench_e5m2_bwd.py --device cuda --out OUT
     (CPU: TRITON_INTERPRET=1 python bench/bench_e5m2_bwd.py --device cpu --out OUT checks it on a small shape)
"""
from __future__ import annotations

import time

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from bench_transpose import triton_usable
from benchlib import arg_parser, header, md_table, provenance_line, setup_device, time_ms, write_results

GPU_SHAPE = (24 * 2048, 50304)  # one speedrun step's tokens × vocabulary
CPU_SHAPE = (96, 300)
# (BLOCK_M, BLOCK_N, num_warps) for the 1-byte transpose: a dst row segment is BLOCK_M bytes, so wide tiles
SPLIT_TRANSPOSE_TILES = [(128, 128, 4), (128, 128, 8), (256, 128, 8), (128, 256, 8), (256, 256, 8), (64, 256, 4),
                         (256, 64, 4), (512, 64, 8)]
SPLIT_ROW_TILES = [(64, 128, 4), (32, 256, 4), (128, 128, 8), (16, 512, 4)]


def main(argv: list[str] | None = None) -> dict:
    from instrumented_model import softcap_ce as sc
    from instrumented_model.triton_jit import cdiv, kernel

    ap = arg_parser(__doc__)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new measurements after this")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    ok, why = triton_usable(device)
    if not ok:
        raise SystemExit(f"bench_e5m2_bwd: {why}")
    cuda = device.type == "cuda"
    warmup, repeats = (3, 15) if cuda else (0, 1)
    n, v = GPU_SHAPE if cuda else CPU_SHAPE
    g = torch.Generator(device=device).manual_seed(0)
    z = (torch.randn(n, v, generator=g, device=device) * 4).to(torch.bfloat16)  # logits spread as in training
    targets = torch.randint(0, v, (n,), generator=g, device=device)
    cap = 15.0
    _loss, lse = torch.ops.commscope.softcap_ce(z, targets, cap)
    dz8 = torch.empty((n, v), device=device, dtype=torch.float8_e5m2)
    dz8t = torch.empty((v, n), device=device, dtype=torch.float8_e5m2)
    body = kernel(sc._KERNELS, "softcap_ce_bwd_e5m2")
    transpose = kernel("instrumented_model.transpose_triton", "transpose_tile")
    result = header(device, "bench_e5m2_bwd.py", argv)
    result.update(shape=[n, v], bytes_moved=4 * n * v, fused=[], split_rows=[], split_transposes=[])
    deadline = time.monotonic() + args.budget_s

    def timed(fn) -> float:
        return time_ms(fn, device, warmup=warmup, repeats=repeats, device_only=cuda)["median_ms"]

    def gbps(ms: float) -> float:
        return 4 * n * v / (ms * 1e-3) / 1e9

    def launch(r: int, c: int, w: int, t_bytes: int) -> None:
        body[(cdiv(n, r) * cdiv(v, c),)](z, targets, lse, dz8, dz8t, n, v, z.stride(0), cap, 2.0 / cap,
                                         sc.IGNORE_INDEX, sc.FP8_GAIN, BLOCK_R=r, BLOCK_C=c, T_BYTES=t_bytes,
                                         num_warps=w)

    def transpose_bytes(m_: int, n_: int, w: int) -> None:
        transpose[(cdiv(n, m_) * cdiv(v, n_),)](dz8.view(torch.uint8), dz8t.view(torch.uint8), n, v, cdiv(v, n_),
                                                v, 1, n, 1, ADD=False, DST_BF16=False, BLOCK_M=m_, BLOCK_N=n_,
                                                num_warps=w)

    copy_dst = torch.empty_like(z)
    result["copy_ms"] = timed(lambda: copy_dst.copy_(z))
    del copy_dst
    launch(64, 128, 4, 1)
    want = (dz8.view(torch.uint8).clone(), dz8t.view(torch.uint8).clone())

    def exact() -> bool:
        return bool(torch.equal(dz8.view(torch.uint8), want[0]) and torch.equal(dz8t.view(torch.uint8), want[1]))

    def save() -> None:
        result["best"] = summarize(result)
        write_results(args.out, "bench_e5m2_bwd", result, markdown(result))  # after each group: a killed call keeps them

    dz = torch.empty_like(z)
    scale = torch.ones(1, device=device)
    bwd = kernel(sc._KERNELS, "softcap_ce_bwd")
    blk, warps = sc.ROW_DEFAULT
    result["bf16_bwd_ms"] = timed(lambda: bwd[(n,)](z, targets, lse, scale, dz, v, z.stride(0), dz.stride(0), cap,
                                                    2.0 / cap, sc.IGNORE_INDEX, BLOCK=blk, num_warps=warps))
    del dz
    dz8t.zero_()
    result["torch_transpose_ms"] = timed(lambda: dz8t.view(torch.uint8).copy_(dz8.view(torch.uint8).T))
    save()
    for r, c, w in sc.E5M2_TILES:
        for t_bytes in sc.E5M2_T_BYTES:
            if time.monotonic() > deadline:
                break
            dz8t.zero_()
            ms = timed(lambda: launch(r, c, w, t_bytes))
            result["fused"].append({"tile": [r, c, w], "t_bytes": t_bytes, "ms": ms, "gbps": gbps(ms),
                                    "exact": exact()})
        save()
    for r, c, w in SPLIT_ROW_TILES:
        if time.monotonic() > deadline:
            break
        ms = timed(lambda: launch(r, c, w, 0))
        result["split_rows"].append({"tile": [r, c, w], "ms": ms,
                                     "exact": bool(torch.equal(dz8.view(torch.uint8), want[0]))})
    for m_, n_, w in SPLIT_TRANSPOSE_TILES:
        if time.monotonic() > deadline:
            break
        dz8t.zero_()
        ms = timed(lambda: transpose_bytes(m_, n_, w))
        result["split_transposes"].append({"tile": [m_, n_, w], "ms": ms, "exact": exact()})
    save()
    return result


def summarize(result: dict) -> dict:
    """The best exact fused choice and the best exact split (row tile + transpose tile), with % of copy."""
    out: dict = {}
    fused = [f for f in result["fused"] if f["exact"]]
    if fused:
        b = min(fused, key=lambda f: f["ms"])
        out["fused"] = {**b, "pct_of_copy": 100 * result["copy_ms"] / b["ms"]}
    rows = [r for r in result["split_rows"] if r["exact"]]
    trs = [t for t in result["split_transposes"] if t["exact"]]
    if rows and trs:
        br, bt = min(rows, key=lambda r: r["ms"]), min(trs, key=lambda t: t["ms"])
        ms = br["ms"] + bt["ms"]
        out["split"] = {"row_tile": br["tile"], "transpose_tile": bt["tile"], "ms": ms,
                        "pct_of_copy": 100 * result["copy_ms"] / ms}
    return out


def markdown(result: dict) -> str:
    n, v = result["shape"]
    lines = ["## FP8 head loss backward (softcap_ce_bwd_e5m2)", "", provenance_line(result), "",
             f"Shape ({n}, {v}); {result['bytes_moved'] / 1e9:.2f} GB moved. Aligned bf16 copy of z (same bytes): "
             f"{result['copy_ms']:.3f} ms; bf16 backward (dz once): {result.get('bf16_bwd_ms', float('nan')):.3f} ms; "
             f"torch's transpose of the e5m2 bytes: {result.get('torch_transpose_ms', float('nan')):.3f} ms.", ""]
    rows = [["fused", "×".join(map(str, f["tile"][:2])) + f" w{f['tile'][2]}", f["t_bytes"], f["ms"],
             f"{100 * result['copy_ms'] / f['ms']:.1f}", "yes" if f["exact"] else "NO"] for f in result["fused"]]
    rows += [["split: dz8 only", "×".join(map(str, r["tile"][:2])) + f" w{r['tile'][2]}", "", r["ms"], "",
              "yes" if r["exact"] else "NO"] for r in result["split_rows"]]
    rows += [["split: transpose", "×".join(map(str, t["tile"][:2])) + f" w{t['tile'][2]}", "", t["ms"], "",
              "yes" if t["exact"] else "NO"] for t in result["split_transposes"]]
    lines.append(md_table(["strategy", "tile (R×C, warps)", "T_BYTES", "ms", "% of copy", "bytes equal"], rows))
    for name, b in result.get("best", {}).items():
        lines += ["", f"best {name}: {b['ms']:.3f} ms, {b['pct_of_copy']:.1f} % of copy ({b})."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
