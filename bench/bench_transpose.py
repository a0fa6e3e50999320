"""Transpose kernels: Triton transpose_copy / transpose_add vs torch `copy_(src.T)` / `add_(src.T)` vs an
aligned copy / add of the same size.

Why: the tied embedding folds embed's gradient into lm_head's (transpose_add) and copies lm_head back into
embed (transpose_copy) every step. torch runs both as a strided, non-vectorized elementwise kernel
(2.6–5.1× the time of an aligned add_ on one H200: bench_head_layout.py,
bench/results/h200-2026-12-03.md); the Triton tiles should run near copy bandwidth.
Target: ≥ 90 % of the aligned kernel's bandwidth.

For each source shape and dtype the script times six kernels, reports device ms (median; each repeat is
queued behind a spin kernel so host launch cost does not leak into it) and the host's µs per call, GB/s counting bytes
read + written (copy: 2·numel·size, add: 3·numel·size) and the percentage of the aligned kernel's GB/s
for the same operation, and checks that Triton's results are bit-identical to torch's.

On CPU the Triton path runs only under TRITON_INTERPRET=1 (Triton's interpreter; its times mean nothing,
the equality check does); otherwise the Triton rows are skipped and say why.

Run: python bench/bench_transpose.py --device cuda --out OUT   (CPU: --device cpu, small shapes)
"""
from __future__ import annotations


import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import arg_parser, header, md_table, provenance_line, setup_device, time_ms, write_results

GPU_SHAPES = [(768, 50304), (50304, 768)]
CPU_SHAPES = [(65, 130), (130, 65)]  # ragged in both tile dimensions of every TILES entry, few tiles
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TARGET_PCT = 90.0


def require_triton(device_name: str, script: str) -> torch.device:
    """The device of `--device`, or exit with one line when the Triton kernels cannot run on it."""
    device = setup_device(device_name)
    ok, why = triton_usable(device)
    if not ok:
        raise SystemExit(f"{script}: {why}")
    return device


def triton_usable(device: torch.device) -> tuple[bool, str | None]:
    from instrumented_model import kernels

    if not kernels.triton_available():
        return False, "triton is not installed"
    if device.type == "cpu":
        import triton  # the interpret mode is read from the environment when a kernel is jitted

        if not triton.knobs.runtime.interpret:
            return False, "CPU without TRITON_INTERPRET=1"
    return True, None


def bench_case(shape: tuple[int, int], dtype: torch.dtype, device: torch.device, warmup: int, repeats: int,
               use_triton: bool) -> dict:
    from instrumented_model.kernels import transpose_add, transpose_copy

    m, n = shape
    g = torch.Generator(device=device).manual_seed(0)
    src = torch.randn(m, n, generator=g, device=device).to(dtype)
    base = torch.randn(n, m, generator=g, device=device).to(dtype)
    dst = base.clone()
    aligned_dst = torch.empty_like(src)
    es, numel = src.element_size(), src.numel()
    copy_bytes, add_bytes = 2 * numel * es, 3 * numel * es

    kernels = {
        "aligned_copy": (lambda: aligned_dst.copy_(src), copy_bytes),
        "aligned_add": (lambda: aligned_dst.add_(src), add_bytes),
        "torch_transpose_copy": (lambda: dst.copy_(src.T), copy_bytes),
        "torch_transpose_add": (lambda: dst.add_(src.T), add_bytes),
    }
    if use_triton:
        kernels["triton_transpose_copy"] = (lambda: transpose_copy(dst, src, use_triton=True), copy_bytes)
        kernels["triton_transpose_add"] = (lambda: transpose_add(dst, src, use_triton=True), add_bytes)

    rows = {}
    for name, (fn, nbytes) in kernels.items():
        aligned_dst.zero_()  # the timed adds accumulate: start each kernel from the same values
        dst.copy_(base)
        t = time_ms(fn, device, warmup=warmup, repeats=repeats, device_only=True)
        rows[name] = {**t, "bytes": nbytes, "gbps": nbytes / (t["median_ms"] * 1e-3) / 1e9}
    for name, row in rows.items():
        ref = rows["aligned_add" if name.endswith("add") else "aligned_copy"]
        row["pct_of_aligned"] = 100.0 * row["gbps"] / ref["gbps"]
        row["pct_of_aligned_copy"] = 100.0 * row["gbps"] / rows["aligned_copy"]["gbps"]

    exact = None
    if use_triton:  # one fresh application each, compared bit for bit with torch's
        want_copy, got_copy = torch.empty_like(base).copy_(src.T), torch.empty_like(base)
        transpose_copy(got_copy, src, use_triton=True)
        want_add, got_add = base.clone().add_(src.T), base.clone()
        transpose_add(got_add, src, use_triton=True)
        exact = {"copy": bool(torch.equal(want_copy, got_copy)), "add": bool(torch.equal(want_add, got_add))}
    return {"shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "kernels": rows,
            "triton_exact": exact}


def markdown(result: dict) -> str:
    lines = ["## Transpose kernels", "", provenance_line(result), ""]
    if result["triton_skipped"]:
        lines += [f"Triton rows skipped: {result['triton_skipped']}.", ""]
    rows = []
    for case in result["cases"]:
        for name, k in case["kernels"].items():
            host_us = k.get("host_ms_per_call")
            rows.append([f"{tuple(case['shape'])}", case["dtype"], name, k["median_ms"], k["gbps"],
                         f"{k['pct_of_aligned']:.1f}", None if host_us is None else f"{host_us * 1e3:.1f}"])
    ms = "device ms (median)" if result["device"] == "cuda" else "ms (median)"
    lines.append(md_table(["src shape", "dtype", "kernel", ms, "GB/s (read+write)",
                           "% of aligned same op", "host µs per call"], rows))
    if result["device"] == "cuda":
        lines += ["", "Device time: every repeat is queued behind a spin kernel, so the events time the kernel "
                  "itself, not the host's launch rate (benchlib.time_ms device_only). A call whose host µs "
                  "exceed its device time is launch-bound when run back to back with nothing else queued."]
    exact = [c["triton_exact"] for c in result["cases"] if c["triton_exact"] is not None]
    if exact:
        ok = all(e["copy"] and e["add"] for e in exact)
        lines += ["", f"Triton results bit-identical to torch's in every case: {'yes' if ok else 'NO'}."]
        if result["device"] == "cpu":
            lines.append("Triton ran in its CPU interpreter: its times say nothing about the kernel.")
        else:
            lines.append(f"Target ≥ {TARGET_PCT:.0f} % of aligned: "
                         + ("met by every Triton row." if result["target_met"] else "NOT met by every Triton row."))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = arg_parser(__doc__)
    ap.add_argument("--warmup", type=int, default=None, help="default: 10 on cuda, 1 on cpu")
    ap.add_argument("--repeats", type=int, default=None, help="default: 50 on cuda, 3 on cpu")
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    warmup = args.warmup if args.warmup is not None else (10 if cuda else 1)
    repeats = args.repeats if args.repeats is not None else (50 if cuda else 3)
    use_triton, why_not = triton_usable(device)

    result = header(device, "bench_transpose.py", argv)
    result["triton_skipped"] = why_not
    result["target_pct_of_aligned"] = TARGET_PCT
    result["cases"] = [bench_case(shape, dtype, device, warmup, repeats, use_triton)
                       for shape in (GPU_SHAPES if cuda else CPU_SHAPES) for dtype in DTYPES.values()]
    triton_rows = [k for c in result["cases"] for name, k in c["kernels"].items() if name.startswith("triton")]
    result["target_met"] = bool(triton_rows) and all(k["pct_of_aligned"] >= TARGET_PCT for k in triton_rows)
    write_results(args.out, "bench_transpose", result, markdown(result))
    return result


if __name__ == "__main__":
    main()
