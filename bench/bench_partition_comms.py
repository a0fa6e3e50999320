"""Which collectives move a bank's gradients to unequal owners and the updated matrices back?

Why: with the alpha-lpt partition a rank owns a contiguous or arbitrary set of whole matrices, in
unequal numbers, and reduce_scatter / all_gather_into_tensor only split evenly. This measures, for one
bank with the planner's owners, one full round (gradient sum to the owners + updated weights to every
rank, no update compute in between) with each candidate, next to the bank's own equal-split round:

- bank:      reduce_scatter + all_gather of equal chunks (the reference, no partition);
- packed:    each owner's matrices packed into a slot of S = largest share, reduce_scatter + all_gather of
             the R·S pack, unpack;
- allreduce: all_reduce of the whole bank gradient (owners read their matrices), packed all_gather back;
- a2a:       all_to_all_single with per-owner split sizes (each owner receives R copies of its matrices
             and sums them), then all_to_all_single sending the owner's matrices to every rank (what
             instrumented_model.optimizer does);
- bcast:     per-owner reduce of its matrices (dist.reduce, one per owner) + per-owner broadcast back.

Bytes each rank sends per round (ring algorithms, N matrices of b bytes, R ranks, S largest share):
bank 2·(R−1)/R·N·b; packed 2·(R−1)·S·b; allreduce 2·(R−1)/R·N·b + (R−1)·S·b; a2a ≈ 2·(R−1)/R·N·b
(exact splits, but R point-to-point messages and an R-fold receive/send buffer); bcast ≈ 2·N·b in 2R
separate collectives.

Run (CPU, gloo): python bench/bench_partition_comms.py --out OUT [--nproc 4 --dim 64 --repeats 20]
Every rank checks each candidate's result against a local reference (same sums, same final bank).
"""
from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
import warnings

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchlib import header, md_table, provenance_line, write_results

CANDIDATES = ("bank", "packed", "allreduce", "a2a", "bcast")


def _layout(owners: list[int], ws: int):
    per_rank = [[k for k, o in enumerate(owners) if o == r] for r in range(ws)]
    share = max(len(x) for x in per_rank)
    mats = torch.tensor([k for x in per_rank for k in x])
    pos = torch.tensor([r * share + i for r, x in enumerate(per_rank) for i in range(len(x))])
    return per_rank, share, mats, pos


def round_trip(name: str, grad: torch.Tensor, bank: torch.Tensor, owners: list[int], rank: int, ws: int
               ) -> torch.Tensor:
    """One round; returns this rank's summed gradient of its own matrices; `bank` ends up = summed grad
    on every rank (the 'update' is the identity on the sum, so every candidate's result is checkable)."""
    per_rank, share, mats, pos = _layout(owners, ws)
    mine = per_rank[rank]
    rows_cols = grad.shape[1:]
    if name == "bank":
        chunk = grad.shape[0] // ws
        out = torch.empty((chunk, *rows_cols))
        dist.reduce_scatter_tensor(out, grad)
        dist.all_gather_into_tensor(bank, out)
        return bank[rank * chunk:(rank + 1) * chunk].clone()  # equal chunks, not the owners' sets
    if name in ("packed", "allreduce"):
        slot = torch.zeros((share, *rows_cols))
        pack = torch.zeros((ws * share, *rows_cols))
        if name == "packed":
            pack.index_copy_(0, pos, grad.index_select(0, mats))
            dist.reduce_scatter_tensor(slot, pack)
        else:
            summed = grad.clone()
            dist.all_reduce(summed)
            slot[:len(mine)] = summed[mine]
        dist.all_gather_into_tensor(pack, slot)
        bank.index_copy_(0, mats, pack.index_select(0, pos))
        return slot[:len(mine)].clone()
    if name == "a2a":
        counts = [len(x) for x in per_rank]
        send = grad.index_select(0, mats)  # owner order: rank 0's matrices first
        recv = torch.empty((ws * len(mine), *rows_cols))
        dist.all_to_all_single(recv, send, [len(mine)] * ws, counts)
        summed = recv.view(ws, len(mine), *rows_cols).sum(0)
        out = torch.empty((len(mats), *rows_cols))
        dist.all_to_all_single(out, summed.repeat(ws, *([1] * len(rows_cols))), counts, [len(mine)] * ws)
        bank.index_copy_(0, mats, out)
        return summed
    if name == "bcast":
        for r, ks in enumerate(per_rank):
            if ks:
                buf = grad[ks].contiguous()
                dist.reduce(buf, dst=r)
                if r == rank:
                    summed = buf
        for r, ks in enumerate(per_rank):
            if ks:
                buf = summed if r == rank else torch.empty((len(ks), *rows_cols))
                dist.broadcast(buf, src=r)
                bank[ks] = buf
        return summed if mine else torch.empty((0, *rows_cols))
    raise ValueError(name)


def _worker(rank: int, ws: int, port: int, args: dict, out: str) -> None:
    torch.set_num_threads(1)
    # torch 2.13 renames *_tensor to *_single; the optimizer keeps the old names for torch 2.11 on the GPU
    warnings.filterwarnings("ignore", category=FutureWarning)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws)
    try:
        results = {}
        for label, (n, rows, cols), owners in args["banks"]:
            g = torch.Generator().manual_seed(rank)
            grad = torch.randn((n, rows, cols), generator=g)
            want = sum(torch.randn((n, rows, cols), generator=torch.Generator().manual_seed(r)) for r in range(ws))
            bank = torch.zeros((n, rows, cols))
            for name in CANDIDATES:  # warm-up and correctness
                bank.zero_()
                mine = round_trip(name, grad, bank, owners, rank, ws)
                ref_own = want[rank * (n // ws):(rank + 1) * (n // ws)] if name == "bank" else \
                    want[[k for k, o in enumerate(owners) if o == rank]]
                torch.testing.assert_close(mine, ref_own, atol=1e-4, rtol=1e-5)
                done = [k for k, o in enumerate(owners) if o >= 0] if name != "bank" else list(range(n))
                torch.testing.assert_close(bank[done], want[done], atol=1e-4, rtol=1e-5)
            times = {name: [] for name in CANDIDATES}
            for _ in range(args["repeats"]):  # interleaved: load from other processes hits all alike
                for name in CANDIDATES:
                    dist.barrier()
                    t0 = time.perf_counter_ns()
                    round_trip(name, grad, bank, owners, rank, ws)
                    times[name].append((time.perf_counter_ns() - t0) / 1e6)
            for name in CANDIDATES:
                results[(label, name)] = statistics.median(times[name])
        torch.save(results, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--dim", type=int, default=64, help="model dim D of the tiny preset's bank shapes")
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    from dataclasses import replace

    from instrumented_model.config import make_config
    from instrumented_model.partition import matrix_owners

    cfg = make_config("tiny", args.nproc)
    owners = matrix_owners(cfg, args.nproc, "alpha-lpt")
    cfg = replace(cfg, model_dim=args.dim)  # same matrix counts and owners, bigger matrices
    d = args.dim
    banks = [("attn", (4 * cfg.num_attn_layers, d, d), list(owners["attn"])),
             ("mlp", (2 * cfg.mlp_layers_padded, 4 * d, d), list(owners["mlp"]))]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(args.nproc, port, {"banks": banks, "repeats": args.repeats}, tmp),
                           nprocs=args.nproc, join=True, start_method="fork")
        per_rank = [torch.load(f"{tmp}/rank{r}.pt") for r in range(args.nproc)]
    result = {**header(torch.device("cpu"), "bench_partition_comms.py", argv), "nproc": args.nproc,
              "banks": {label: {"shape": list(shape), "owners": o} for label, shape, o in banks}, "ms": {}}
    rows = []
    for label, shape, o in banks:
        share = max(o.count(r) for r in range(args.nproc))
        for name in CANDIDATES:
            ms = max(r[(label, name)] for r in per_rank)  # a round ends when its slowest rank is done
            result["ms"][f"{label}/{name}"] = ms
            rows.append([label, f"{shape[0]}×{shape[1]}×{shape[2]}", f"S={share}", name, ms])
    md = (md_table(["bank", "matrices", "largest share", "candidate", "ms per round (slowest rank, median)"],
                   rows) + f"\n\n{provenance_line(result)}\n")
    write_results(args.out, "bench_partition_comms", result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
