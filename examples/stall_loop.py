"""A plain data-parallel loop (gloo, CPU) recorded with commscope, in which rank 1 can stall for good in its
own code: the job `commscope doctor` reads when it is stopped (docs/faults.md, "A job that was stopped").

Run:  python -m torch.distributed.run --nproc-per-node 2 examples/stall_loop.py --out runs/stall --stall-at 3
      then stop it (SIGTERM or Ctrl-C to torch.distributed.run) and run `commscope doctor runs/stall`.
Rank 1 sleeps in region 'data' from step --stall-at on while rank 0 goes on to the next all_reduce and waits
in it; with --stall-ranks all every rank sleeps there (a job stuck outside communication: a data loader, a
lock); without --stall-at both ranks keep stepping (up to --steps).
"""
import argparse
import time

import torch
import torch.distributed as dist

import commscope

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="run directory to write")
ap.add_argument("--stall-at", type=int, default=-1, help="the step in which rank 1 stalls (default: never)")
ap.add_argument("--stall-ranks", choices=("1", "all"), default="1", help="who stalls: rank 1, or every rank")
ap.add_argument("--steps", type=int, default=100_000)
args = ap.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
with commscope.record(args.out) as rec:
    rec.handle_signals()  # a signal leaves each rank's status, with when it arrived (ended_ns)
    for step in range(args.steps):
        with rec.step(step) as st:
            loss = model(torch.randn(8, 32)).square().mean()
            loss.backward()
            if step == args.stall_at and (args.stall_ranks == "all" or dist.get_rank() == 1):
                with rec.region("data"):
                    time.sleep(600)  # stuck in its own code, outside every collective
            for name, p in model.named_parameters():
                rec.collective(dist.all_reduce, p.grad, label=name, phase="allreduce").wait()
            st.loss = loss.item()
dist.destroy_process_group()
