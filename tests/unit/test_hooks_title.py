"""`commscope hooks`' header counts steps (micro-steps with gradient accumulation) per rank, not summed over
ranks."""
from __future__ import annotations

import shutil

from bad_inputs import invoke
from commscope.analyze.hooks_order import HookOrders
from paths import TESTS
from reports.hooks_terminal import title


def _orders(per_rank: dict[int, int], world: int, micro: int = 2) -> HookOrders:
    """`per_rank[r]` orders on rank r, `micro` to a step (the last step may hold fewer)."""
    return HookOrders(world, {r: [{"step": i // micro, "micro_step": i % micro, "order": ["a", "b"]}
                                  for i in range(n)] for r, n in per_rank.items()}, [])


def test_title_counts_per_rank():
    assert title(_orders({r: 40 for r in range(8)}, 8)) == "Hook firing order: 40 micro-steps on each of 8 ranks"
    assert title(_orders({0: 40, 1: 40}, 8)) == "Hook firing order: 40 micro-steps on each of 2 of 8 ranks"
    assert title(_orders({0: 40, 1: 39, 2: 40}, 3)) == ("Hook firing order, 3 ranks; micro-steps per rank: "
                                                        "rank 0 40, rank 1 39, rank 2 40")
    assert title(_orders({3: 1}, 4)) == "Hook firing order: 1 step on rank 3 (1 of 4 ranks)"  # nothing accumulated
    assert title(_orders({0: 5}, 1)) == "Hook firing order: 5 micro-steps on rank 0"
    # one backward a step (no accumulation): the orders are steps
    assert title(_orders({0: 3, 1: 3}, 2, micro=1)) == "Hook firing order: 3 steps on each of 2 ranks"
    assert title(_orders({0: 3, 1: 2}, 2, micro=1)) == "Hook firing order, 2 ranks; steps per rank: rank 0 3, rank 1 2"


def test_cli_header_on_a_recorded_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    code, out, err = invoke(["hooks", str(run)])
    assert code == 0, err
    # 2 ranks, 3 steps of one backward each: 3 per rank, not 6
    assert out.splitlines()[0] == "Hook firing order: 3 steps on each of 2 ranks"
    assert "The order is the same on every rank and step." in out


def test_the_ready_order_line_says_it_is_a_relative_order_not_a_run():
    """Launched e, a, c, b, d against gradients ready a, b, c, d, e: a, b, d (or a, c, d) keep their
    relative order without being adjacent in the launch order; the line says so."""
    from rich.console import Console

    from reports.hooks_terminal import print_hook_orders

    orders = HookOrders(2, {r: [{"step": 0, "micro_step": 0, "order": list("abcde")}] for r in (0, 1)}, [],
                        launch_order=list("eacbd"), launch_where=(0, 0))
    console = Console(record=True, width=400)
    print_hook_orders(orders, console)
    text = " ".join(console.export_text().split())
    ready = orders.launched_in_ready_order
    assert len(ready) == 3 and ready[0] == "a" and ready[-1] == "d"
    assert (f"The most labels launched in the same relative order as their gradients became ready: "
            f"{', '.join(ready)} (3 of 5, not necessarily one after another); out of that order: ") in text


def test_a_hook_that_did_not_fire_is_told_from_a_reordering():
    """Rank 1's step 1 has no hook for c (no gradient reached it): the rest fired in the reference order,
    which is not a launch-order mismatch. Rank 2's step 0 fired b before a: that one is."""
    from rich.console import Console

    from reports.hooks_terminal import print_hook_orders

    abc = list("abcd")
    orders = HookOrders(3, {0: [{"step": s, "micro_step": None, "order": abc} for s in (0, 1)],
                            1: [{"step": 0, "micro_step": None, "order": abc},
                                {"step": 1, "micro_step": None, "order": list("abd")}],
                            2: [{"step": 0, "micro_step": None, "order": list("bacd")},
                                {"step": 1, "micro_step": None, "order": abc}]}, [])
    assert orders.reference == abc
    assert orders.differences == [
        {"members": [[1, 1, None]], "missing": ["c"], "extra": [], "reordered": False},
        {"members": [[2, 0, None]], "missing": [], "extra": [], "reordered": True}]
    assert orders.to_json()["differences"] == orders.differences
    console = Console(record=True, width=400)
    print_hook_orders(orders, console)
    text = " ".join(console.export_text().split())
    assert "rank 1: s1: no hook fired for c (no gradient reached it)." in text
    assert ("rank 2: s0: the labels both hold fired in another order (with hook-launched collectives, a "
            "launch-order mismatch across ranks).") in text


def test_reduces_labelled_by_bucket_are_shown_not_compared():
    """A DDP run: the reduces are ddp_bucket0 and ddp_bucket1, the hooks fire per parameter. No label is in
    both, so no order is compared; a line says why, and the JSON lists the labels without a hook."""
    from rich.console import Console

    from reports.hooks_terminal import print_hook_orders

    params = ["4.bias", "4.weight", "2.bias", "2.weight"]
    orders = HookOrders(2, {r: [{"step": 0, "micro_step": None, "order": params}] for r in (0, 1)}, [],
                        launch_order=["ddp_bucket0", "ddp_bucket1"], launch_where=(0, 0))
    assert orders.launched_in_ready_order is None
    assert orders.launch_labels_without_hook == orders.to_json()["launch_labels_without_hook"] == [
        "ddp_bucket0", "ddp_bucket1"]
    console = Console(record=True, width=400)
    print_hook_orders(orders, console)
    text = " ".join(console.export_text().split())
    assert ("The reduces' labels (ddp_bucket0, ddp_bucket1) name no parameter whose hook fired (DDP buckets hold "
            "several parameters each; other collectives may be labelled by their call site): their launch order is "
            "shown beside the gradients' ready order, not compared with it.") in text
    # labels that fired hooks are compared as before, and the line is not printed
    same = HookOrders(2, orders.orders, [], launch_order=params, launch_where=(0, 0))
    assert same.launch_labels_without_hook == [] and same.launched_in_ready_order == params
