"""The matrices NorMuon updates, as the planner sees them, and their costs.

The reference trainer keeps all matrix-optimizer weights in two banks (instrumented_model/model.py): `attn`
(L_attn, 4D, D) viewed as 4·L_attn square (D, D) matrices, and `mlp` (L_pad, 2, 4D, D) viewed as 2·L_pad
(4D, D) matrices, the last 2·(L_pad − L) of which are padding (zeros that exist only so the bank splits
evenly). Each bank is a *bucket*: matrices contiguous in memory, in bank order.

Invariants: `index` is the position in `matrices_for_config`'s list (attn bank first, then mlp) and is
the key of every assignment; padding matrices are listed (flag `padding`) so the bank's geometry is
explicit, but only strategies that keep the bank layout compute them.

Cost models (the unit each strategy balances):
- numel: elements of the matrix;
- flops: Polar Express (5 iterations) on the matrix made wide (r = min(m, n) rows, c = max columns):
  per iteration A = XXᵀ (2r²c), A² (2r³), (bA + cA²)X (2r²c), so 5·(4r²c + 2r³). Elementwise work
  (momentum, neuron normalization) is O(mn) and left out;
- measured: per-matrix milliseconds calibrated from a run (commscope.plan.calibrate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

POLAR_ITERATIONS = 5


@dataclass(frozen=True)
class Matrix:
    index: int
    label: str  # the bank's label: "attn" | "mlp"
    bank_index: int  # position within the bank's matrix view
    rows: int
    cols: int
    padding: bool = False

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)


def polar_flops(rows: int, cols: int, iterations: int = POLAR_ITERATIONS) -> int:
    r, c = min(rows, cols), max(rows, cols)
    return iterations * (4 * r * r * c + 2 * r ** 3)


def matrices_for_config(cfg: Any) -> list[Matrix]:
    """Every matrix of the attn and mlp banks of a ModelConfig-like object (model_dim, num_layers,
    attn_layers, mlp_layers_padded), attn bank first, each in bank order."""
    d, n_layers, l_pad = int(cfg.model_dim), int(cfg.num_layers), int(cfg.mlp_layers_padded)
    n_attn = 4 * len(tuple(cfg.attn_layers))
    out: list[Matrix] = []
    for k in range(n_attn):
        out.append(Matrix(len(out), "attn", k, d, d))
    for k in range(2 * l_pad):
        # mlp view (2·L_pad, 4D, D): matrix k is layer k // 2; layers >= num_layers are padding.
        out.append(Matrix(len(out), "mlp", k, 4 * d, d, padding=k // 2 >= n_layers))
    return out


def buckets(matrices: list[Matrix]) -> list[list[Matrix]]:
    """Matrices grouped by bank label, each in bank order (the physical, reduce-scatter geometry)."""
    by_label: dict[str, list[Matrix]] = {}
    for m in matrices:
        by_label.setdefault(m.label, []).append(m)
    return [sorted(ms, key=lambda m: m.bank_index) for ms in by_label.values()]


def matrix_costs(matrices: list[Matrix], cost: str, measured_ms: dict[tuple[int, int], float] | None = None
                 ) -> dict[int, float]:
    """Cost of each matrix (index → cost) in the chosen model's unit; padding costs as if computed."""
    if cost == "numel":
        return {m.index: float(m.numel) for m in matrices}
    if cost == "flops":
        return {m.index: float(polar_flops(m.rows, m.cols)) for m in matrices}
    if cost == "measured":
        if not measured_ms:
            raise ValueError("measured cost needs per-shape timings")
        return {m.index: float(measured_ms[m.shape]) for m in matrices}
    raise ValueError(f"unknown cost model {cost!r}")
