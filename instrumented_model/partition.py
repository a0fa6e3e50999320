"""Who updates each NorMuon matrix: the trainer's `--optimizer-partition bank|alpha-lpt`.

`bank` is the optimizer's default even split of each bank's matrix view (rank r updates the r-th
contiguous chunk, padding matrices included). `alpha-lpt` asks the planner (commscope.plan, Canzona's
α-balanced partition with the Polar Express flop cost) for an owner per matrix, so ranks update whole
matrices in possibly unequal numbers and the slowest rank's share shrinks; the optimizer then moves
gradients and weights with packed collectives (instrumented_model.optimizer, docs/plan.md).

Invariant: `matrix_owners` depends only on the model config, world size, partition name and α — every
rank computes the same owners without communicating. Every real matrix gets exactly one owner in
[0, world_size); the mlp bank's padding matrices (zero, never read by the model) get -1 (not updated).
"""
from __future__ import annotations

from typing import Any

PARTITIONS = ("bank", "alpha-lpt")


def matrix_owners(cfg: Any, world_size: int, partition: str, alpha: float = 1.0
                  ) -> dict[str, tuple[int, ...]] | None:
    """label → owner rank of each matrix of the bank's matrix view (bank order); None for `bank`."""
    from commscope.errors import UserError

    if partition not in PARTITIONS:
        raise UserError(f"--optimizer-partition must be one of {', '.join(PARTITIONS)}, not {partition!r}")
    if partition == "bank" or world_size == 1:
        return None
    from commscope.plan import assign, matrices_for_config, matrix_costs

    matrices = matrices_for_config(cfg)
    owner = assign("alpha_lpt", matrices, world_size, matrix_costs(matrices, "flops"), alpha=alpha).owner
    out: dict[str, list[int]] = {}
    for m in matrices:  # bank order within each label (matrices_for_config's invariant)
        out.setdefault(m.label, []).append(owner.get(m.index, -1))
    return {label: tuple(owners) for label, owners in out.items()}
