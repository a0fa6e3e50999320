"""What an assignment costs: per-rank load, balance, padding waste, bytes moved and predicted makespan.

Definitions (per rank r; "owned" = matrices in `owner` plus the padding work in `padding[r]`):
- per_rank_load: Σ cost of owned work in the balancing cost model's unit; max_over_mean = max / mean;
- padding_waste: share of all computed cost spent on padding (0 when no padding is computed);
- per_rank_ms: Σ time of owned work under the time model (flops / assumed throughput, or measured);
  predicted_makespan_ms = max over ranks (the optimizer step waits for the slowest rank's gather);
- recv_bytes: the reduced gradients of the owned matrices (one copy each); send_bytes: the updated
  owned matrices to each of the other R − 1 ranks. Algorithm-independent logical volumes;
- collective_bytes: the all_gather output if done with equal-sized collectives
  (all_gather_into_tensor / reduce_scatter_tensor need equal shards, so uneven owners pad every shard
  to the largest): R × max_r owned bytes. For the bank split this is the bank's size.
With one rank nothing is reduced or gathered: the three volumes are 0.
"""
from __future__ import annotations

from dataclasses import dataclass

from commscope.plan.alpha import max_over_mean
from commscope.plan.matrices import Matrix, polar_flops
from commscope.plan.strategies import Assignment

# Assumed sustained bf16 matmul throughput of one H100/H200-class GPU on 768-wide Polar Express matmuls
# (peak dense bf16 is ~989 TFLOP/s; small matmuls reach a fraction). An assumption, not a measurement:
# `--tflops` overrides it and `--cost measured RUN` replaces it.
DEFAULT_TFLOPS = 300.0


@dataclass(frozen=True)
class TimeModel:
    """Per-matrix optimizer time in ms: flops / throughput, or measured per shape."""

    tflops: float = DEFAULT_TFLOPS
    measured_ms: dict[tuple[int, int], float] | None = None

    def ms(self, m: Matrix) -> float:
        if self.measured_ms is not None:
            return self.measured_ms[m.shape]
        return polar_flops(m.rows, m.cols) / (self.tflops * 1e12) * 1e3

    def describe(self) -> dict:
        if self.measured_ms is not None:
            return {"kind": "measured", "ms_per_matrix": {f"{r}x{c}": v for (r, c), v in self.measured_ms.items()}}
        return {"kind": "flops", "tflops": self.tflops}


def evaluate(a: Assignment, matrices: list[Matrix], costs: dict[int, float], time_model: TimeModel,
             bytes_per_element: int) -> dict:
    by_index = {m.index: m for m in matrices}
    R = a.world_size
    load, ms, owned_bytes, pad_cost = [0.0] * R, [0.0] * R, [0] * R, 0.0
    for r in range(R):
        work = [by_index[i] for i in a.owned(r)] + a.padding[r]
        for m in work:
            c = costs[m.index] if m.index >= 0 else _phantom_cost(m, matrices, costs)
            load[r] += c
            ms[r] += time_model.ms(m)
            owned_bytes[r] += m.numel * bytes_per_element
            if m.padding:
                pad_cost += c
    total = sum(load)
    return {
        "assignment": {str(i): r for i, r in sorted(a.owner.items())},
        "padding_per_rank": [len(p) for p in a.padding],
        "per_rank_load": load,
        "max_over_mean": max_over_mean(load),
        "padding_waste": pad_cost / total if total else 0.0,
        "per_rank_ms": ms,
        "predicted_makespan_ms": max(ms),
        # one rank reduces and gathers nothing: no byte moves
        "recv_bytes": owned_bytes if R > 1 else [0] * R,
        "send_bytes": [(R - 1) * b for b in owned_bytes],
        "collective_bytes": R * max(owned_bytes) if R > 1 else 0,
    }


def _phantom_cost(m: Matrix, matrices: list[Matrix], costs: dict[int, float]) -> float:
    """A phantom (batch padding) slot costs what a real matrix of its shape costs."""
    return next(costs[x.index] for x in matrices if x.shape == m.shape)
