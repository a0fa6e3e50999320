"""A plain data-parallel loop (no DDP, gloo on CPU) recorded with commscope's public API.

Run:  python -m torch.distributed.run --nproc-per-node 2 examples/plain_loop.py --out runs/plain
Then: commscope report runs/plain    commscope hooks runs/plain
"""
import argparse

import torch
import torch.distributed as dist

import commscope

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="run directory to write")
ap.add_argument("--steps", type=int, default=5)
args = ap.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)  # the same initial weights on every rank
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batches
with commscope.record(args.out) as rec:  # on exit: status.json says completed, or the exception
    rec.handle_signals()  # torchrun's teardown (another rank failed) is this rank's status, not a crash
    rec.watch(dict(model.named_parameters()))  # when each gradient is ready: `commscope hooks`
    for step in range(args.steps):
        with rec.step(step) as st:
            x = torch.randn(16, 32, generator=data)
            with rec.region("forward"):
                loss = (model(x) - x.flip(1)).square().mean()
            loss.backward()
            for name, p in model.named_parameters():  # average the gradients over the ranks
                rec.collective(dist.all_reduce, p.grad, label=name, phase="allreduce").wait()
                p.grad /= dist.get_world_size()
            opt.step()
            opt.zero_grad()
            st.loss = loss.item()
dist.destroy_process_group()
