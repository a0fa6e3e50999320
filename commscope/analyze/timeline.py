"""Where each rank's time went, per step, and how much of its communication was hidden.

`step_breakdown(trace)`: per (rank, step) window [start, end): `compute_ns` (union of compute intervals,
minus blocked waits for run directories), `exposed_comm_ns` (communication time not covered by compute:
GPU — union of communication kernels minus compute; run directories — union of blocked waits), `idle_ns`
(the rest) and the three as % of the step.

`overlap_by_rank(trace)`: HTA's `get_comm_comp_overlap` definition, so the numbers compare:
|comm ∩ comp| / |comm| with comm = union of communication intervals and comp = union of computation
intervals. For GPU traces both come from device activity classified exactly as HTA does: communication
= kernels named `^nccl.*Kernel`; computation = other kernels except memcpy/memset/sync. With
`hta_like=True` (default) HTA's trace filtering is reproduced too: only kernels whose launch is in the
trace and happened before the last `ProfilerStep` started count (HTA drops the last, possibly incomplete
step and kernels launched before the window), and the cpu ops that carry an `args.stream` (Triton launch
ops) count as computation, because HTA treats every event with a stream as GPU activity.
`hta_like=False` uses all device kernels of the trace and no cpu ops: the device-only number.
CPU traces / run directories: comm = [launch or start, end) of each collective; comp = compute set.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze import intervals as iv
from commscope.analyze.exposure import _compute_sets_rel, collective_span, to_rel
from commscope.load.frames import Trace, origin_ns, rel

BREAKDOWN_COLS = ["rank", "step", "start_ns", "end_ns", "step_ns", "compute_ns", "exposed_comm_ns", "idle_ns",
                  "compute_pct", "exposed_comm_pct", "idle_pct"]


def comm_sets(trace: Trace, o: int) -> dict[int, iv.Intervals]:
    """Per rank, the normalized set of time its communication was in flight (ns since `o`)."""
    out = {}
    c = trace.collectives
    for rank in trace.ranks:
        r = c[c["rank"] == rank]
        _, start, end = collective_span(r, o)
        out[rank] = iv.merge(start, end)
    return out


def _exposed_sets(trace: Trace, comp: dict, comm: dict, o: int) -> dict[int, iv.Intervals]:
    waits = trace.collectives[trace.collectives["wait_ns"].notna() & trace.collectives["wait_end_ns"].notna()]
    out = {}
    for rank in trace.ranks:
        w = waits[waits["rank"] == rank]
        if trace.source == "run":
            out[rank] = iv.merge(rel(w["wait_ns"], o), rel(w["wait_end_ns"], o))
        else:
            out[rank] = iv.subtract(comm[rank], comp[rank])
    return out


def step_breakdown(trace: Trace, comp: dict | None = None) -> pd.DataFrame:
    """`comp`: exposure.compute_sets(trace) if already computed."""
    o = origin_ns(trace)
    comp = _compute_sets_rel(trace, o) if comp is None else to_rel(comp, o)
    comm = comm_sets(trace, o)
    exposed = _exposed_sets(trace, comp, comm, o)
    rows = []
    for rank in trace.ranks:
        st = trace.steps[trace.steps["rank"] == rank]
        if not len(st):
            continue
        qs, qe = rel(st["start_ns"], o), rel(st["end_ns"], o)
        c_ns = iv.covered(qs, qe, comp[rank])
        e_ns = iv.covered(qs, qe, iv.subtract(exposed[rank], comp[rank]))
        span = qe - qs
        rows.append(pd.DataFrame({"rank": rank, "step": st["step"].to_numpy(), "start_ns": st["start_ns"].to_numpy(),
                                  "end_ns": st["end_ns"].to_numpy(),
                                  "step_ns": span, "compute_ns": c_ns, "exposed_comm_ns": e_ns,
                                  "idle_ns": np.maximum(span - c_ns - e_ns, 0.0)}))
    if not rows:
        return pd.DataFrame(columns=BREAKDOWN_COLS)
    out = pd.concat(rows, ignore_index=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in ("compute", "exposed_comm", "idle"):
            out[f"{k}_pct"] = 100.0 * out[f"{k}_ns"] / out["step_ns"]
    return out[BREAKDOWN_COLS]


def overlap_by_rank(trace: Trace, hta_like: bool = True) -> pd.DataFrame:
    """Per rank: comm_ns, overlapped_ns, overlap_pct (HTA's comp_comm_overlap_pctg definition)."""
    rows = []
    k = trace.kernels
    gpu = len(k) > 0 and "hta_compute" in k.columns
    extra = trace.extra.get("hta_cpu_stream_ops") if hta_like else None
    cutoff = trace.extra.get("hta_cutoff_ns", {})
    o = origin_ns(trace)
    comp_fallback = None if gpu else _compute_sets_rel(trace, o)
    comm_fallback = None if gpu else comm_sets(trace, o)
    for rank in trace.ranks:
        if gpu:
            kr = k[k["rank"] == rank]
            if hta_like:
                cut = cutoff.get(rank)
                kr = kr[(kr["launch_ns"] < cut).fillna(False).astype(bool)] if cut is not None else kr.iloc[:0]
            comm = iv.merge(kr.loc[kr["is_comm"], "start_ns"].to_numpy(), kr.loc[kr["is_comm"], "end_ns"].to_numpy())
            cm = kr["hta_compute"].to_numpy(bool)
            cs, ce = kr["start_ns"].to_numpy()[cm], kr["end_ns"].to_numpy()[cm]
            if extra is not None:
                cut = cutoff.get(rank)
                x = extra[(extra["rank"] == rank) & (extra["start_ns"] < (cut if cut is not None else -1))]
                cs = np.concatenate([cs, x["start_ns"].to_numpy()])
                ce = np.concatenate([ce, x["end_ns"].to_numpy()])
            comp = iv.merge(cs, ce)
        else:
            comm, comp = comm_fallback[rank], comp_fallback[rank]
        total = iv.length(comm)
        both = iv.length(iv.intersect(comm, comp))
        rows.append({"rank": rank, "comm_ns": total, "overlapped_ns": both,
                     "overlap_pct": 100.0 * both / total if total > 0 else np.nan})
    return pd.DataFrame(rows, columns=["rank", "comm_ns", "overlapped_ns", "overlap_pct"])
