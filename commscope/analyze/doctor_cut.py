"""The doctor's rule for a profiler trace whose rank stops mid-step: the Kineto form of a hang.

A run directory proves a hang by absence (analyze.doctor.check_hang): every rank records every collective it
launches. A profiler window cannot: it starts and stops at step boundaries that the ranks reach at different
moments, so a collective near a window's edge may be in one rank's trace and not in another's. What a window
does hold is whole steps (`ProfilerStep#N`): in an SPMD job every rank launches the same collectives in a
step. So a rank whose trace has step N but stops launching inside it, while every other rank goes on to
launch more collectives of the same process group in that same step, stopped there: hung (or crashed), or
its trace was cut short. The trace alone cannot tell those apart, and the summary says so.

Why a missing launch inside a covered step is evidence: a collective whose kernel ran after the profiler
stopped keeps its row (its `record_param_comms` op is in the window, its times unknown: load.kineto_comms),
and the window's start only shifts which kernels of collectives launched before it appear; neither takes
launches out of a step the trace has.

Invariants: pure function of the launch table and the trace's steps; fires only when every rank of the job
is present, the cut ranks are fewer than half the group, every other member launched each missing
collective (at least two: one record short is too little to tell a stop from a lost record), and those
collectives belong to a step the cut rank's own trace has.
"""
from __future__ import annotations

import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, iso_ns, ranks_text
from commscope.load.frames import Trace


def check_trace_cut(lt: pd.DataFrame, trace: Trace) -> Diagnosis | None:
    if trace.source != "kineto" or not len(lt) or len(trace.ranks) < 2 or len(trace.ranks) < trace.world_size:
        return None
    steps_of = trace.steps.groupby("rank")["step"].agg(lambda s: set(int(x) for x in s if x >= 0)) \
        if len(trace.steps) else pd.Series(dtype=object)
    best = None
    for group, g in lt.groupby("group"):
        last = g.groupby("rank")["seq"].max()
        top = int(last.max())
        cut = last[last < top]
        if not len(cut) or 2 * len(cut) >= len(last):
            continue
        others = g[~g["rank"].isin(cut.index)]
        for rank, mine in cut.items():
            # the collectives the others launched after this rank's last one, each by every other member
            after = others[others["seq"] > mine]
            if after.groupby("seq")["rank"].nunique().min() < len(last) - len(cut):
                continue
            first = after[after["seq"] == after["seq"].min()].sort_values("rank").iloc[0]
            step = None if pd.isna(first["step"]) else int(first["step"])
            if step is None or step not in steps_of.get(rank, set()):
                continue  # the rank's trace does not cover that step: a window edge, not a stop
            if after["seq"].nunique() < 2:
                continue  # one record short: too little to tell a stop from a lost record
            key = (int(first["seq"]), str(group), int(rank))
            if best is None or key < best[0]:
                best = (key, first, int(mine), top, int(after["seq"].nunique()))
    if best is None:
        return None
    (seq, group, rank), first, mine, top, missing = best
    step = int(first["step"])
    peers = sorted(set(int(r) for r in lt[(lt["group"] == group) & (lt["seq"] == seq)]["rank"]))
    return Diagnosis(
        "hang", [rank], label=first["label"], step=step, sequence=seq, group=group, sources=["trace"],
        evidence=[{"rank": rank, "last_seq": mine, "launched": False},
                  {"ranks": ranks_text(peers), "seq": seq, "launched": True, "call_ns": iso_ns(first["call_ns"])}],
        details={"basis": "a rank's trace stops inside a step the others go on in", "last_seq": mine,
                 "group_last_seq": top, "missing": missing},
        summary=(f"hang: rank {rank}'s trace stops in step {step} after seq {mine} of group {group}, while rank(s) "
                 f"{ranks_text(peers)} go on to launch {missing} more collective(s) of that group in the same step, "
                 f"the first {first['op']} '{first['label']}' (seq {seq}). In a profiler trace a rank that stops "
                 "launching inside a step is hung or crashed there, or its trace was cut short: the trace alone "
                 "cannot tell which; its logs or a commscope run directory can."))
