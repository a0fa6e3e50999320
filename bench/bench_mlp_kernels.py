"""The fused relu² MLP (instrumented_model.relu2_mlp) against the MLP block as the compiled trainer runs it
(cuBLAS matmuls + Inductor's relu² kernels), on one speedrun layer's shape (issue 8).

Why: bench_step_kernels put the relu² pair at 3.8 ms of the compiled step (11 layers): the (N, 4D)
hidden activation crosses memory six times per layer outside the matmuls, the fused kernel's epilogue
makes that two (relu2_mlp's docstring). What matters is whether the Triton matmul is as fast as cuBLAS:
this times both blocks, forward alone and forward + backward, side by side, and each Triton matmul against
cuBLAS's plain matmul of the same shape (what the epilogue costs or saves).

What it times (device only, CUDA events behind a spin kernel, median of `repeats`), bf16, x (N, D),
up and down (4D, D), the upstream gradient fixed:
- "inductor": torch.compile of relu(x @ upᵀ)² @ down (the trainer's expression);
- "fused": the same block through relu2_mlp, under torch.compile too (the op is one opaque call);
- the forward Triton matmul (relu² epilogue) and the backward one (2·sqrt(post) epilogue), with each of
  the two kernels (pointer loads, tensor descriptors), against torch.mm of the same (N, D) × (D, 4D) shape.
The outputs and gradients of the two blocks are compared (relative L2 error against an fp32 reference).

Run: python bench/bench_mlp_kernels.py --device cuda --out OUT
     (CPU: TRITON_INTERPRET=1 python bench/bench_mlp_kernels.py --device cpu --out OUT checks it on a small
     shape, eager, in fp32)
"""
from __future__ import annotations

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch
import torch.nn.functional as F

from bench_transpose import require_triton
from benchlib import arg_parser, header, md_table, provenance_line, time_ms, write_results

GPU_SHAPE = (24 * 2048, 768)  # one speedrun step's tokens × model_dim
CPU_SHAPE = (96, 32)


def plain_block(x, up, down):
    return F.relu(x @ up.T).square() @ down


def main(argv: list[str] | None = None) -> dict:
    from instrumented_model import relu2_mlp as rm

    ap = arg_parser(__doc__)
    args = ap.parse_args(argv)
    device = require_triton(args.device, "bench_mlp_kernels")
    cuda = device.type == "cuda"
    warmup, repeats = (3, 20) if cuda else (0, 1)
    n, d = GPU_SHAPE if cuda else CPU_SHAPE
    dtype = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, d, generator=g, device=device).to(dtype)
    up = (torch.randn(4 * d, d, generator=g, device=device) / d ** 0.5).to(dtype)
    down = (torch.randn(4 * d, d, generator=g, device=device) / (4 * d) ** 0.5).to(dtype)
    dy = torch.randn(n, d, generator=g, device=device).to(dtype)
    result = header(device, "bench_mlp_kernels.py", argv)
    result.update(shape=[n, d], dtype=str(dtype), blocks={})

    def timed(fn) -> float:
        return time_ms(fn, device, warmup=warmup, repeats=repeats, device_only=cuda)["median_ms"]

    leaves = [t.clone().requires_grad_() for t in (x, up, down)]
    ref = [t.double() for t in (x, up, down)]
    ref = [t.requires_grad_() for t in ref]
    ref_y = plain_block(*ref)
    ref_grads = torch.autograd.grad(ref_y, ref, dy.double())
    for name, block in (("inductor", plain_block), ("fused", rm.relu2_mlp)):
        fn = torch.compile(block) if cuda else block

        def fwd_bwd(fn=fn):
            return torch.autograd.grad(fn(*leaves), leaves, dy)

        y, grads = fn(*leaves), fwd_bwd()
        errors = {k: ((got.double() - want).norm() / want.norm()).item()
                  for k, got, want in zip(("y", "dx", "d_up", "d_down"), (y, *grads), (ref_y, *ref_grads))}
        with torch.no_grad():
            fwd_ms = timed(lambda fn=fn: fn(x, up, down))
        result["blocks"][name] = {"fwd_ms": fwd_ms, "fwd_bwd_ms": timed(fwd_bwd), "rel_l2_error": errors}
        del y, grads
    post = torch.ops.commscope.relu2_mlp(x, up, down)[1]
    result["matmuls"] = {"cublas_mm_ms": timed(lambda: x @ up.T), "flops": 2 * n * d * 4 * d,
                         "default_kernel": "tma" if rm.use_tma(x) else "pointer"}
    for name, tma in (("pointer", False), ("tma", True)):
        result["matmuls"][name] = {"fwd_ms": timed(lambda tma=tma: rm._matmul(x, up, None, tma=tma)),
                                   "bwd_ms": timed(lambda tma=tma: rm._matmul(dy, down, post, tma=tma)),
                                   "same_as_default": bool(torch.equal(rm._matmul(x, up, None, tma=tma), post))}
    result["matmul_configs"] = rm.tuned_configs()
    write_results(args.out, "bench_mlp_kernels", result, markdown(result))
    return result


def markdown(result: dict) -> str:
    n, d = result["shape"]
    b, m = result["blocks"], result["matmuls"]
    rows = [[name, v["fwd_ms"], v["fwd_bwd_ms"], " / ".join(f"{e:.1e}" for e in v["rel_l2_error"].values())]
            for name, v in b.items()]
    rows.append(["ratio inductor / fused", b["inductor"]["fwd_ms"] / b["fused"]["fwd_ms"],
                 b["inductor"]["fwd_bwd_ms"] / b["fused"]["fwd_bwd_ms"], ""])

    def tflops(ms: float) -> str:
        return f"{m['flops'] / ms / 1e9:.0f}"

    mm_rows = [["cuBLAS x @ upᵀ (no epilogue)", m["cublas_mm_ms"], tflops(m["cublas_mm_ms"])]]
    for name in ("pointer", "tma"):
        k = m[name]
        mark = " (the default)" if m["default_kernel"] == name else ""
        mm_rows += [[f"Triton {name} kernel{mark}, relu² epilogue (forward)", k["fwd_ms"], tflops(k["fwd_ms"])],
                    [f"Triton {name} kernel{mark}, 2·sqrt(post) epilogue (backward)", k["bwd_ms"], tflops(k["bwd_ms"])]]
    return "\n".join([
        "## Fused relu² MLP vs the compiled block (one speedrun layer)", "", provenance_line(result), "",
        f"x ({n}, {d}), up and down ({4 * d}, {d}), {result['dtype']}; autotuned: {result['matmul_configs']}.", "",
        md_table(["block", "forward ms", "forward + backward ms", "rel. L2 error y / dx / d_up / d_down"], rows), "",
        md_table(["matmul (N, D) × (D, 4D)", "ms", "TFLOPS"], mm_rows)])


if __name__ == "__main__":
    main()
