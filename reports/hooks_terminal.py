"""`commscope hooks`' terminal output: the gradient-hook firing order per rank beside the optimizer's
scatter_order, with the ranks / micro-steps whose order differs from the most common one marked.

Renders a `commscope.analyze.hooks_order.HookOrders` as it is (groups, reference order and consistency come
from the analysis); `_members` only words where an order was seen. The labels are the user's parameter
names: they reach rich as Text (never markup), and fold within their columns rather than push the
position column out.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from commscope.analyze.hooks_order import HookOrders, OrderGroup
from commscope.util.ranges import int_ranges
from commscope.util.text import counted


def _members(group: OrderGroup, orders: HookOrders) -> str:
    """Compact description of where an order was seen: whole ranks when they are uniform."""
    by_rank: dict[int, list[tuple[int, int | None]]] = {}
    for rank, step, micro in group.members:
        by_rank.setdefault(rank, []).append((step, micro))
    whole = [r for r, sm in by_rank.items() if len(sm) == len(orders.orders[r])]
    parts = []
    if whole:
        parts.append(("rank " if len(whole) == 1 else "ranks ") + ",".join(map(str, sorted(whole))))
    for r in sorted(set(by_rank) - set(whole)):
        parts.append(f"rank {r}: " + " ".join(f"s{s}" + ("" if m is None else f"µ{m}") for s, m in by_rank[r]))
    return "; ".join(parts)


def title(orders: HookOrders) -> str:
    """What was recorded, per rank: "40 micro-steps on each of 8 ranks" (a rank's count, not the sum over
    ranks; "steps" without gradient accumulation, HookOrders.unit); the count of each rank when they differ;
    "of W" when fewer than the world's ranks recorded."""
    unit = orders.unit
    per_rank = {r: len(v) for r, v in sorted(orders.orders.items())}
    k, world = len(per_rank), orders.world_size
    of_world = f" of {world}" if k < world else ""
    counts = set(per_rank.values())
    if k == 1:
        (rank, n), = per_rank.items()
        return f"Hook firing order: {counted(n, unit)} on rank {rank}" + (f" (1 of {world} ranks)" if of_world else "")
    if len(counts) == 1:
        return f"Hook firing order: {counted(counts.pop(), unit)} on each of {k}{of_world} ranks"
    each = ", ".join(f"rank {r} {n}" for r, n in per_rank.items())
    return f"Hook firing order, {k}{of_world} ranks; {unit}s per rank: {each}"


def print_hook_orders(orders: HookOrders, console: Console) -> None:
    groups = orders.groups
    ref = orders.reference
    console.print(Text(title(orders)), highlight=False)
    table = Table()
    table.add_column("#", justify="right", no_wrap=True)
    if orders.scatter_order:
        table.add_column("scatter_order", style="cyan", overflow="fold")
    if orders.launch_order:
        rank, step = orders.launch_where
        table.add_column(Text(f"reduces launched (rank {rank}, step {step})"), style="magenta", overflow="fold")
    for i, g in enumerate(groups):
        head = _members(g, orders)
        table.add_column(Text(head) if i == 0 else Text.assemble(("differs", "bold red"), " ", head), overflow="fold")
    depth = max([len(g.order) for g in groups] + [len(orders.scatter_order), len(orders.launch_order)])
    for pos in range(depth):
        row = [str(pos)]
        if orders.scatter_order:
            row.append(Text(orders.scatter_order[pos] if pos < len(orders.scatter_order) else ""))
        if orders.launch_order:
            row.append(Text(orders.launch_order[pos] if pos < len(orders.launch_order) else ""))
        for i, g in enumerate(groups):
            label = g.order[pos] if pos < len(g.order) else "—"
            differs = i > 0 and (pos >= len(ref) or ref[pos] != label)
            row.append(Text(label, style="bold red" if differs else ""))
        table.add_row(*row)
    console.print(table)
    if orders.consistent:
        console.print(Text(f"The order is the same on every rank and {orders.unit}.", style="green"))
    else:
        console.print(Text.assemble((f"{len(groups)} different orders:", "bold red"), " ranks/steps whose order "
                                    "differs from the most common one are marked."))
        for g, d in zip(groups[1:], orders.differences):
            said = []
            if d["missing"]:
                said.append(f"no hook fired for {', '.join(d['missing'])} (no gradient reached it)")
            if d["extra"]:
                said.append(f"hooks fired for {', '.join(d['extra'])}, which the others' orders lack")
            if d["reordered"]:
                said.append("the labels both hold fired in another order (with hook-launched collectives, a "
                            "launch-order mismatch across ranks)")
            console.print(Text(f"{_members(g, orders)}: {'; '.join(said)}."))
    if orders.unfinished:
        by_step: dict[int, list[int]] = {}
        for rank, step in sorted(orders.unfinished.items()):
            by_step.setdefault(step, []).append(rank)
        where = "; ".join(f"step {s} on rank{'s' if len(rs) > 1 else ''} {int_ranges(rs)}" for s, rs in by_step.items())
        console.print(Text(f"Left out: the hooks of {where}, the step the run stopped in before it finished "
                           "(only some hooks had fired)."))
    ready, others = orders.launched_in_ready_order, orders.out_of_ready_order
    unmatched = orders.launch_labels_without_hook
    if unmatched and ready is None:
        console.print(Text(f"The reduces' labels ({', '.join(unmatched[:4])}{', …' if len(unmatched) > 4 else ''}) "
                           "name no parameter whose hook fired (DDP buckets hold several parameters each; other "
                           "collectives may be labelled by their call site): their launch order is shown beside the "
                           "gradients' ready order, not compared with it."))
    how = f" (comm_schedule {orders.comm_schedule})" if orders.comm_schedule else ""
    if ready is not None and not others:
        console.print(Text(f"The reduces were launched in the order their gradients became ready{how} (the order "
                           "only: how long after its gradient each was launched is not compared here)."))
    elif ready is not None:
        console.print(Text(f"The reduces were launched in another order than the gradients became ready{how}. "
                           f"The most labels launched in the same relative order as their gradients became "
                           f"ready: {', '.join(ready)} ({len(ready)} of {len(ready) + len(others)}, not "
                           f"necessarily one after another); out of that order: {', '.join(others)}."))
    elif orders.scatter_order and ref and ref != orders.scatter_order[: len(ref)]:
        console.print(Text("scatter_order (the explicit schedule's launch order of the reduces) differs from the "
                           "gradient-ready order."))
