"""Layout cases: an elementwise `dst.add_(src)` with `src` laid out in different ways, each beside its
aligned twin (the same op on contiguous operands of the same shape), and whether commscope's rule flags it.

Why: `commscope layout` reports an elementwise op when its operands' stride orders differ
(commscope.analyze.layout.layout_mismatch). This table checks that rule on a device: every case that runs
at least 1.3× slower than its twin (layout.SLOWDOWN_FLAG) must be flagged, and a flagged case that runs
as fast as its twin is a false alarm worth knowing. Cases: innermost swap (a transposed matrix), outer
permutation (innermost dimension shared), channels_last against contiguous NCHW, a broadcast row vector,
and expanded views (a row, a column).

Per case: device ms (median of CUDA-event-timed repeats queued behind a spin kernel; CPU: wall clock),
the twin's ms, slowdown = ms / twin ms, GB/s counting what the op must move (commscope.analyze.layout.
bytes_moved: each operand's distinct elements read once, the output written once), the kernel PyTorch ran (CUDA:
from the profiler), and the rule's verdict on the shapes and strides a trace would record.

Run: python bench/layout_cases.py [--device cuda] [--out DIR]     (CPU quick check: --device cpu)
Prints the markdown table; with --out also writes layout_cases.json / .md (bench/benchlib.py).
"""
from __future__ import annotations

import argparse
from typing import Callable

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import header, md_table, provenance_line, setup_device, time_ms, write_results
from commscope.analyze.layout import SLOWDOWN_FLAG, bytes_moved, mismatch_kind
from commscope.analyze.layout_report import short_kernel

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# how a Kineto trace's `Input type` names them (the rule tells a 0-dim tensor from a Python number by it)
TRACE_DTYPE = {torch.bfloat16: "c10::BFloat16", torch.float32: "float"}
# (rows, cols) of the 2-D cases, (A, B, C) of the 3-D one, (N, C, H, W) of the 4-D one
SIZES = {"cuda": ((8192, 8192), (64, 1024, 1024), (64, 256, 64, 64)),
         "cpu": ((512, 512), (16, 128, 128), (8, 32, 32, 32))}


def cases(device: torch.device, dtype: torch.dtype) -> list[tuple[str, torch.Tensor, Callable[[], torch.Tensor]]]:
    """(name, dst, make src) per case; `src` matches `dst`'s shape after broadcasting."""
    (m, n), (a, b, c), (bn, bc, bh, bw) = SIZES[device.type]

    def rnd(*shape):
        return torch.randn(shape, device=device, dtype=dtype)

    return [
        ("innermost swap (transposed matrix)", rnd(m, n), lambda: rnd(n, m).T),
        ("outer permutation (inner dim shared)", rnd(a, b, c), lambda: rnd(b, a, c).permute(1, 0, 2)),
        ("channels_last vs contiguous", rnd(bn, bc, bh, bw),
         lambda: rnd(bn, bc, bh, bw).contiguous(memory_format=torch.channels_last)),
        ("broadcast row vector", rnd(m, n), lambda: rnd(n)),
        ("expanded row view", rnd(m, n), lambda: rnd(1, n).expand(m, n)),
        ("expanded column view", rnd(m, n), lambda: rnd(m, 1).expand(m, n)),
        ("0-dim tensor (a device scalar)", rnd(m, n), lambda: rnd()),
    ]


def kernel_of(fn: Callable[[], object], device: torch.device) -> str | None:
    """The full name of the device kernel one call launches (as a trace records it); None on CPU."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize(device)
    names = [e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return names[0] if names else None


def measure(device: torch.device, dtype: torch.dtype, warmup: int, repeats: int) -> list[dict]:
    rows = []
    for name, dst, make_src in cases(device, dtype):
        src = make_src()
        twin_src = torch.empty(dst.shape, device=device, dtype=dtype).copy_(src)  # contiguous, same values
        dims = [list(dst.shape), list(src.shape)]
        strides = [list(dst.stride()), list(src.stride())]
        size = dst.element_size()
        nbytes = bytes_moved("aten::add_", dims, [size, size], strides)
        twin_bytes = bytes_moved("aten::add_", [list(dst.shape)] * 2, [size, size])
        t = time_ms(lambda: dst.add_(src), device, warmup=warmup, repeats=repeats, device_only=device.type == "cuda")
        tw = time_ms(lambda: dst.add_(twin_src), device, warmup=warmup, repeats=repeats,
                     device_only=device.type == "cuda")
        ms, twin_ms = t["median_ms"], tw["median_ms"]
        kernel = kernel_of(lambda: dst.add_(src), device)
        kind = mismatch_kind(dims, strides, kernel, [TRACE_DTYPE[dtype]] * 2)  # the rule as it reads a trace
        flagged = kind is not None
        slow = ms / twin_ms if twin_ms > 0 else float("nan")
        rows.append({
            "case": name, "shape": dims[0], "src_shape": dims[1], "src_strides": strides[1], "dst_strides": strides[0],
            "ms": ms, "twin_ms": twin_ms, "slowdown": slow, "gbps": nbytes / ms / 1e6, "twin_gbps": twin_bytes / twin_ms / 1e6,
            "kernel": kernel, "twin_kernel": kernel_of(lambda: dst.add_(twin_src), device),
            "flagged": flagged, "kind": kind, "must_flag": slow >= SLOWDOWN_FLAG, "missed": slow >= SLOWDOWN_FLAG and not flagged,
        })
    return rows


def markdown(result: dict) -> str:
    head = ["case", "shape", "src strides", "kernel", "ms", "twin ms", "slowdown", "GB/s", "twin GB/s", "flagged",
            f"≥ {SLOWDOWN_FLAG}× twin"]
    rows = [[r["case"], "×".join(map(str, r["shape"])), "(" + ", ".join(map(str, r["src_strides"])) + ")",
             short_kernel(r["kernel"], 40) if r["kernel"] else "—", r["ms"], r["twin_ms"], r["slowdown"], r["gbps"],
             r["twin_gbps"], r["kind"] if r["flagged"] else "no", ("yes" + (" — MISSED" if r["missed"] else "")) if r["must_flag"] else "no"]
            for r in result["rows"]]
    return (f"## Layout cases: `dst.add_(src)`, {result['dtype']}, against the aligned twin\n\n"
            + md_table(head, rows) + "\n\n" + provenance_line(result) + "\n")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default=None, help="also write layout_cases.json / .md here")
    ap.add_argument("--dtype", default=None, choices=tuple(DTYPES), help="default: bf16 on cuda, fp32 on cpu")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    dtype_name = args.dtype or ("bf16" if cuda else "fp32")
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    repeats = args.repeats if args.repeats is not None else (20 if cuda else 3)
    result = header(device, "layout_cases.py", argv)
    result.update(dtype=dtype_name, warmup=warmup, repeats=repeats,
                  rows=measure(device, DTYPES[dtype_name], warmup, repeats))
    md = markdown(result)
    print(md)
    if args.out:
        write_results(args.out, "layout_cases", result, md)
    return result


if __name__ == "__main__":
    main()
