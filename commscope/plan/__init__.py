"""Plan who computes each NorMuon matrix update (the Canzona paper, arXiv:2602.06079, §3): strategies and
their costs.

`make_plan(matrices, world_size, ...)` runs every strategy on the list from
`matrices_for_config(cfg)` and evaluates it; `assign(name, ...)` gives one strategy's
`Assignment.owner` (`dict[matrix_index] -> rank`), the interface a partitioned optimizer consumes.
"""
from __future__ import annotations

from commscope.plan.alpha import alpha_lpt, max_over_mean
from commscope.plan.evaluate import DEFAULT_TFLOPS, TimeModel, evaluate
from commscope.plan.matrices import Matrix, matrices_for_config, matrix_costs, polar_flops
from commscope.plan.strategies import Assignment, bank, lpt, megabatch, round_robin, snake
from commscope.plan.tp import DEFAULT_CAPACITY_BYTES, micro_groups

STRATEGIES = ("bank", "round_robin", "snake", "lpt", "alpha_lpt", "megabatch")


def assign(name: str, matrices: list[Matrix], world_size: int, costs: dict[int, float],
           alpha: float = 1.0) -> Assignment:
    if name == "bank":
        return bank(matrices, world_size)
    if name == "round_robin":
        return round_robin(matrices, world_size)
    if name == "snake":
        return snake(matrices, world_size)
    if name == "lpt":
        return lpt(matrices, world_size, costs)
    if name == "alpha_lpt":
        return alpha_lpt(matrices, world_size, costs, alpha)
    if name == "megabatch":
        return megabatch(matrices, world_size)
    raise ValueError(f"unknown strategy {name!r}")


def evaluate_strategy(name: str, matrices: list[Matrix], world_size: int, *, cost: str = "flops",
                      alpha: float = 1.0, time_model: TimeModel = TimeModel(), bytes_per_element: int = 4) -> dict:
    """One strategy's evaluation (see make_plan); ValueError when it cannot lay out these matrices."""
    costs = matrix_costs(matrices, cost, time_model.measured_ms)
    return evaluate(assign(name, matrices, world_size, costs, alpha), matrices, costs, time_model, bytes_per_element)


def evaluate_owners(owners: dict[str, list[int]], matrices: list[Matrix], world_size: int, *, cost: str = "flops",
                    time_model: TimeModel = TimeModel(), bytes_per_element: int = 4) -> dict:
    """The evaluation of an assignment a run recorded (label → owner rank of each matrix in bank order, -1 for
    a matrix nobody updates), as make_plan evaluates a strategy's; ValueError where it does not fit these
    matrices."""
    owner = {}
    for m in matrices:
        ranks = owners.get(m.label)
        if ranks is None or len(ranks) <= m.bank_index:
            raise ValueError(f"the recorded owners of {m.label} do not cover its matrix {m.bank_index}")
        r = int(ranks[m.bank_index])
        if not -1 <= r < world_size:
            raise ValueError(f"the recorded owner {r} of {m.label} matrix {m.bank_index} is not a rank of {world_size}")
        if r >= 0:
            owner[m.index] = r
    costs = matrix_costs(matrices, cost, time_model.measured_ms)
    return evaluate(Assignment("run", world_size, owner), matrices, costs, time_model, bytes_per_element)


def make_plan(matrices: list[Matrix], world_size: int, *, cost: str = "flops", alpha: float = 1.0,
              time_model: TimeModel = TimeModel(), bytes_per_element: int = 4) -> dict:
    """The JSON-shaped plan: matrices with their costs, and every strategy evaluated; a strategy that
    cannot lay out these matrices on `world_size` ranks is listed in "unavailable" with the reason."""
    costs = matrix_costs(matrices, cost, time_model.measured_ms)
    strategies, unavailable = {}, {}
    for name in STRATEGIES:
        try:
            a = assign(name, matrices, world_size, costs, alpha)
        except ValueError as e:  # e.g. the bank layout at a world size that does not divide a bank
            unavailable[name] = str(e)
            continue
        strategies[name] = evaluate(a, matrices, costs, time_model, bytes_per_element)
    return {
        "world_size": world_size,
        "cost": cost,
        "alpha": alpha,
        "bytes_per_element": bytes_per_element,
        "time_model": time_model.describe(),
        "matrices": [
            {"index": m.index, "label": m.label, "bank_index": m.bank_index, "shape": [m.rows, m.cols],
             "padding": m.padding, "numel": m.numel, "bytes": m.numel * bytes_per_element,
             "flops": polar_flops(m.rows, m.cols), "cost": costs[m.index], "time_ms": time_model.ms(m)}
            for m in matrices
        ],
        "strategies": strategies,
        "unavailable": unavailable,
    }


__all__ = ["STRATEGIES", "Assignment", "DEFAULT_CAPACITY_BYTES", "DEFAULT_TFLOPS", "Matrix", "TimeModel",
           "assign", "evaluate_strategy", "make_plan", "matrices_for_config", "matrix_costs", "max_over_mean", "micro_groups"]
