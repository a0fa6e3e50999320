"""A plain data-parallel training loop (no DDP) instrumented with commscope's public recording API.

Run:  python -m torch.distributed.run --nproc-per-node 2 examples/plain_loop.py --out runs/plain
Then: commscope hooks runs/plain   (or load it: commscope.load.load_path("runs/plain"))

The model is a small MLP; gradients are averaged by hand: the hidden layer is "sharded" (reduce_scatter
of its gradient, each rank updates its row shard, all_gather of the new weights), the others are
all_reduced. Every collective goes through `rec.collective(...)`, so the run directory has per-label
timings and the cross-rank match key (group, seq). `--die-at-step N` makes rank 1 SIGKILL itself at step
N, to see that every finished step survives a crash.

When torchrun tears the job down (another rank failed) it sends SIGTERM: the handler turns it into an
exception so `rec.close` still writes status.json, and `TermGuard` does the same for a rank whose main
thread is stuck in a collective's C++ wait, where Python handlers cannot run.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist

from commscope.recording import TermGuard, make_recorder


def build_model(dim: int) -> torch.nn.Sequential:
    torch.manual_seed(0)  # same init on every rank: no broadcast needed
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 4 * dim, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * dim, 4 * dim, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * dim, dim, bias=False),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run directory to write")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--trace", default="light", choices=["off", "light", "full"])
    ap.add_argument("--profile", default=None, help="profiler window START:STOP")
    ap.add_argument("--die-at-step", type=int, default=None, help="rank 1 SIGKILLs itself at this step")
    args = ap.parse_args()

    cuda = torch.cuda.is_available() and os.environ.get("COMMSCOPE_EXAMPLE_CPU") != "1"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, device_id=device if cuda else None)

    rec = make_recorder(args.trace, args.out, rank=rank, world_size=world, device=device, backend=backend,
                        profile_steps=args.profile)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    guard = TermGuard(lambda signum: rec.close("failed", f"terminated by signal {signum} while blocked")).start()
    model = build_model(args.dim).to(device)
    fc_in, fc_hidden, fc_out = model[0].weight, model[2].weight, model[4].weight
    labelled = {"fc_in": fc_in, "fc_hidden": fc_hidden, "fc_out": fc_out}
    rec.write_config({"args": vars(args), "scatter_order": list(labelled)})
    rec.watch(labelled)

    gen = torch.Generator().manual_seed(1234 + rank)  # each rank its own slice of data
    target_map = torch.randn(args.dim, args.dim, generator=torch.Generator().manual_seed(7)).to(device)
    rows = fc_hidden.shape[0] // world
    status, error = "completed", None
    try:
        for step in range(args.steps):
            with rec.step(step) as st:
                total = torch.zeros((), device=device)
                for micro in range(args.grad_accum):
                    rec.set_micro_step(micro)
                    x = torch.randn(args.batch, args.dim, generator=gen).to(device)
                    with rec.region("forward"):
                        loss = (model(x) - x @ target_map).square().mean() / args.grad_accum
                    with rec.region("backward"):
                        loss.backward()
                    total += loss.detach()
                if args.die_at_step == step and rank == 1:
                    os.kill(os.getpid(), 9)
                rec.set_micro_step(None)
                with rec.region("optimizer"):
                    shard = torch.empty(rows, fc_hidden.shape[1], device=device)
                    handles = {
                        "fc_in": rec.collective(dist.all_reduce, fc_in.grad, label="fc_in", phase="allreduce"),
                        "fc_hidden": rec.collective(dist.reduce_scatter_tensor, shard, fc_hidden.grad,
                                                    label="fc_hidden", phase="reduce"),
                        "fc_out": rec.collective(dist.all_reduce, fc_out.grad, label="fc_out", phase="allreduce"),
                    }
                    loss_h = rec.collective(dist.all_reduce, total, label="loss", phase="allreduce")
                    with torch.no_grad():
                        for label, param in (("fc_in", fc_in), ("fc_out", fc_out)):
                            handles[label].wait()
                            param.add_(param.grad, alpha=-args.lr / world)
                        handles["fc_hidden"].wait()
                        mine = fc_hidden[rank * rows:(rank + 1) * rows] - (args.lr / world) * shard
                        rec.collective(dist.all_gather_into_tensor, fc_hidden.data, mine.contiguous(),
                                       label="fc_hidden", phase="gather").wait()
                    for p in model.parameters():
                        p.grad = None
                    loss_h.wait()
                st.loss = total.item() / world
                st.tokens = args.batch * args.grad_accum * world
            if rank == 0:
                print(f"step {step} loss {st.loss:.5f}", flush=True)
    except BaseException as e:
        status, error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        if guard.claim():  # else the guard thread closed the recorder (claim waited) and ends the process
            guard.stop()
            rec.close(status, error)
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
