"""LM-head layouts: gradient-accumulation cost of the standard (V, D) head vs the transposed (D, V) head.

Why (the modded-nanogpt record stores its LM head transposed for this): the head's weight gradient comes
out of the matmul backward as a (D, V) contiguous tensor. Stored (D, V) ("transposed") the gradient matches the weight and AccumulateGrad adds it
with an aligned, vectorized kernel; stored (V, D) ("standard") it arrives as a transpose view, and
AccumulateGrad copies it (first micro-step) or adds it (later micro-steps) with a strided, non-vectorized
elementwise kernel — about 2.7× (fp32) to 5× (bf16) slower on an H200.

Two measurements:
1. `kernels`: the accumulation kernels alone at the head's size: `acc.add_(g)` aligned (what the
   transposed head runs) vs `acc.add_(gT.T)` and `acc.copy_(gT.T)` (what the standard head runs), fp32
   (the weight's dtype, which autograd casts the bf16 gradient to) and bf16; median ms and GB/s.
2. `profile`: a forward+backward of only the head (instrumented_model.heads, bf16 autocast on CUDA) with
   2 micro-steps under torch.profiler, per layout: for each micro-step, the ops AccumulateGrad ran and the
   device kernels they launched (name, µs, vectorized or not).

Run: python bench/bench_head_layout.py --device cuda --out OUT   (CPU: --device cpu, tiny dims)
"""
from __future__ import annotations


import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from benchlib import arg_parser, header, md_table, provenance_line, setup_device, sync, time_ms, write_results

ACCUMULATE_OP = "torch::autograd::AccumulateGrad"


def kernel_kind(name: str) -> str:
    if "vectorized_elementwise_kernel" in name:
        return "vectorized"
    if "elementwise_kernel" in name:
        return "non-vectorized"
    return "other"


def bench_kernels(V: int, D: int, device: torch.device, warmup: int, repeats: int) -> list[dict]:
    rows = []
    g = torch.Generator(device=device).manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        grad_dv = torch.randn(D, V, generator=g, device=device).to(dtype)  # the matmul's (D, V) gradient
        acc_dv = torch.zeros(D, V, device=device, dtype=dtype)  # transposed head's .grad
        acc_vd = torch.zeros(V, D, device=device, dtype=dtype)  # standard head's .grad
        es, numel = grad_dv.element_size(), grad_dv.numel()
        cases = {
            "transposed: acc.add_(g) aligned": (lambda: acc_dv.add_(grad_dv), 3),
            "standard: acc.add_(gT.T) strided": (lambda: acc_vd.add_(grad_dv.T), 3),
            "standard: acc.copy_(gT.T) strided (1st micro-step)": (lambda: acc_vd.copy_(grad_dv.T), 2),
        }
        for name, (fn, passes) in cases.items():
            t = time_ms(fn, device, warmup=warmup, repeats=repeats, device_only=True)
            nbytes = passes * numel * es
            rows.append({"case": name, "dtype": str(dtype).removeprefix("torch."), **t, "bytes": nbytes,
                         "gbps": nbytes / (t["median_ms"] * 1e-3) / 1e9})
        aligned = rows[-3]["median_ms"]
        for row in rows[-3:]:
            row["x_aligned_add"] = row["median_ms"] / aligned
    return rows


def _descendants(evt) -> list:
    out = []
    for child in evt.cpu_children:
        out.append(child)
        out += _descendants(child)
    return out


def profile_head(layout: str, V: int, D: int, tokens: int, device: torch.device) -> dict:
    """fwd+bwd of the head alone, 2 micro-steps under the profiler; AccumulateGrad's ops and kernels."""
    from instrumented_model.heads import head_weight_shape, lm_head_logits

    g = torch.Generator(device=device).manual_seed(1)
    weight = torch.nn.Parameter(torch.randn(*head_weight_shape(layout, D, V), generator=g, device=device) * 0.02)
    x = torch.randn(tokens, D, generator=g, device=device)
    targets = torch.randint(0, V, (tokens,), generator=g, device=device)

    def micro_step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = lm_head_logits(x, weight, layout)
        F.cross_entropy(logits.float(), targets).backward()

    micro_step()  # warm up (cuBLAS handles, autocast caches), then start from no gradient
    weight.grad = None
    sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(2):
            micro_step()
        sync(device)
    grad_strides = list(weight.grad.stride())

    micro_steps = []
    for i, evt in enumerate(e for e in prof.events() if e.name == ACCUMULATE_OP):
        ops = _descendants(evt)
        kernels = [{"name": k.name, "us": float(k.duration), "kind": kernel_kind(k.name)}
                   for op in [evt, *ops] for k in op.kernels]
        micro_steps.append({
            "micro_step": i,
            "cpu_us": float(evt.cpu_time_total),
            "ops": [op.name for op in ops],
            "kernels": kernels,
            "kernel_us": sum(k["us"] for k in kernels),
        })
    return {"layout": layout, "weight_shape": list(weight.shape), "grad_strides": grad_strides,
            "tokens_per_micro_step": tokens, "micro_steps": micro_steps}


def markdown(result: dict) -> str:
    lines = ["## LM-head layouts: gradient accumulation", "", provenance_line(result), "",
             f"Kernels alone, head size V={result['vocab']} × D={result['dim']}:", ""]
    lines.append(md_table(["case", "dtype", "median ms", "GB/s", "× aligned add"],
                          [[r["case"], r["dtype"], r["median_ms"], r["gbps"], f"{r['x_aligned_add']:.2f}"]
                           for r in result["kernels"]]))
    lines += ["", f"Head fwd+bwd with 2 micro-steps ({result['tokens']} tokens each) under torch.profiler: "
              "what AccumulateGrad ran.", ""]
    rows = []
    for p in result["profile"]:
        for m in p["micro_steps"]:
            names = "; ".join(f"{k['kind']}: {k['name'][:60]}" for k in m["kernels"]) or "(no device kernel)"
            rows.append([p["layout"], m["micro_step"], ", ".join(dict.fromkeys(m["ops"])) or "-",
                         m["kernel_us"], names])
    lines.append(md_table(["layout", "micro-step", "ops", "kernel µs", "kernels"], rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--preset", default=None, help="model dims from this preset (default: speedrun on cuda, tiny on cpu)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="tokens per micro-step (default: 8 × seq_len, 8 sequences, as in the figures of docs/benchmarks.md)")
    ap.add_argument("--warmup", type=int, default=None, help="default: 10 on cuda, 1 on cpu")
    ap.add_argument("--repeats", type=int, default=None, help="default: 50 on cuda, 3 on cpu")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    from instrumented_model.config import make_config

    cfg = make_config(args.preset or ("speedrun" if cuda else "tiny"), 1)
    tokens = args.tokens or 8 * cfg.seq_len
    warmup = args.warmup if args.warmup is not None else (10 if cuda else 1)
    repeats = args.repeats if args.repeats is not None else (50 if cuda else 3)

    result = header(device, "bench_head_layout.py", argv)
    result.update(preset=cfg.name, vocab=cfg.vocab_size, dim=cfg.model_dim, tokens=tokens)
    result["kernels"] = bench_kernels(cfg.vocab_size, cfg.model_dim, device, warmup, repeats)
    result["profile"] = [profile_head(layout, cfg.vocab_size, cfg.model_dim, tokens, device)
                         for layout in ("transposed", "standard")]
    write_results(args.out, "bench_head_layout", result, markdown(result))
    return result


if __name__ == "__main__":
    main()
