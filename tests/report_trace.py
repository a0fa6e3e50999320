"""A hand-built Trace (docs/frames.md columns) with known numbers, shared by the report and export tests.

Two ranks, steps 0 and 1 of 1 ms each (ns: step s starts at T + s·1e6). Per step and rank: compute
`forward` [0, 400 µs) and `backward` [450, 800 µs); collectives on the GPU-style timing:
  attn reduce_scatter executes [300, 500 µs) → 100 µs not covered by compute (400–450), 100 µs hidden;
  mlp  all_gather     executes [820, 900 µs) → fully exposed (80 µs);
  scalars all_reduce  executes [850, 870 µs) on another stream, overlapping mlp in time (lane split).
Rank 1 launches everything 10 µs later than rank 0. One hook per step and rank.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from commscope.load.frames import Trace

T = 1_764_670_000_000_000_000
US = 1_000

COLL_COLS = ["rank", "step", "label", "phase", "op", "bytes", "dtype", "group", "group_size", "seq", "call_ns",
             "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns", "stream", "timing", "end_at_wait"]


def make_trace(ranks=(0, 1), steps=(0, 1), style="kineto"):
    """style "kineto": device-timed collectives without waits (timing "kernel"), exposure from compute gaps;
    style "run": as a CUDA run directory records them (timing "cuda_event"); attn and mlp are waited on
    for their last 20 µs (wait_ns = end − 20 µs, wait_end_ns = end), scalars is never waited on."""
    step_rows, comp, coll, hooks, regions = [], [], [], [], []
    for r in ranks:
        seq = 0
        for s in steps:
            b = T + s * 1_000 * US
            step_rows.append(dict(rank=r, step=s, start_ns=b, end_ns=b + 1_000 * US, loss=5.0 - s))
            for name, a, e in (("forward", 0, 400), ("backward", 450, 800)):
                comp.append(dict(rank=r, step=s, name=name, start_ns=b + a * US, end_ns=b + e * US, stream=7,
                                 kind="kernel"))
                regions.append(dict(rank=r, step=s, micro_step=0, name=name, start_ns=b + a * US, end_ns=b + e * US))
            lag = 10 * US * r
            for label, op, phase, nbytes, call, start, end, stream in (
                ("attn", "reduce_scatter", "reduce", 8_000_000, 290, 300, 500, 23),
                ("mlp", "all_gather", "gather", 4_000_000, 810, 820, 900, 23),
                ("scalars", "all_reduce", "allreduce", 4_096, 840, 850, 870, 24),
            ):
                coll.append(dict(rank=r, step=s, label=label, phase=phase, op=op, bytes=nbytes, dtype="bf16",
                                 group="0", group_size=len(ranks), seq=seq, call_ns=b + call * US + lag,
                                 return_ns=b + call * US + lag + 5 * US, wait_ns=np.nan, wait_end_ns=np.nan,
                                 start_ns=b + start * US, end_ns=b + end * US, stream=stream, timing="kernel"))
                if style == "run":
                    coll[-1]["timing"] = "cuda_event"
                    if label != "scalars":
                        coll[-1].update(wait_ns=b + (end - 20) * US, wait_end_ns=b + end * US)
                seq += 1
            hooks.append(dict(rank=r, step=s, micro_step=0, label="attn", position=0, t_ns=b + 420 * US))
    return Trace(
        source="run" if style == "run" else "kineto", path="/nonexistent/hand-built", world_size=len(ranks), backend="nccl", device="cuda",
        config={"args": {"preset": "tiny"}, "scatter_order": ["attn", "mlp", "scalars"]},
        ranks=list(ranks), problems=[],
        steps=pd.DataFrame(step_rows), compute=pd.DataFrame(comp), collectives=pd.DataFrame(coll, columns=COLL_COLS),
        regions=pd.DataFrame(regions), hooks=pd.DataFrame(hooks),
        ops=pd.DataFrame(), kernels=pd.DataFrame(), extra={},
    )


def write_run_dir(trace, path) -> None:
    """Serialize a hand-built trace as a commscope run directory (docs/run_format.md), so the real loader
    and the CLI can be tested on known numbers."""
    from rundirs import write_run

    def clean(d: dict) -> dict:
        return {k: (None if isinstance(v, float) and np.isnan(v) else v.item() if hasattr(v, "item") else v)
                for k, v in d.items()}

    events = {}
    for r in trace.ranks:
        lines = []
        for s in sorted(trace.steps["step"].unique()):
            sel = lambda df: df[(df["rank"] == r) & (df["step"] == s)].to_dict("records")  # noqa: E731
            for h in sel(trace.hooks):
                lines.append({"kind": "hook", **clean(h)})
            for g in sel(trace.regions):
                lines.append({"kind": "region", **clean(g), "timing": "cuda_event"})  # style "run" traces
            for c in sel(trace.collectives):
                c = clean(c)
                c.pop("stream", None)
                lines.append({"kind": "collective", **c})
            for st in sel(trace.steps):
                lines.append({"kind": "step", **clean(st), "tokens": 1024})
        events[r] = lines
    write_run(path, events, world_size=trace.world_size,
              summary={"status": "completed", "backend": "nccl", "device": "cuda",
                       "steps": len(trace.steps["step"].unique()), "exit_code": 0},
              config=trace.config,
              meta={"hostname": "test", "pid": 1, "backend": "nccl", "device": "cuda",
                    "torch": "2.13.0", "clock": {"offset_ns": 0, "error_ns": 0, "method": "barrier-allgather", "rounds": 1},
                    "started_ns": T},
              status={"status": "completed", "error": None, "last_step": int(trace.steps["step"].max())})
