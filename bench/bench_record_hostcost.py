"""Host-side cost of light recording on the CUDA code path, measured on a CPU machine.

A fake `torch.cuda.Event` (an "instant GPU": each event is passed when recorded, as in
tests/unit/test_record_local.py) and a fake current stream stand in for CUDA, so every Python line of the
recorder's CUDA branch runs and is timed, but the CUDA driver calls themselves cost nothing here: the
figures are a lower bound of the host cost on a GPU machine (add one driver call per event record and
per resolve, ~1-3 µs each).

Per step, at the event density of bench_record_overhead.py / the reference trainer (26 hooks, 20
regions, 14 collectives on a 1-rank gloo group): `in_step` is the host time the recorder adds inside the
step (the GPU is ahead there, so on a GPU-bound step it is hidden), `flush` the wall and main-thread CPU time from the step's
body end to the step context's return (resolve the events left, common axis, encode, write): on a GPU it
runs after the step's sync, when the GPU is idle, so it is fully exposed in the step time. With the
default flush="step" the records the GPU has passed are resolved and encoded at each region's end, inside
the step: with this instant fake GPU that is every record but those after the last region, the best
case; on a real GPU, what it has passed by then.

With `--flush overlap` the write of each step moves into the next step's first region: `flush` is then the
step end alone and the write is part of `in_step` (on a GPU it runs while the GPU works).

Run: python bench/bench_record_hostcost.py [--steps 300] [--flush overlap]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import benchlib  # noqa: F401  (puts the repo on sys.path: measure this checkout, not an installed copy)
from benchlib import single_rank_group
import commscope.recording.timing as timing
from commscope.recording import NullRecorder, Recorder
from instrumented_model.model import LABELS  # the reference trainer's 13 labels

_perf = time.perf_counter_ns


class FakeCudaEvent:
    calls = {"create": 0, "record": 0, "query": 0, "synchronize": 0, "elapsed_time": 0}  # driver calls

    def __init__(self, enable_timing=False):
        self.calls["create"] += 1
        self.t = None

    def record(self, stream=None):
        self.calls["record"] += 1
        self.t = _perf()

    def query(self):
        self.calls["query"] += 1
        return self.t is not None

    def synchronize(self):
        self.calls["synchronize"] += 1

    def elapsed_time(self, end):
        self.calls["elapsed_time"] += 1
        return (end.t - self.t) / 1e6


class FakeStream:
    cuda_stream = 7


_STREAM = FakeStream()


def one_step(rec, params, step, grads, x):
    """The recorder calls of one training step; the 'work' is a tiny backward to fire the hooks."""
    marks = {}
    with rec.step(step) as st:
        for m in range(2):
            rec.set_micro_step(m)
            with rec.region("forward"):
                loss = sum((p * x).sum() for p in params.values())
            with rec.region("backward"):
                loss.backward()
        rec.set_micro_step(None)
        with rec.region("optimizer"):
            with rec.region("opt.phase1"):
                handles = {lb: rec.collective(dist.all_reduce, grads[lb], label=lb, phase="reduce")
                           for lb in LABELS}
                loss_h = rec.collective(dist.all_reduce, grads["attn"], label="loss", phase="allreduce")
            with rec.region("opt.phase2"):
                for lb in reversed(LABELS):
                    handles[lb].wait()
                    with rec.region(f"update:{lb}"):
                        params[lb].grad = None
            loss_h.wait()
        st.loss = 0.0
        marks["body_end"], marks["body_end_cpu"] = _perf(), time.thread_time_ns()
    marks["exit"], marks["exit_cpu"] = _perf(), time.thread_time_ns()
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--flush", choices=("step", "overlap"), default="step",
                    help="Recorder flush= (overlap: the write runs in the next step's first region, in_step)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    timing.torch.cuda.Event = FakeCudaEvent  # this process never touches real CUDA
    timing.torch.cuda.current_stream = lambda device=None: _STREAM
    torch.cuda.is_available = lambda: True  # the Recorder accepts device="cuda" only where CUDA is
    with single_rank_group(torch.device("cpu")):  # gloo: the recorder's collectives run for real
        params = {lb: torch.zeros(4, requires_grad=True) for lb in LABELS}
        grads = {lb: torch.zeros(4) for lb in LABELS}
        x = torch.ones(4)
        with tempfile.TemporaryDirectory(prefix="commscope-hostcost-") as tmp:
            light = Recorder(tmp, rank=0, world_size=1, device="cuda", backend="gloo", flush=args.flush)
            plain = NullRecorder()
            calls0 = None
            res = {"plain": [], "light": [], "flush": [], "flush_cpu": []}
            step = 0
            for i in range(args.warmup + args.steps):
                if i == args.warmup:
                    calls0 = dict(FakeCudaEvent.calls)
                for name, rec in (("plain", plain), ("light", light)):
                    rec.watch(params)  # hooks only while light steps run (outside the timed window)
                    t0 = _perf()
                    marks = one_step(rec, params, step, grads, x)
                    rec.unwatch()
                    step += 1
                    if i >= args.warmup:
                        res[name].append(marks["body_end"] - t0)
                        if name == "light":
                            res["flush"].append(marks["exit"] - marks["body_end"])
                            res["flush_cpu"].append(marks["exit_cpu"] - marks["body_end_cpu"])
            calls = {k: (v - calls0[k]) / args.steps for k, v in FakeCudaEvent.calls.items()}
            light.close()
    us = {k: statistics.median(v) / 1e3 for k, v in res.items()}
    print(f"steps {args.steps}: in-step plain {us['plain']:.1f} us, light {us['light']:.1f} us "
          f"(recorder adds {us['light'] - us['plain']:.1f} us in the step), step-end flush {us['flush']:.1f} us "
          f"wall, {us['flush_cpu']:.1f} us main-thread CPU (medians; 26 hooks, 20 regions, 14 collectives per step)")
    print("CUDA event calls per step: " + ", ".join(f"{k} {v:g}" for k, v in calls.items()))


if __name__ == "__main__":
    main()
