"""Writes rank0.json and rank1.json here: a 2-rank gloo CPU job under torch.profiler(with_stack=True), whose
collectives come from different user functions (commscope.load.stack_labels labels them by those).

    PYTHONPATH=. python tests/data/gloo2-stack/make_trace.py [OUT_DIR]

Per profiled step: a DDP bucket all_reduce from a comm hook (`allreduce_hook`), a reduce_scatter in
`reduce_grads`, an async all_reduce in `sync_stats`, an all_gather inside `commscope.label("attn")` (the
scope wins over the stack) and an all_reduce called in `train` itself. The traces are then trimmed: only
the `python_function` events that enclose a collective's launch (`c10d::` op) on their thread are kept,
and `traceName` is the file's name.
"""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

import commscope


def allreduce_hook(state, bucket):
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def reduce_grads(full, shard):
    dist.reduce_scatter_tensor(shard, full)


def sync_stats(stats):
    return dist.all_reduce(stats, async_op=True)


def gather_attn(shard, full):
    with commscope.label("attn"):
        dist.all_gather_into_tensor(full, shard)


def train(rank, model, steps, prof):
    full, shard = torch.ones(2 * 512), torch.empty(512)
    stats, gathered, loss_sum = torch.ones(48), torch.empty(2 * 512), torch.ones(1)
    for _ in range(steps):
        model(torch.ones(4, 32)).sum().backward()
        reduce_grads(full, shard)
        sync_stats(stats).wait()
        gather_attn(shard, gathered)
        dist.all_reduce(loss_sum)
        prof.step()


def worker(rank, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 16))
    model.register_comm_hook(None, allreduce_hook)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))) as prof:
        train(rank, model, 4, prof)
    dist.destroy_process_group()


def trim(path):
    """Keep only the python_function events that enclose a `c10d::` launch on their thread."""
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    launches = [(e["tid"], e["ts"]) for e in ev if e.get("cat") == "cpu_op" and e.get("name", "").startswith("c10d::")]

    def keep(e):
        if e.get("cat") != "python_function":
            return True
        return any(t == e["tid"] and e["ts"] <= ts <= e["ts"] + e["dur"] for t, ts in launches)

    doc["traceEvents"] = [e for e in ev if keep(e)]
    doc["traceName"] = os.path.basename(path)  # not the machine's path
    with open(path, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(out, os.path.join(tmp, "store")), nprocs=2)
    for r in range(2):
        trim(os.path.join(out, f"rank{r}.json"))
