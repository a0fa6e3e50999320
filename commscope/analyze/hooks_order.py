"""Hook firing order of a run: per rank, step and micro-step, which labels' gradients became ready in
which order, whether that order is the same everywhere, and the optimizer's scatter_order next to it.

Why it matters: with hook-driven communication the firing order *is* the launch order of the reduces,
and NCCL needs every rank to launch collectives of one communicator in the same order; with the explicit
schedule it shows how far the fixed scatter_order is from the order in which gradients are ready.

Invariant: an order is a list of labels sorted by the recorded `position` (the hook's count within its
micro-step); the reference order is the most common one, ties broken by first occurrence.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

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
            "scatter_order": self.scatter_order,
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
    orders: dict[int, list[dict]] = {}
    df = hooks.assign(micro_key=hooks["micro_step"].fillna(-1)).sort_values(
        ["rank", "step", "micro_key", "position"], kind="stable")
    for (rank, step, _), g in df.groupby(["rank", "step", "micro_key"], sort=False):
        orders.setdefault(int(rank), []).append(
            {"step": int(step), "micro_step": _opt_int(g["micro_step"].iloc[0]), "order": list(g["label"])})
    cfg = trace.config.get("config", {}) if isinstance(trace.config, dict) else {}
    return HookOrders(trace.world_size, orders, list(cfg.get("scatter_order") or []))


def load_hook_orders(path: str | os.PathLike) -> HookOrders:
    from commscope.load import load_path  # the general loader (docs/frames.md)

    return hook_orders_from_trace(load_path(os.fspath(path)))

