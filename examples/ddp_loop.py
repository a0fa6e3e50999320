"""A DistributedDataParallel loop (gloo on CPU) whose gradient buckets are recorded by commscope's DDP hook.

Run:  python -m torch.distributed.run --nproc-per-node 2 examples/ddp_loop.py --out runs/ddp
Then: commscope report runs/ddp    commscope hooks runs/ddp
With --stall-at N rank 1 sleeps in region 'data' at step N while the others wait in backward's all_reduce:
stop the job (SIGTERM or Ctrl-C to torch.distributed.run) and `commscope doctor runs/ddp` names the hang.
"""
import argparse
import contextlib
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import commscope
from commscope.recording import ddp_comm_hook

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="run directory to write")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--accum", type=int, default=1, help="micro-steps per step (gradient accumulation)")
ap.add_argument("--stall-at", type=int, default=-1, help="the step in which rank 1 stalls (default: never)")
args = ap.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                          torch.nn.ReLU(), torch.nn.Linear(512, 8))
model = DDP(net, bucket_cap_mb=0.5)  # small buckets: several all_reduces per backward
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batches
with commscope.record(args.out) as rec:
    rec.handle_signals()  # torchrun's SIGTERM leaves each rank's status, with when it arrived
    # Each bucket's all_reduce becomes a collective record labelled ddp_bucket<index>, and the time backward()
    # blocks on it at its end is recorded as the bucket's wait.
    model.register_comm_hook(state=None, hook=ddp_comm_hook(rec))
    rec.watch(dict(net.named_parameters()))  # when each gradient is ready: `commscope hooks`
    for step in range(args.steps):
        with rec.step(step) as st:
            if step == args.stall_at and dist.get_rank() == 1:
                with rec.region("data"):
                    time.sleep(600)  # stuck in its own code: the others block in backward's all_reduce
            for m in range(args.accum):
                rec.set_micro_step(m)
                # Only the last micro-step's backward all_reduces; the others accumulate locally.
                sync = m == args.accum - 1
                with contextlib.nullcontext() if sync else model.no_sync():
                    with rec.region("forward"):
                        loss = model(torch.randn(32, 64, generator=data)).square().mean()
                    with rec.region("backward"):
                        loss.backward()
            rec.set_micro_step(None)
            with rec.region("update:sgd"):
                opt.step()
                opt.zero_grad()
            st.loss = loss.item()
dist.destroy_process_group()
