"""nccl-tests-style bus bandwidth of all_reduce, reduce_scatter and all_gather through torch.distributed.

    python -m torch.distributed.run --nproc-per-node 8 bench/nccl_busbw.py --json busbw.json
    python -m torch.distributed.run --nproc-per-node 2 bench/nccl_busbw.py --device cpu   # gloo, to try it

The reference against which `commscope report`'s per-label bandwidth is read: the same operations, sizes
and dtype as the trainer's collectives, measured in the same job. Definitions follow nccl-tests
(PERFORMANCE.md there): S is the full buffer (all_reduce: the tensor; reduce_scatter: the input;
all_gather: the output), algbw = S / t, and busbw = algbw × 2(n−1)/n for all_reduce, × (n−1)/n for
reduce_scatter and all_gather, so that busbw is comparable to the hardware's link bandwidth whatever n is.
t is the median over `--iters` timed calls after `--warmup` untimed ones, each call timed between CUDA
events on the GPU (wall clock around a barrier-free call on CPU), the maximum over ranks taken per call.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "reduce_scatter", "all_gather")
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n}


def run_op(op: str, full: torch.Tensor, part: torch.Tensor) -> None:
    if op == "all_reduce":
        dist.all_reduce(full)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(part, full)
    else:
        dist.all_gather_into_tensor(full, part)


def time_op(op: str, numel: int, dtype: torch.dtype, device: torch.device, warmup: int, iters: int) -> float:
    """Median seconds per call, the slowest rank's time for each call."""
    n = dist.get_world_size()
    numel -= numel % n
    full = torch.ones(numel, dtype=dtype, device=device)
    part = torch.ones(numel // n, dtype=dtype, device=device)
    for _ in range(warmup):
        run_op(op, full, part)
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run_op(op, full, part)
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            run_op(op, full, part)
            t = time.perf_counter() - t0
        slowest = torch.tensor([t], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times.append(float(slowest))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", help="torch dtype of the buffers (the trainer's gradients: bf16)")
    p.add_argument("--sizes-mib", default="0.0625,1,8,32,128,512",
                   help="comma list of full-buffer sizes in MiB (at least 5 for a curve)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", help="write the table here (rank 0)")
    a = p.parse_args()
    device = torch.device(a.device, int(os.environ.get("LOCAL_RANK", 0)) if a.device == "cuda" else None)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    dtype = getattr(torch, a.dtype)
    if device.type == "cpu" and dtype == torch.bfloat16:
        dtype = torch.float32  # gloo reduces no bf16
    n, itemsize = dist.get_world_size(), torch.empty((), dtype=dtype).element_size()
    rows = []
    for op in OPS:
        for mib in (float(s) for s in a.sizes_mib.split(",")):
            numel = max(n, int(mib * 2**20) // itemsize)
            t = time_op(op, numel, dtype, device, a.warmup, a.iters)
            size = (numel - numel % n) * itemsize
            algbw = size / t / 1e9
            rows.append({"op": op, "bytes": size, "world_size": n, "dtype": str(dtype).removeprefix("torch."),
                         "time_us": round(t * 1e6, 2), "algbw_gbps": round(algbw, 2),
                         "busbw_gbps": round(algbw * BUS_FACTOR[op](n), 2)})
    if dist.get_rank() == 0:
        print(f"{'op':<15}{'bytes':>14}{'time us':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}")
        for r in rows:
            print(f"{r['op']:<15}{r['bytes']:>14}{r['time_us']:>12.1f}{r['algbw_gbps']:>12.2f}{r['busbw_gbps']:>12.2f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": a.device, "backend": dist.get_backend(), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
