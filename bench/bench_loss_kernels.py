"""The fused loss kernels on the speedrun shape: the FP8 head's e5m2 backward
(commscope::softcap_ce_backward_e5m2) against an aligned copy moving the same bytes, the sweep that chose
its transpose tile, and the hardware tanh (FAST_TANH) against the exact one, in time and in accuracy.

Why the e5m2 backward: as one tiled kernel it takes 11.8 ms per step, ~5× what its traffic needs. It reads
z (N, V) bf16 once and writes two e5m2 copies of the gradient, (N, V) and (V, N): 2·N·V bytes in, 2·N·V
out, exactly what an aligned bf16 copy of z moves, so "% of copy" says how close it gets to bandwidth.
One tiled kernel writing both layouts from registers takes 10.1 ms at best over 24 tile ×
transpose-element-size choices (docs/benchmarks.md), so the op runs two passes: the row kernel writes
dz8, then the 1-byte tiled transpose (instrumented_model.kernels) writes dz8t.

Why the tanh: the exact soft cap costs three special-function-unit operations per logit, the hardware
tanh one (softcap_ce_triton). Both are timed with the same launch configuration, and their loss and
gradients are compared with the fp32 torch reference on the same z.

What it times (device only, CUDA events behind a spin kernel, median of `repeats`):
- the e5m2 op (autotuned row kernel + transpose), and the transpose alone (the production tile);
- every candidate tile of the 1-byte transpose (SPLIT_TRANSPOSE_TILES, written into kernels.TILES);
- forward, bf16 backward and e5m2 backward with the exact and with the hardware tanh;
- references: the aligned copy and torch's own transpose of the e5m2 bytes (`copy_(src.T)`).
Every result is checked byte for byte (dz8t is dz8 transposed; each transpose tile writes the same bytes).

Run: python bench/bench_loss_kernels.py --device cuda --out OUT
     (CPU: TRITON_INTERPRET=1 python bench/bench_loss_kernels.py --device cpu --out OUT checks it on a small
     shape; the interpreter has no hardware tanh, so both tanh rows run the exact one there)
"""
from __future__ import annotations

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from bench_transpose import require_triton
from benchlib import arg_parser, header, md_table, provenance_line, time_ms, write_results

GPU_SHAPE = (24 * 2048, 50304)  # one speedrun step's tokens × vocabulary
CPU_SHAPE = (96, 300)
# (BLOCK_M, BLOCK_N, num_warps) for the 1-byte transpose: a dst row segment is BLOCK_M bytes, so wide tiles
SPLIT_TRANSPOSE_TILES = [(128, 128, 4), (128, 128, 8), (256, 128, 8), (128, 256, 8), (256, 256, 8), (64, 256, 4),
                         (256, 64, 4), (512, 64, 8)]


def main(argv: list[str] | None = None) -> dict:
    from instrumented_model import kernels
    from instrumented_model import softcap_ce as sc

    ap = arg_parser(__doc__)
    args = ap.parse_args(argv)
    device = require_triton(args.device, "bench_loss_kernels")
    cuda = device.type == "cuda"
    warmup, repeats = (3, 15) if cuda else (0, 1)
    n, v = GPU_SHAPE if cuda else CPU_SHAPE
    g = torch.Generator(device=device).manual_seed(0)
    z = (torch.randn(n, v, generator=g, device=device) * 4).to(torch.bfloat16)  # logits spread as in training
    targets = torch.randint(0, v, (n,), generator=g, device=device)
    cap, grad_loss = 15.0, torch.tensor(1.0, device=device)
    _loss, lse = torch.ops.commscope.softcap_ce(z, targets, cap)
    result = header(device, "bench_loss_kernels.py", argv)
    result.update(shape=[n, v], bytes_moved=4 * n * v, transpose_tiles=[])

    def timed(fn) -> float:
        return time_ms(fn, device, warmup=warmup, repeats=repeats, device_only=cuda)["median_ms"]

    result["copy_ms"] = timed(lambda dst=torch.empty_like(z): dst.copy_(z))  # dst freed with the lambda
    result["tanh"] = compare_tanh(sc, z, targets, cap, grad_loss, timed)
    result["e5m2_rounding"] = compare_e5m2_rounding(sc, z, targets, lse, cap, grad_loss, timed)
    result["bf16_bwd_ms"] = timed(lambda: torch.ops.commscope.softcap_ce_backward(z, targets, lse, grad_loss, cap))
    result["op_ms"] = timed(lambda: torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, cap))
    dz8, dz8t, _scale = torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, cap)
    want = dz8.view(torch.uint8).T
    result["op_exact"] = bool(torch.equal(dz8t.view(torch.uint8), want))
    result["loss_kernel_configs"] = sc.tuned_configs()
    result["production_tile"] = list(kernels.TILES[1])
    result["transpose_ms"] = timed(lambda: kernels.transpose_copy(dz8t, dz8, use_triton=True))
    result["torch_transpose_ms"] = timed(lambda: dz8t.view(torch.uint8).copy_(dz8.view(torch.uint8).T))
    saved = kernels.TILES[1]
    try:
        for tile in SPLIT_TRANSPOSE_TILES:
            kernels.TILES[1] = tile
            dz8t.zero_()
            ms = timed(lambda: kernels.transpose_copy(dz8t, dz8, use_triton=True))
            result["transpose_tiles"].append({"tile": list(tile), "ms": ms,
                                              "exact": bool(torch.equal(dz8t.view(torch.uint8), want))})
    finally:
        kernels.TILES[1] = saved
    write_results(args.out, "bench_loss_kernels", result, markdown(result))
    return result


def compare_e5m2_rounding(sc, z, targets, lse, cap, grad_loss, timed) -> dict:
    """The e5m2 op with the hand rounding (through fp16) and with the hardware conversion: times, and the
    fraction of gradient bytes where they differ (fp16 double rounding on near-ties)."""
    out: dict = {}
    saved = sc.hw_e5m2_rounding
    try:
        for name, hw in (("by_hand", False), ("hardware", True)):
            sc.hw_e5m2_rounding = lambda hw=hw: hw and saved()
            out[name] = {"used": sc.hw_e5m2_rounding(), "ms": timed(
                lambda: torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, cap))}
            out[name]["dz8"] = torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, cap)[0]
    finally:
        sc.hw_e5m2_rounding = saved
    a, b = out["by_hand"].pop("dz8").view(torch.uint8), out["hardware"].pop("dz8").view(torch.uint8)
    out["bytes_differing"] = ((a != b).sum() / a.numel()).item()
    return out


def compare_tanh(sc, z, targets, cap, grad_loss, timed) -> dict:
    """Times and errors of the three loss kernels with the exact and with the hardware tanh (the same
    autotuned launch configuration: the tuner does not key on FAST_TANH), against the fp32 torch loss."""
    import torch.nn.functional as F

    from instrumented_model.triton_jit import interpret_mode

    ref_loss = F.cross_entropy(sc.softcap(z, cap), targets)  # fp32 logits: ~10 GB, freed below
    out: dict = {"ref_loss": ref_loss.item()}
    saved = sc.fast_tanh
    try:
        for name, fast in (("exact", False), ("fast", True)):
            sc.fast_tanh = lambda t, fast=fast: fast and not interpret_mode()
            loss, lse = torch.ops.commscope.softcap_ce(z, targets, cap)
            dz = torch.ops.commscope.softcap_ce_backward(z, targets, lse, grad_loss, cap)
            out[name] = {
                "hardware_tanh": sc.fast_tanh(z),
                "loss": loss.item(),
                "fwd_ms": timed(lambda: torch.ops.commscope.softcap_ce(z, targets, cap)),
                "bwd_bf16_ms": timed(lambda: torch.ops.commscope.softcap_ce_backward(z, targets, lse, grad_loss, cap)),
                "bwd_e5m2_ms": timed(lambda: torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss,
                                                                                       cap)),
            }
            out[name]["dz"] = dz
    finally:
        sc.fast_tanh = saved
    exact_dz, fast_dz = out["exact"].pop("dz"), out["fast"].pop("dz")
    diff = (fast_dz.float() - exact_dz.float()).abs()
    out["loss_diff_fast_vs_exact"] = out["fast"]["loss"] - out["exact"]["loss"]
    out["loss_diff_exact_vs_fp32_torch"] = out["exact"]["loss"] - out["ref_loss"]
    out["dz_max_abs_diff_over_max_abs"] = (diff.max() / exact_dz.float().abs().max()).item()
    out["dz_rel_l2_diff"] = (diff.float().norm() / exact_dz.float().norm()).item()
    return out


def markdown(result: dict) -> str:
    n, v = result["shape"]

    def pct(ms: float) -> str:
        return f"{100 * result['copy_ms'] / ms:.1f}"

    rows = [["aligned bf16 copy of z (same bytes)", result["copy_ms"], "100"],
            ["bf16 backward (reads z, writes dz: the same bytes)", result["bf16_bwd_ms"], pct(result["bf16_bwd_ms"])],
            ["**e5m2 backward op** (row kernel + transpose: 5/4 of the bytes)", result["op_ms"], pct(result["op_ms"])],
            [f"its transpose alone (tile {tuple(result['production_tile'])})", result["transpose_ms"], ""],
            ["torch's transpose of the e5m2 bytes", result["torch_transpose_ms"], ""]]
    rows += [[f"transpose tile {t['tile'][0]}×{t['tile'][1]} w{t['tile'][2]}" + ("" if t["exact"] else " (WRONG BYTES)"),
              t["ms"], ""] for t in result["transpose_tiles"]]
    t = result["tanh"]
    tanh_rows = [[label, t["exact"][key], t["fast"][key], t["exact"][key] / t["fast"][key]]
                 for label, key in (("forward", "fwd_ms"), ("bf16 backward", "bwd_bf16_ms"),
                                    ("e5m2 backward op", "bwd_e5m2_ms"))]
    tanh_text = (f"Hardware tanh used: {t['fast']['hardware_tanh']}. Loss: fp32 torch {t['ref_loss']:.6f}, exact kernel "
                 f"{t['loss_diff_exact_vs_fp32_torch']:+.2e} from it, hardware tanh {t['loss_diff_fast_vs_exact']:+.2e} "
                 f"from the exact kernel; bf16 dz: max |Δ| / max |dz| = {t['dz_max_abs_diff_over_max_abs']:.2e}, "
                 f"relative L2 {t['dz_rel_l2_diff']:.2e}.")
    r = result["e5m2_rounding"]
    rounding_text = (f"e5m2 rounding, the op: by hand (through fp16) {r['by_hand']['ms']:.3f} ms, hardware conversion "
                     f"{r['hardware']['ms']:.3f} ms (used: {r['hardware']['used']}); bytes differing "
                     f"{100 * r['bytes_differing']:.4f} %.")
    return "\n".join(["## Loss kernels: exact vs hardware tanh", "", provenance_line(result), "",
                      md_table(["kernel", "exact tanh ms", "hardware tanh ms", "ratio"], tanh_rows), "", tanh_text, "",
                      rounding_text, "",
                      "## FP8 head loss backward (softcap_ce_backward_e5m2)", "",
                      f"Shape ({n}, {v}); {result['bytes_moved'] / 1e9:.2f} GB moved; dz8t equals dz8 transposed: "
                      f"{'yes' if result['op_exact'] else 'NO'}; autotuned: {result['loss_kernel_configs']}.", "",
                      md_table(["what", "ms", "% of copy bandwidth"], rows)])


if __name__ == "__main__":
    main()
