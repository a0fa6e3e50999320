"""The doctor's rule for a profiler trace whose rank stops mid-step: the Kineto form of a hang.

A run directory proves a hang by absence (analyze.doctor.check_hang): every rank records every collective it
launches. A profiler window cannot: it starts and stops at step boundaries that the ranks reach at different
moments, so a collective near a window's edge may be in one rank's trace and not in another's. What a window
does hold is whole steps (`ProfilerStep#N`): in an SPMD job every rank launches the same collectives in a
step. So a rank whose trace has step N but stops launching inside it, while every other rank goes on to
launch more collectives of the same process group in that same step, stopped there: hung (or crashed), or
its trace was cut short. The trace alone cannot tell those apart, and the summary says so.

Invariants: pure function of the launch table and the trace's steps; fires only when every rank of the job
is present, the cut ranks are fewer than half the group, every other member launched each missing
collective, those collectives belong to a step the cut rank's own trace has, and that step is shorter on
the cut rank than on any other (`_shortest`): a collective whose kernel ran after the profiler stopped is
missing from a step that still runs its whole length, and is no stop.
"""
from __future__ import annotations

import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, iso_ns, ranks_text
from commscope.load.frames import Trace


def _host_span(steps: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each step row's host start and end (the ProfilerStep range; device windows where no host range)."""
    start, end = steps["start_ns"], steps["end_ns"]
    if "host_start_ns" in steps:
        start = steps["host_start_ns"].fillna(start)
        end = steps["host_end_ns"].fillna(end)
    return pd.to_numeric(start, errors="coerce"), pd.to_numeric(end, errors="coerce")


def _shortest(steps: pd.DataFrame, rank: int, step: int) -> bool:
    """Whether `rank`'s step `step` (its host ProfilerStep range) is shorter than every other rank's: its
    trace stops inside the step. A collective whose kernel ran after the profiler stopped is missing from a
    step that still runs its whole length, and host timelines differ by milliseconds from rank to rank, so
    a launch's offset within the step says less than the step's own end."""
    start, end = _host_span(steps)
    at = (steps["step"] == step).to_numpy()
    length = (end - start)[at]
    ranks = steps["rank"][at].astype(int).to_numpy()
    own, others = length[ranks == rank], length[ranks != rank]
    return bool(len(own) and len(others) and float(own.iloc[0]) < float(others.min()))


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
            if not _shortest(trace.steps, rank, step):
                continue  # its step runs its course: a record lost at the window's end, not a stop
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
