"""Canzona's α-balanced static partition (REFERENCE §3, seeds/002 §3.2.1), over the banks.

Each bank is a bucket whose matrices stay in physical order; a rank owns one contiguous slice of each
bucket, so the reduce-scatter geometry is kept and only the cut points move. Buckets are visited
largest total cost first. For a bucket, each rank's share blends
  even share 1/R                                  (α → 0: the bank's even split, same geometry)
  deficit share d_r / Σd, d_r = max(0, mean_after − L_r)   (α → 1: fill the least loaded ranks)
where L_r is the load so far and mean_after the mean load once this bucket is placed (Canzona's
pseudo-code uses the mean *before* the bucket; with two big buckets that sends a whole bank to one rank,
the target-after form converges to the same split when buckets are small). Cut points are snapped to
matrix boundaries (a matrix is never split) and refined by shifting runs of cuts one matrix while the
loads' (max, Σ²) improve (commscope.plan.alpha._refine). A bucket's new slicing is kept only if it improves max/mean over the even
slicing, and the final result only if it beats the pure even split: so α > 0 is never worse than α = 0.

Padding matrices of a bank occupy geometry but are never computed here (they are zero and stay zero).
"""
from __future__ import annotations

from itertools import accumulate

from commscope.plan.matrices import Matrix, buckets
from commscope.plan.strategies import Assignment


def max_over_mean(loads: list[float]) -> float:
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean > 0 else 1.0


def _snap(prefix: list[float], targets: list[float]) -> list[int]:
    """Boundary index (0..n) nearest each cumulative target, non-decreasing."""
    cuts, lo = [], 0
    for t in targets:
        best = min(range(lo, len(prefix)), key=lambda k: (abs(prefix[k] - t), k))
        cuts.append(best)
        lo = best
    return cuts


def _slice_loads(real_prefix: list[float], cuts: list[int], world_size: int) -> list[float]:
    bounds = [0, *cuts, len(real_prefix) - 1]
    return [real_prefix[bounds[r + 1]] - real_prefix[bounds[r]] for r in range(world_size)]


def _refine(loads: list[float], real_prefix: list[float], cuts: list[int]) -> list[int]:
    """Hill-climb while (max load, Σ load²) decreases. A move shifts a run of consecutive cuts by one
    matrix together, which hands one matrix's work from the rank before the run, through the ranks in
    it, to the rank after it; single-cut moves alone get stuck when the surplus must cross ranks."""
    n, world_size = len(real_prefix) - 1, len(loads)

    def score(cs):
        tot = [a + b for a, b in zip(loads, _slice_loads(real_prefix, cs, world_size))]
        return (max(tot), sum(x * x for x in tot))

    cuts, best = list(cuts), score(cuts)
    improved = True
    while improved:
        improved = False
        for i in range(len(cuts)):
            for j in range(i, len(cuts)):
                for step in (-1, 1):
                    trial = cuts[:i] + [c + step for c in cuts[i:j + 1]] + cuts[j + 1:]
                    if not all(0 <= a <= b <= n for a, b in zip([0, *trial], [*trial, n])):
                        continue
                    s = score(trial)
                    if s < best:
                        cuts, best, improved = trial, s, True
    return cuts


def _partition(matrices: list[Matrix], world_size: int, costs: dict[int, float], alpha: float
               ) -> tuple[dict[int, int], list[float]]:
    loads = [0.0] * world_size
    owner: dict[int, int] = {}
    order = sorted(buckets(matrices), key=lambda ms: (-sum(costs[m.index] for m in ms if not m.padding),
                                                      ms[0].index))
    for ms in order:
        full_prefix = [0.0, *accumulate(costs[m.index] for m in ms)]  # geometry: padding counted
        real_prefix = [0.0, *accumulate(0.0 if m.padding else costs[m.index] for m in ms)]
        w_full, w_real = full_prefix[-1], real_prefix[-1]
        even = _snap(full_prefix, [w_full * r / world_size for r in range(1, world_size)])
        cuts = even
        if alpha > 0:
            mean_after = (sum(loads) + w_real) / world_size
            deficit = [max(0.0, mean_after - x) for x in loads]
            total = sum(deficit)
            fill = [d / total for d in deficit] if total > 0 else [1 / world_size] * world_size
            share = [(1 - alpha) / world_size + alpha * f for f in fill]
            targets = [w_full * s for s in accumulate(share)][:-1]
            trial = _refine(loads, real_prefix, _snap(full_prefix, targets))

            def ratio(cs):
                return max_over_mean([a + b for a, b in zip(loads, _slice_loads(real_prefix, cs, world_size))])
            if ratio(trial) < ratio(even):
                cuts = trial
        bounds = [0, *cuts, len(ms)]
        for r in range(world_size):
            for m in ms[bounds[r]:bounds[r + 1]]:
                if not m.padding:
                    owner[m.index] = r
                    loads[r] += costs[m.index]
    return owner, loads


def alpha_lpt(matrices: list[Matrix], world_size: int, costs: dict[int, float], alpha: float = 1.0
              ) -> Assignment:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    owner, loads = _partition(matrices, world_size, costs, alpha)
    if alpha > 0:
        even_owner, even_loads = _partition(matrices, world_size, costs, 0.0)
        if not max_over_mean(loads) < max_over_mean(even_loads):
            owner = even_owner
    return Assignment("alpha_lpt", world_size, owner)
