"""A pipeline-and-experts toy job profiled with torch.profiler, for `commscope report` / `doctor` on the traces
a user brings: each step passes activations from rank to rank with point-to-point send/recv (pipeline
stages), swaps tokens with all_to_all_single (expert parallelism), and averages gradients with all_reduce.

    python -m torch.distributed.run --nproc-per-node 4 examples/pipeline_profile.py --out traces
    commscope doctor traces

Runs on CPU with gloo (NCCL on GPUs works the same way). Each rank writes `rank<R>.json`, a Kineto trace of
`--active` profiled steps recorded with record_shapes (gloo's message sizes come from the ops' shapes).
`--slow-rank R` makes rank R sleep `--slow-ms` before its all_reduce in every step: a straggler to find.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule


def step(rank: int, world: int, a: argparse.Namespace) -> None:
    x = torch.randn(64, 64)
    for _ in range(4):  # the stage's compute
        x = torch.tanh(x @ x)
    # pipeline: every rank but the last sends its activations on, every rank but the first receives
    acts = torch.empty(a.numel)
    if rank > 0:
        dist.recv(acts, rank - 1)
    if rank < world - 1:
        dist.send(torch.full((a.numel,), float(rank)), rank + 1)
    # experts: each rank sends an equal share of its tokens to every other rank
    tokens = torch.empty(a.numel * world)
    dist.all_to_all_single(tokens, torch.ones(a.numel * world))
    if rank == a.slow_rank:
        time.sleep(a.slow_ms / 1000)
    dist.all_reduce(torch.ones(a.numel * 4))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank<R>.json")
    p.add_argument("--active", type=int, default=4, help="profiled steps (after one wait and one warm-up step)")
    p.add_argument("--numel", type=int, default=4096, help="elements a message carries (float32)")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=200.0)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(a.out, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=a.active, repeat=1)) as prof:
        for _ in range(a.active + 2):
            step(rank, world, a)
            prof.step()
    prof.export_chrome_trace(os.path.join(a.out, f"rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
