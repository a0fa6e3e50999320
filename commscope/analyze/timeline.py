"""Where each rank's time went, per step, and how much of its communication was hidden.

`step_breakdown(trace)`: per (rank, step) window [start, end) of the steps frame — device time on GPU
traces (the kernels launched in the step, load.device_steps; `basis` says how the window was found), the
host's step range elsewhere: `compute_ns` (union of compute intervals, minus blocked waits for run
directories), `exposed_comm_ns` (communication time not covered by compute: GPU — union of communication
kernels minus compute; run directories — union of blocked waits, each up to its collective's end), `idle_ns`
(the rest) and the three as % of the step; exposed and idle are NaN in a step holding a collective whose
exposed time is unknown (exposure.exposure_unknown). The sets are the rank's whole compute and communication, clipped to the window.

`comm_overlap_by_rank(trace)`: per rank, |comm ∩ comp| / |comm|, the share of communication time during
which the rank also computed (docs/analysis.md, "The quantities"). Which sets, by input:
- GPU traces (device kernels present), `hta_like=True` (default), HTA's `get_comm_comp_overlap` rule so the
  numbers compare (`hta_comm_overlap_pct_by_rank`): communication = kernels named `^nccl.*Kernel`;
  computation = other kernels except memcpy/memset/sync, plus the cpu ops that carry an `args.stream`
  (Triton launch ops: host time, which HTA treats as GPU activity); only kernels whose launch is in the
  trace and happened before the last `ProfilerStep` started count (HTA drops the last, possibly incomplete
  step and kernels launched before the window) — where the ranks' traces name two or more profiler steps
  between them; with one or none HTA cuts nothing and neither does this (`trace.extra["hta_step_cut"]`).
- GPU traces, `hta_like=False` (`device_comm_overlap_pct_by_rank`): all device kernels of the trace, the
  same classification, no cpu ops.
- no device kernels (run directories without a profiler trace, CPU traces; `recorded_comm_overlap_pct_by_rank`):
  comm = [launch or start, end) of each collective as recorded; comp = the rank's compute set
  (exposure.compute_sets). `hta_like` changes nothing there.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze import intervals as iv
from commscope.analyze.exposure import _compute_sets_rel, collective_span, exposure_unknown, to_rel, wait_spans
from commscope.load.frames import Trace, origin_ns, rel

BREAKDOWN_COLS = ["rank", "step", "start_ns", "end_ns", "step_ns", "compute_ns", "exposed_comm_ns", "idle_ns",
                  "compute_pct", "exposed_comm_pct", "idle_pct", "basis"]


def comm_sets(trace: Trace, o: int) -> dict[int, iv.Intervals]:
    """Per rank, the normalized set of time its communication was in flight (ns since `o`)."""
    c = trace.collectives
    _, start, end = collective_span(c, o)
    return iv.merge_by_rank(c["rank"].to_numpy(), start, end, trace.ranks)


def _exposed_sets(trace: Trace, comp: dict, comm: dict, o: int) -> dict[int, iv.Intervals]:
    if trace.source != "run":
        return {rank: iv.subtract(comm[rank], comp[rank]) for rank in trace.ranks}
    w_rank, w_start, w_end = wait_spans(trace.collectives, o)
    return iv.merge_by_rank(w_rank, w_start, w_end, trace.ranks)


def step_breakdown(trace: Trace, comp: dict | None = None) -> pd.DataFrame:
    """`comp`: exposure.compute_sets(trace) if already computed."""
    o = origin_ns(trace)
    comp = _compute_sets_rel(trace, o) if comp is None else to_rel(comp, o)
    comm = comm_sets(trace, o)
    exposed = _exposed_sets(trace, comp, comm, o)
    steps = trace.steps
    s_rank, s_step = steps["rank"].to_numpy(), steps["step"].to_numpy()
    s_start, s_end = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    s_qs, s_qe = rel(steps["start_ns"], o), rel(steps["end_ns"], o)
    # a steps frame built by hand, not through frames.frame(), may lack `basis`: its windows are the host's
    s_basis = steps["basis"].to_numpy(dtype=object) if "basis" in steps else np.full(len(steps), "host", object)
    cols: dict[str, list] = {c: [] for c in BREAKDOWN_COLS[:8]}
    basis: list = []
    step_rows = iv.rows_by_rank(s_rank)
    for rank in trace.ranks:
        m = step_rows.get(rank)
        if m is None:
            continue
        qs, qe = s_qs[m], s_qe[m]
        c_ns = iv.covered(qs, qe, comp[rank])
        e_ns = iv.covered(qs, qe, iv.subtract(exposed[rank], comp[rank]))
        span = qe - qs
        for c, v in zip(cols.values(), (np.full(len(qs), rank), s_step[m], s_start[m], s_end[m], span, c_ns, e_ns,
                                        np.maximum(span - c_ns - e_ns, 0.0))):
            c.append(v)
        basis.append(s_basis[m])
    if not cols["rank"]:
        return pd.DataFrame(columns=BREAKDOWN_COLS)
    # one frame from the per-rank arrays (not one frame per rank and a concat: same columns, 5× cheaper)
    out = pd.DataFrame({c: np.concatenate(v) for c, v in cols.items()})
    out["basis"] = np.concatenate(basis)
    # a step holding a collective of unknown exposed time (exposure.exposure_unknown) has unknown exposed
    # communication, and so unknown idle time: NaN, not the part that happens to be known
    c = trace.collectives
    unknown = exposure_unknown(c)
    if unknown.any():
        hit = pd.MultiIndex.from_arrays([out["rank"], out["step"]]).isin(
            pd.MultiIndex.from_arrays([c["rank"].to_numpy()[unknown], c["step"].to_numpy()[unknown]]))
        out.loc[hit, ["exposed_comm_ns", "idle_ns"]] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in ("compute", "exposed_comm", "idle"):
            out[f"{k}_pct"] = 100.0 * out[f"{k}_ns"] / out["step_ns"]
    return out[BREAKDOWN_COLS]


def has_device_kernels(trace: Trace) -> bool:
    """Whether comm_overlap_by_rank reads device kernels (HTA's rule and the device-only number apply) or
    the recorded collective spans (neither applies)."""
    return len(trace.kernels) > 0 and "hta_compute" in trace.kernels.columns


def comm_overlap_by_rank(trace: Trace, hta_like: bool = True, comp: dict | None = None) -> pd.DataFrame:
    """Per rank: comm_ns, overlapped_ns, comm_overlap_pct (module docstring: which sets, by input).
    `comp`: exposure.compute_sets(trace) if already computed (used for traces without GPU kernels)."""
    rows = []
    k = trace.kernels
    gpu = has_device_kernels(trace)
    extra = trace.extra.get("hta_cpu_stream_ops") if hta_like else None
    cutoff = trace.extra.get("hta_cutoff_ns", {})
    cut_steps = trace.extra.get("hta_step_cut", True)
    o = origin_ns(trace)
    comp_fallback = None if gpu else (_compute_sets_rel(trace, o) if comp is None else to_rel(comp, o))
    comm_fallback = None if gpu else comm_sets(trace, o)
    if gpu:  # whole columns once, then each rank's rows by position (see exposure._compute_sets_rel)
        k_start, k_end = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
        k_comm, k_comp = k["is_comm"].to_numpy(bool), k["hta_compute"].to_numpy(bool)
        k_rows = iv.rows_by_rank(k["rank"].to_numpy())
        if extra is not None:
            x_start, x_end = extra["start_ns"].to_numpy(), extra["end_ns"].to_numpy()
            x_rows = iv.rows_by_rank(extra["rank"].to_numpy())
    for rank in trace.ranks:
        if gpu:
            sel = k_rows.get(rank, iv.NO_ROWS)
            if hta_like and cut_steps:
                cut = cutoff.get(rank)
                if cut is None:
                    sel = iv.NO_ROWS
                else:  # launched before the cutoff; unknown launches (NaN) never are
                    sel = sel[rel(k["launch_ns"].array[sel], cut) < 0]
            comm = iv.merge(k_start[sel[k_comm[sel]]], k_end[sel[k_comm[sel]]])
            cs, ce = k_start[sel[k_comp[sel]]], k_end[sel[k_comp[sel]]]
            if extra is not None:
                cut = cutoff.get(rank)
                xr = x_rows.get(rank, iv.NO_ROWS)
                x = xr[x_start[xr] < (cut if cut is not None else -1)] if cut_steps else xr
                cs = np.concatenate([cs, x_start[x]])
                ce = np.concatenate([ce, x_end[x]])
            comp = iv.merge(cs, ce)
        else:
            comm, comp = comm_fallback[rank], comp_fallback[rank]
        total = iv.length(comm)
        both = iv.length(iv.intersect(comm, comp))
        rows.append({"rank": rank, "comm_ns": total, "overlapped_ns": both,
                     "comm_overlap_pct": 100.0 * both / total if total > 0 else np.nan})
    return pd.DataFrame(rows, columns=["rank", "comm_ns", "overlapped_ns", "comm_overlap_pct"])
