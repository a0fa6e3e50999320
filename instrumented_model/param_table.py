"""The parameter table of the unified optimizer: one row per labelled parameter says which update rule
it gets (NorMuon or Adam), how its gradient is communicated (sharded or replicated) and its Adam betas
and lr/wd multipliers — what would otherwise be scattered over param groups and if-chains.

Values follow the modded-nanogpt record of 2026-01-18. The record left lr_mul and
wd_mul implicit, so they are 1.0 everywhere; the columns exist so an experiment changes one row.

Two orders drive the communication schedule:
- SCATTER_ORDER (the table's row order): the order in which gradient reduces are launched. NCCL runs
  collectives of one communicator in launch order, so this is in effect the communication schedule.
- WORK_ORDER: the order in which the optimizer waits for each reduce, computes the update and launches
  the all-gather — small, fast parameters first while the big bank reduces are still in flight.

Invariant: both orders are permutations of the labels present. Any permutation is correct (the tied
embed fold/copy does not depend on them: embed is folded into lm_head before lm_head's reduce whatever
the order, and copied back in phase 3 after lm_head's gather); the orders only change timing.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Literal

from commscope.errors import UserError


@dataclass(frozen=True)
class ParamSpec:
    """How one labelled parameter is optimized and communicated."""

    optim: Literal["normuon", "adam"]
    # sharded: reduce_scatter → update own shard → all_gather; replicated: all_reduce → full update.
    comms: Literal["sharded", "replicated"]
    adam_betas: tuple[float, float] | None = None
    lr_mul: float = 1.0
    wd_mul: float = 1.0
    # NorMuon banks: how the bank is viewed (without a copy) as a stack of whole matrices.
    # "last2": (..., rows, cols) → (N, rows, cols); "square": (..., k·cols, cols) → (N, cols, cols),
    # e.g. attn (L_attn, 4D, D) → (4·L_attn, D, D) so Q, K, V and O are orthogonalized separately.
    matrix: Literal["last2", "square"] = "last2"

    def matrix_view(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The (N, rows, cols) matrix view of a NorMuon bank of this shape."""
        if len(shape) < 2:
            raise ValueError(f"NorMuon needs a matrix or a bank of matrices, got shape {shape}")
        rows, cols = (shape[-1], shape[-1]) if self.matrix == "square" else shape[-2:]
        n, rem = divmod(math.prod(shape), rows * cols)
        if rem:
            raise ValueError(f"shape {shape} is not a stack of ({rows}, {cols}) matrices")
        return (n, rows, cols)

    def row(self, label: str) -> dict:
        """The row as written into config.json."""
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas) if self.adam_betas else None
        return {"label": label, **d}


_GATE = (0.9, 0.99)
_VE = (0.75, 0.95)
_HEAD = (0.5, 0.95)

# Row order is the scatter order (the record's "Ordering dictates when to launch reduces").
PARAM_TABLE: dict[str, ParamSpec] = {
    "attn": ParamSpec("normuon", "sharded", matrix="square"),
    "mlp": ParamSpec("normuon", "sharded"),
    "scalars": ParamSpec("adam", "replicated", _GATE),
    "ve0": ParamSpec("adam", "sharded", _VE),
    "ve1": ParamSpec("adam", "sharded", _VE),
    "ve2": ParamSpec("adam", "sharded", _VE),
    "smear_gate": ParamSpec("adam", "replicated", _GATE),
    "skip_gate": ParamSpec("adam", "replicated", _GATE),
    "attn_gate_bank": ParamSpec("adam", "replicated", _GATE),
    "ve_gate_bank": ParamSpec("adam", "replicated", _GATE),
    "x0_lambdas": ParamSpec("adam", "replicated", (0.65, 0.95)),
    "lm_head": ParamSpec("adam", "sharded", _HEAD),  # before embed: embed's grad is folded into it
    "embed": ParamSpec("adam", "sharded", _HEAD),  # last: skipped while tied
}

SCATTER_ORDER: tuple[str, ...] = tuple(PARAM_TABLE)

WORK_ORDER: tuple[str, ...] = (
    "scalars", "smear_gate", "skip_gate", "attn_gate_bank", "ve_gate_bank", "x0_lambdas",  # small, fast
    "ve0", "ve1", "ve2",  # medium
    "lm_head", "embed",  # lm_head's gather must land before the tied embed copy
    "attn", "mlp",  # Polar Express: largest work last so it overlaps the other gathers
)


def check_order(name: str, order: Iterable[str], labels: Iterable[str]) -> tuple[str, ...]:
    """Return `order` as a tuple if it is a permutation of `labels`, else raise UserError."""
    order = tuple(order)
    want = set(labels)
    dup = sorted({x for x in order if order.count(x) > 1})
    unknown = sorted(set(order) - want)
    missing = sorted(want - set(order))
    if dup or unknown or missing:
        parts = [f"duplicated {dup}" if dup else "", f"unknown {unknown}" if unknown else "",
                 f"missing {missing}" if missing else ""]
        raise UserError(f"{name} must list every label exactly once: " + "; ".join(p for p in parts if p))
    return order
