"""Polar Express on the speedrun banks: the normalization pass (torch.div with a broadcast divisor vs the
Triton `divide_per_matrix` kernel), the Gram product (cuBLAS bmm vs the upper-triangle `symmetric_gram`
kernel) and the whole orthogonalization with either, per bank, device time.

Why: the normalization X/‖X‖_F reads each bank in fp32 and writes it in bf16; ATen runs a division by a
(k, 1, 1) divisor in its non-vectorized elementwise kernel (0.41 ms per step on an H200),
while a flat Triton kernel moves the same bytes at copy speed. This times both on the banks' real matrix
views, side by side in one process, next to the whole polar_express, so the saving is a measured ratio.

Shapes: `make_config(preset)`'s attn bank viewed as (40, D, D) and mlp bank as (24, 4D, D), inputs fp32 as
the Nesterov blend that reaches polar_express; iteration dtype bf16 on CUDA, fp32 on CPU
(normuon.polar_dtype).

Run: python bench/bench_polar_express.py --device cuda --out OUT   (CPU: --device cpu, tiny preset)
"""
from __future__ import annotations

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import arg_parser, header, md_table, provenance_line, setup_device, time_ms, write_results


def bank_shapes(preset: str) -> dict[str, tuple[int, int, int]]:
    from instrumented_model.config import make_config
    from instrumented_model.param_table import PARAM_TABLE

    cfg = make_config(preset, 1)
    D = cfg.model_dim
    banks = {"attn": (cfg.num_attn_layers, 4 * D, D), "mlp": (cfg.mlp_layers_padded, 2, 4 * D, D)}
    return {label: PARAM_TABLE[label].matrix_view(shape) for label, shape in banks.items()}


def run(device: torch.device, preset: str, warmup: int, repeats: int) -> list[dict]:
    from instrumented_model import normuon

    dtype = normuon.polar_dtype(device)
    fused = device.type == "cuda" or None  # the Triton kernel needs a GPU (or TRITON_INTERPRET=1)
    rows = []
    for label, shape in bank_shapes(preset).items():
        x = torch.randn(shape, device=device, generator=torch.Generator(device).manual_seed(0))
        denom = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True) * normuon.NORM_MARGIN + normuon.NORM_EPS
        out = torch.empty(shape, dtype=dtype, device=device)
        moved = x.numel() * (x.element_size() + out.element_size())
        timings = {
            "torch.div": time_ms(lambda: torch.div(x, denom, out=out), device, warmup=warmup, repeats=repeats,
                                 device_only=True),
            "divide_per_matrix": time_ms(lambda: normuon.divide_per_matrix(x, denom, dtype, fused=fused), device,
                                         warmup=warmup, repeats=repeats, device_only=True)
            if fused else None,
            # ~25 launches a call: more repeats than this overflow CUDA's launch queue, which blocks the host
            # until the spin that device_only queues ahead has ended (time_ms would double it forever)
            "polar_express": time_ms(lambda: normuon.polar_express(x, out_dtype=None), device, warmup=warmup,
                                     repeats=min(repeats, 10), device_only=True),
            "polar_express_symmetric": time_ms(lambda: normuon.polar_express(x, out_dtype=None, symmetric=True),
                                               device, warmup=warmup, repeats=min(repeats, 10), device_only=True)
            if fused else None,
        }
        # the Gram product alone: cuBLAS (bmm) vs the upper-triangle kernel, on the iteration's dtype
        xd, tall = x.to(dtype), shape[1] > shape[2]
        timings["gram_bmm"] = time_ms(lambda: xd.mT @ xd if tall else xd @ xd.mT, device, warmup=warmup,
                                      repeats=repeats, device_only=True)
        timings["gram_symmetric"] = (time_ms(lambda: normuon.symmetric_gram(xd, tall), device, warmup=warmup,
                                             repeats=repeats, device_only=True) if fused else None)
        sweep = {}
        for cfg in normuon.GRAM_CONFIGS if fused else ():  # which launch configuration to make the default
            try:
                sweep["×".join(map(str, cfg))] = time_ms(lambda: normuon.symmetric_gram(xd, tall, config=cfg),
                                                        device, warmup=warmup, repeats=repeats,
                                                        device_only=True)["median_ms"]
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: a row, not a crash
                sweep["×".join(map(str, cfg))] = f"failed: {type(e).__name__}: {str(e)[:120]}"
        if fused:  # the kernel must compute what bmm does (bf16 rounding apart)
            ref = (xd.mT @ xd if tall else xd @ xd.mT).float()
            row_err = ((normuon.symmetric_gram(xd, tall).float() - ref).norm() / ref.norm()).item()
        row = {"label": label, "shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "bytes": moved,
               "gram_symmetric_rel_err": row_err if fused else None, "gram_symmetric_configs_ms": sweep}
        for name, t in timings.items():
            row[f"{name}_ms"] = None if t is None else t["median_ms"]
            if name in ("torch.div", "divide_per_matrix"):
                row[f"{name}_gb_s"] = None if t is None else moved / t["median_ms"] / 1e6
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    lines = ["## Polar Express on the banks: normalization pass and whole iteration", "", provenance_line(result),
             "", f"{result['preset']} preset, fp32 input, iteration in {result['rows'][0]['dtype']}; median of "
             f"{result['repeats']} device-only repeats.", ""]
    lines.append(md_table(
        ["bank", "matrices", "torch.div ms", "GB/s", "divide_per_matrix ms", "GB/s", "polar_express ms",
         "with symmetric_gram ms", "Gram: bmm ms", "Gram: symmetric_gram ms", "its rel. error"],
        [[r["label"], "×".join(map(str, r["shape"])), r["torch.div_ms"], r["torch.div_gb_s"],
          r["divide_per_matrix_ms"], r["divide_per_matrix_gb_s"], r["polar_express_ms"],
          r["polar_express_symmetric_ms"], r["gram_bmm_ms"], r["gram_symmetric_ms"], r["gram_symmetric_rel_err"]]
         for r in result["rows"]]))
    for r in result["rows"]:
        if r.get("gram_symmetric_configs_ms"):
            lines += ["", f"symmetric_gram launch configurations (BLOCK×BLOCK_K×num_warps×num_stages), {r['label']}:",
                      "", md_table(["config", "ms"], [[c, t] for c, t in r["gram_symmetric_configs_ms"].items()])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--preset", default=None, help="default: speedrun on cuda, tiny on cpu")
    ap.add_argument("--repeats", type=int, default=None, help="default: 50 on cuda, 3 on cpu")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    preset = args.preset or ("speedrun" if cuda else "tiny")
    repeats = args.repeats or (50 if cuda else 3)
    result = {**header(device, "bench_polar_express.py", argv), "preset": preset, "repeats": repeats,
              "rows": run(device, preset, warmup=3 if cuda else 1, repeats=repeats)}
    write_results(args.out, "bench_polar_express", result, markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
