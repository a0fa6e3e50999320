"""Where did an op run? Phase first, then the parameter label, then what it was doing.

Used by the layout report to turn a cpu op into "backward: lm_head grad accumulation" or
"optimizer: lm_head transpose_add". Sources, most specific first:
- commscope regions enclosing the op in time on the same rank (`forward`, `backward`, `optimizer`,
  `opt.phaseN`, `update:<label>`, `commscope:<label>:<phase>`, any record_function range);
- enclosing cpu ops on the same thread (`torch::autograd::AccumulateGrad`, `Optimizer.step#…`);
- the parameter an AccumulateGrad belongs to: its shape when only one labelled parameter has it, else the
  post-accumulate-grad hook order of that micro-step (the k-th AccumulateGrad of a backward is the k-th
  hook), accepted only when every pair's shape agrees.
Regions are matched by time only (not thread): on CUDA the autograd engine runs backward on its own
thread while the `backward` range is on the main thread.

Invariant: a mismatch is "deliberate" only when an enclosing range or op names one of the explicit
transpose primitives (`transpose_add`, `transpose_copy`): the code asked for the layout change.
"""
from __future__ import annotations

import math
import re
from typing import Iterable

import pandas as pd

PHASES = ("forward", "backward", "optimizer")
DELIBERATE = re.compile(r"transpose_(add|copy)")
ACCUMULATE = "torch::autograd::AccumulateGrad"


def _enclosing_regions(op: pd.Series, regions: pd.DataFrame | None) -> list[str]:
    if regions is None or regions.empty:
        return []
    r = regions[(regions["rank"] == op["rank"]) & (regions["start_ns"] <= op["start_ns"])
                & (regions["end_ns"] >= op["start_ns"])]
    r = r.assign(_len=r["end_ns"] - r["start_ns"]).sort_values(["_len"], ascending=False)
    return [str(n) for n in r["name"]]


def _enclosing_ops(op: pd.Series, ops: pd.DataFrame) -> pd.DataFrame:
    o = ops[(ops["rank"] == op["rank"]) & (ops["tid"] == op["tid"]) & (ops["start_ns"] <= op["start_ns"])
            & (ops["end_ns"] >= op["end_ns"])]
    o = o[o.index != op.name]
    return o.assign(_len=o["end_ns"] - o["start_ns"]).sort_values("_len", ascending=False)


def _shape_labels(shape: list, param_shapes: dict[str, Iterable[int]] | None) -> list[str]:
    if not param_shapes:
        return []
    return [lab for lab, s in param_shapes.items() if list(s) == list(shape)]


def _hook_label(acc: pd.Series, ops: pd.DataFrame, regions: pd.DataFrame | None, hooks: pd.DataFrame | None,
                param_shapes: dict | None) -> str | None:
    """Label of one AccumulateGrad by its position among the AccumulateGrads of its backward region.

    The micro-step is the region's own when recorded, else its position among the step's `backward`
    ranges (a trace's record_function ranges carry no micro-step; they are on the ops' host clock, while
    events.jsonl regions on CUDA are GPU-timed and would not contain host-side ops)."""
    if hooks is None or hooks.empty or regions is None or regions.empty:
        return None
    mine = regions[(regions["rank"] == acc["rank"]) & (regions["name"] == "backward")]
    bw = mine[(mine["start_ns"] <= acc["start_ns"]) & (mine["end_ns"] >= acc["start_ns"])]
    if len(bw) != 1:
        return None
    bw = bw.iloc[0]
    micro = bw.get("micro_step")
    if micro is None or pd.isna(micro):
        same_step = mine[mine["step"] == bw["step"]].sort_values("start_ns")
        micro = list(same_step.index).index(bw.name)
    accs = ops[(ops["rank"] == acc["rank"]) & (ops["name"] == ACCUMULATE) & (ops["start_ns"] >= bw["start_ns"])
               & (ops["start_ns"] <= bw["end_ns"])].sort_values("start_ns")
    h = hooks[(hooks["rank"] == acc["rank"]) & (hooks["step"] == bw["step"])
              & (hooks["micro_step"] == micro)].sort_values("position")
    if len(h) != len(accs) or len(h) == 0:
        return None
    labels = list(h["label"])
    if param_shapes:
        # Element counts, not shapes: a bank's recorded shape may be a view of its parameter.
        for (_, a), lab in zip(accs.iterrows(), labels):
            dims = a["dims"][0] if a["dims"] is not None and len(a["dims"]) else None
            if lab not in param_shapes or dims is None or math.prod(param_shapes[lab]) != math.prod(dims):
                return None
    pos = list(accs.index).index(acc.name)
    return labels[pos]


def attribute(op: pd.Series, ops: pd.DataFrame, regions: pd.DataFrame | None = None,
              hooks: pd.DataFrame | None = None,
              param_shapes: dict[str, Iterable[int]] | None = None,
              step_regions: pd.DataFrame | None = None) -> tuple[str, bool]:
    """("phase: label activity", deliberate) for one row of the `ops` frame.

    `regions` name the enclosing ranges (best on the ops' own clock: the trace's record_function
    ranges); `step_regions` (default `regions`) carry step/micro_step for the hook-order match."""
    step_regions = regions if step_regions is None else step_regions
    region_names = _enclosing_regions(op, regions)
    parents = _enclosing_ops(op, ops)
    parent_names = [str(n) for n in parents["name"]]
    names = region_names + parent_names

    phase = next((n for n in region_names if n in PHASES), None)
    if phase is None:
        if any(ACCUMULATE in n for n in parent_names):
            phase = "backward"
        elif any(n.startswith(("opt.", "update:", "Optimizer.step")) for n in names):
            phase = "optimizer"

    label = None
    for n in reversed(region_names):
        m = re.match(r"^(?:update:|commscope:)([^:]+)", n)
        if m:
            label = m.group(1)
            break

    deliberate_hit = next((DELIBERATE.search(n).group(0) for n in reversed(names) if DELIBERATE.search(n)), None)
    acc = parents[parents["name"] == ACCUMULATE]
    if deliberate_hit:
        activity = deliberate_hit
        if label is None:  # the destination's shape names the parameter when it is unique
            dst = op["dims"][0] if op["dims"] is not None and len(op["dims"]) else []
            cands = _shape_labels(dst, param_shapes)
            label = cands[0] if len(cands) == 1 else None
    elif len(acc):
        activity = "grad accumulation"
        a = acc.iloc[-1]
        shape = a["dims"][0] if a["dims"] is not None and len(a["dims"]) else []
        cands = _shape_labels(shape, param_shapes)
        if label is None:
            label = cands[0] if len(cands) == 1 else _hook_label(a, ops, step_regions, hooks, param_shapes)
        if label is None:
            label = ("one of " + "|".join(cands)) if cands else f"param {tuple(shape)}"
    elif label is not None:
        activity = "update"
    else:
        inner = [n for n in names if n not in PHASES and not n.startswith("ProfilerStep#")]
        activity = inner[-1] if inner else op["name"]
    where = " ".join(p for p in (label, activity) if p)
    return (f"{phase}: {where}" if phase else where), deliberate_hit is not None
