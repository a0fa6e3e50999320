"""Hook firing order of a run: per rank, step and micro-step, which labels' gradients became ready in
which order, whether that order is the same everywhere, and the optimizer's scatter_order next to it.

Why it matters: with hook-driven communication the firing order *is* the launch order of the reduces,
and NCCL needs every rank to launch collectives of one communicator in the same order; with the explicit
schedule it shows how far the fixed scatter_order is from the order in which gradients are ready.

Beside them, `launch_order`: the order in which the gradient reductions (phase "reduce" or "allreduce")
were really launched, on the lowest rank in its last recorded step, and the run's `comm_schedule` (the
reference trainer's): under "hooks" the Adam labels launch from these hooks as their gradients become
ready, so scatter_order is not their launch order; the recorded one says what happened either way.

Invariant: an order is a list of labels sorted by the recorded `position` (the hook's count within its
micro-step); the reference order is the most common one, ties broken by first occurrence.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commscope.analyze.problems import loading_problems, run_reports
from commscope.errors import UserError


@dataclass
class OrderGroup:
    """One distinct order and the (rank, step, micro_step) where it was seen."""

    order: list[str]
    members: list[tuple[int, int, int | None]] = field(default_factory=list)


@dataclass
class HookOrders:
    world_size: int
    orders: dict[int, list[dict]]  # rank → [{"step", "micro_step", "order"}] in (step, micro_step) order
    scatter_order: list[str]
    launch_order: list[str] = field(default_factory=list)  # recorded reduce launches (module docstring)
    launch_where: tuple[int, int] | None = None  # (rank, step) the launch order was read on
    comm_schedule: str | None = None  # config.json's args.comm_schedule, when the run says
    # what the orders cannot show: ranks that did not complete, and records the loader could not read (a
    # rank missing from `orders` is explained here, as every other command explains it)
    run_reports: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # rank → the step its run stopped in (its hooks left out: _without_unfinished_steps)
    unfinished: dict[int, int] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        """What one order is of: "micro-step" where some rank's step holds more than one (gradient
        accumulation), else "step" (one backward per step: saying micro-steps would suggest accumulation)."""
        for entries in self.orders.values():
            steps = [e["step"] for e in entries]
            if len(set(steps)) < len(steps) or any(e.get("micro_step") not in (None, 0) for e in entries):
                return "micro-step"
        return "step"

    @property
    def launched_in_ready_order(self) -> list[str] | None:
        """The most labels launched in the order their gradients became ready: the longest common
        subsequence of `launch_order` and the reference order, over the labels both hold (all of them when
        the reduces follow the hooks); None when fewer than two labels are in both."""
        common = set(self.launch_order) & set(self.reference)
        if len(common) < 2:
            return None
        a = [x for x in self.launch_order if x in common]
        b = [x for x in self.reference if x in common]
        # a few dozen labels at most: the quadratic table is nothing
        best = [[[] for _ in range(len(b) + 1)] for _ in range(len(a) + 1)]
        for i in range(len(a) - 1, -1, -1):
            for j in range(len(b) - 1, -1, -1):
                best[i][j] = ([a[i], *best[i + 1][j + 1]] if a[i] == b[j] else
                              max(best[i + 1][j], best[i][j + 1], key=len))
        return best[0][0]

    @property
    def launch_labels(self) -> list[str]:
        """The labels of `launch_order` that also fired a hook (the ones an order can be compared on)."""
        ready = set(self.reference)  # grouping every rank's orders once, not once per label
        return [x for x in self.launch_order if x in ready]

    @property
    def launch_labels_without_hook(self) -> list[str]:
        """The labels of `launch_order` whose hook never fired (DDP's `ddp_bucket0`, each bucket holding
        several parameters; a collective labelled by its call site): their launches cannot be compared with
        the gradients' ready order."""
        ready = set(self.reference)
        return [x for x in dict.fromkeys(self.launch_order) if x not in ready]

    @property
    def out_of_ready_order(self) -> list[str]:
        """The compared labels not in `launched_in_ready_order`, in launch order."""
        kept = set(self.launched_in_ready_order or ())
        return [x for x in self.launch_labels if x not in kept]

    @property
    def groups(self) -> list[OrderGroup]:
        """Distinct orders, most frequent first (the first one is the reference)."""
        seen: dict[tuple[str, ...], OrderGroup] = {}
        for rank in sorted(self.orders):
            for e in self.orders[rank]:
                key = tuple(e["order"])
                seen.setdefault(key, OrderGroup(list(key))).members.append((rank, e["step"], e["micro_step"]))
        counts = Counter({k: len(g.members) for k, g in seen.items()})
        first = {k: i for i, k in enumerate(seen)}
        return [seen[k] for k in sorted(seen, key=lambda k: (-counts[k], first[k]))]

    @property
    def differences(self) -> list[dict]:
        """How each order but the reference differs from it: the reference's labels whose hook did not fire
        (`missing`), labels the reference has not (`extra`), and whether the labels both hold fired in
        another relative order (`reordered`); with the order's members. A missing hook (a parameter that
        got no gradient) and a real reordering are different faults."""
        ref = self.reference
        out = []
        for g in self.groups[1:]:
            here, there = set(g.order), set(ref)
            both = [x for x in g.order if x in there]
            out.append({"members": [list(m) for m in g.members], "missing": [x for x in ref if x not in here],
                        "extra": [x for x in g.order if x not in there],
                        "reordered": both != [x for x in ref if x in here]})
        return out

    @property
    def consistent(self) -> bool:
        return len(self.groups) <= 1

    @property
    def reference(self) -> list[str]:
        groups = self.groups
        return groups[0].order if groups else []

    def to_json(self) -> dict:
        return {
            "world_size": self.world_size,
            "orders": {str(r): self.orders[r] for r in sorted(self.orders)},
            "consistent": self.consistent,
            "differences": self.differences,
            "scatter_order": self.scatter_order,
            "launch_order": self.launch_order,
            "launched_in_ready_order": self.launched_in_ready_order,
            "launch_labels_without_hook": self.launch_labels_without_hook,
            "launch_order_rank_step": list(self.launch_where) if self.launch_where else None,
            "comm_schedule": self.comm_schedule,
            "run_reports": self.run_reports,
            "problems": self.problems,
            "unfinished_steps": {str(r): s for r, s in sorted(self.unfinished.items())},
        }


def _opt_int(x) -> int | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return int(x)


def hook_orders_from_trace(trace) -> HookOrders:
    """Build orders from a loaded run (`commscope.load.Trace`)."""
    hooks = trace.hooks
    if trace.source != "run":
        raise UserError(f"{trace.path} is a Kineto trace; hook order is only recorded in commscope run directories")
    if len(hooks) == 0:
        raise UserError(f"{trace.path} has no hook records (commscope run records them with --trace light or "
                        "full; a script using commscope.record, with rec.watch(labelled_params))")
    hooks, unfinished = _without_unfinished_steps(hooks, trace.steps)
    if len(hooks) == 0:
        raise UserError(f"{trace.path}: its hook records are all in steps the run stopped in before they finished "
                        "(only some hooks had fired), so no whole order is known")
    orders: dict[int, list[dict]] = {}
    df = hooks.assign(micro_key=hooks["micro_step"].fillna(-1)).sort_values(
        ["rank", "step", "micro_key", "position"], kind="stable")
    for (rank, step, _), g in df.groupby(["rank", "step", "micro_key"], sort=False):
        orders.setdefault(int(rank), []).append(
            {"step": int(step), "micro_step": _opt_int(g["micro_step"].iloc[0]), "order": list(g["label"])})
    cfg = trace.config.get("config", {}) if isinstance(trace.config, dict) else {}
    args = cfg.get("args") if isinstance(cfg.get("args"), dict) else {}
    launch, where = _launch_order(trace)
    schedule = args.get("comm_schedule")
    return HookOrders(trace.world_size, orders, list(cfg.get("scatter_order") or []), launch, where,
                      schedule if isinstance(schedule, str) else None, run_reports(trace), loading_problems(trace),
                      unfinished)


def _without_unfinished_steps(hooks, steps) -> tuple[Any, dict[int, int]]:
    """The hooks of steps their rank finished, and rank → the step left out: a run stopped mid-backward
    (Ctrl-C, a crash) fired only some hooks of its last step, which would read as hooks that never fire.
    A step is unfinished on a rank past its last finished one; a rank that finished none while others did
    (it stopped in its first step) has every step unfinished; where no rank records steps (a script
    without rec.step) every hook is kept."""
    finished = steps[steps["step"] >= 0] if len(steps) else steps
    if not len(hooks) or not len(finished):
        return hooks, {}
    last = finished.groupby("rank")["step"].max()
    after = hooks["step"].to_numpy() > hooks["rank"].map(last).fillna(-np.inf).to_numpy()
    if not after.any():
        return hooks, {}
    cut = hooks[after]
    return hooks[~after], {int(r): int(s) for r, s in cut.groupby("rank")["step"].min().items()}


REDUCE_PHASES = ("reduce", "allreduce")


def _launch_order(trace) -> tuple[list[str], tuple[int, int] | None]:
    """Labels in the order their gradient reductions were launched (first launch of each), on the lowest
    rank in its last recorded step; ([], None) when nothing was recorded."""
    c = trace.collectives
    if not len(c):
        return [], None
    c = c[c["phase"].isin(REDUCE_PHASES) & c["label"].notna() & (c["step"] >= 0)]
    if not len(c):
        return [], None
    rank = int(c["rank"].min())
    mine = c[c["rank"] == rank]
    step = int(mine["step"].max())
    mine = mine[mine["step"] == step].sort_values("call_ns", kind="stable")
    return list(dict.fromkeys(str(x) for x in mine["label"])), (rank, step)
