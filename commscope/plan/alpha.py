"""Canzona's α-balanced static partition (the Canzona paper's §3.2.1), over the banks.

Each bank is a bucket whose matrices stay in physical order; a rank owns one contiguous slice of each
bucket, so the reduce-scatter geometry is kept and only the cut points move. Buckets are visited
largest total cost first. For a bucket, each rank's share blends
  even share 1/R                                  (α → 0: the bank's even split, same geometry)
  deficit share d_r / Σd, d_r = max(0, mean_after − L_r)   (α → 1: fill the least loaded ranks)
where L_r is the load so far and mean_after the mean load once this bucket is placed (Canzona's
pseudo-code uses the mean *before* the bucket; with two big buckets that sends a whole bank to one rank,
the target-after form converges to the same split when buckets are small). The cumulative shares cut the
bucket twice, once by its geometry (padding counted) and once by its work alone (padding at a bank's tail
then goes to the last slice); each cut is snapped to matrix boundaries (a matrix is never split) and
refined by shifting runs of cuts one matrix while the loads' (max, Σ²) improve (`_refine`), and the better
of the two is taken. A bucket's new slicing is kept only if it improves max/mean over the even slicing,
and the final result only if it beats the pure even split: so α > 0 is never worse than α = 0.

Padding matrices of a bank occupy geometry but are never computed here (they are zero and stay zero).
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING

from commscope.plan.matrices import Matrix, buckets
from commscope.plan.strategies import Assignment

if TYPE_CHECKING:  # numpy is imported where the hill-climb runs: `commscope --help` does not pay for it
    import numpy as np

# Bound on the hill-climb's work, in scored moves: a sweep scores up to R²/2 moves for R ranks (runs of
# cuts i..j), so for large R the runs are capped in length and the sweeps in number to stay within it
# (R = 4096: every run, 16 sweeps; the climb usually ends after one or two because no move improves).
WORK_BUDGET = 2 ** 28
_CALL_COST = 4096  # the fixed cost of scoring one cut's runs (a few dozen array operations), in moves


def max_over_mean(loads: list[float]) -> float:
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean > 0 else 1.0


def _snap(prefix: list[float], targets: list[float]) -> list[int]:
    """Boundary index (0..n) nearest each cumulative target, non-decreasing; on a tie the smaller index.
    Binary search when `prefix` is non-decreasing (costs are non-negative): O(R log n), not O(R n)."""
    monotone = all(a <= b for a, b in zip(prefix, prefix[1:]))
    cuts, lo = [], 0
    for t in targets:
        if monotone:
            k = bisect_left(prefix, t, lo)
            # the nearest value is prefix[k] or prefix[k-1]; of equal values the first index ≥ lo
            cands = [bisect_left(prefix, prefix[c], lo) for c in (k - 1, k) if lo <= c < len(prefix)]
            best = min(cands, key=lambda c: (abs(prefix[c] - t), c))
        else:
            best = min(range(lo, len(prefix)), key=lambda k: (abs(prefix[k] - t), k))
        cuts.append(best)
        lo = best
    return cuts


def _slice_loads(real_prefix: list[float], cuts: list[int], world_size: int) -> list[float]:
    bounds = [0, *cuts, len(real_prefix) - 1]
    return [real_prefix[bounds[r + 1]] - real_prefix[bounds[r]] for r in range(world_size)]


def _refine(loads: list[float], real_prefix: list[float], cuts: list[int], budget: int = WORK_BUDGET
            ) -> list[int]:
    """Hill-climb while (max load, Σ load²) decreases. A move shifts a run of consecutive cuts i..j by one
    matrix together, which hands one matrix's work from the rank before the run, through the ranks in
    it, to the rank after it; single-cut moves alone get stuck when the surplus must cross ranks.

    Moves are tried in the order (i, j, step -1 then +1) and the first improving one is taken. For a fixed
    i every run end j is scored at once: only ranks i..j+1 change, so the new maximum is the maximum of
    the untouched ranks (prefix/suffix maxima) and the changed ones (a running maximum), and the change of
    Σ² a cumulative sum: O(run) array work per i instead of O(R · run). Runs are at most `budget` / R
    cuts long, and the climb stops once it has scored `budget` moves (an accepted move counts R, the
    cost of updating the maxima; each cut scored counts _CALL_COST more, the arrays' fixed cost), so it
    is O(`budget`) whatever R."""
    import numpy as np

    n, n_cuts = len(real_prefix) - 1, len(cuts)
    if n_cuts == 0:
        return list(cuts)
    P = np.asarray(real_prefix, dtype=np.float64)
    base = np.asarray(loads, dtype=np.float64)
    c = np.asarray(cuts, dtype=np.int64)
    run = max(1, min(n_cuts, budget // n_cuts))

    def state():
        bounds = np.concatenate(([0], c, [n]))
        tot = base + (P[bounds[1:]] - P[bounds[:-1]])
        pre = np.concatenate(([-np.inf], np.maximum.accumulate(tot)))  # pre[k] = max tot[:k]
        suf = np.append(np.maximum.accumulate(tot[::-1])[::-1], -np.inf)  # suf[k] = max tot[k:]
        return tot, pre, suf

    tot, pre, suf = state()
    improved = True
    while improved and budget > 0:
        improved = False
        for i in range(n_cuts):
            resume = 0  # flat position (2·(j-i) + [0 for step -1, 1 for +1]) to scan from
            while budget > 0:
                pos = _improving_moves(base, P, c, tot, pre, suf, i, n, run)
                budget -= 2 * run + _CALL_COST
                pos = pos[pos >= resume]
                if not len(pos):
                    break
                p = int(pos[0])
                j, step = i + p // 2, (-1 if p % 2 == 0 else 1)
                c[i:j + 1] += step
                tot, pre, suf = state()
                budget -= len(tot)
                improved = True
                resume = p + 1
    return [int(x) for x in c]


def _improving_moves(base: np.ndarray, P: np.ndarray, c: np.ndarray, tot: np.ndarray, pre: np.ndarray,
                     suf: np.ndarray, i: int, n: int, run: int) -> np.ndarray:
    """Flat positions 2·(j-i) + (0: step -1, 1: step +1) of the valid moves of cuts i..j that lower
    (max load, Σ load²), j = i..min(len(c), i + run)-1, ascending. `tot` is every rank's load with the
    current cuts `c`, `pre`/`suf` its prefix/suffix maxima."""
    import numpy as np

    m = min(len(c), i + run)
    js = np.arange(i, m)
    nxt = np.append(c[i + 1:m + 1], n)[:m - i]  # bounds[j + 2]: the end of rank j+1's slice
    prv = c[i - 1] if i > 0 else 0  # bounds[i]: the start of rank i's slice
    cur_max = suf[0]
    sumsq = float(tot @ tot)
    out = []
    for step in (-1, 1):
        s = np.clip(c[i:m] + step, 0, n)  # the moved cuts, s[k - i] for cut k
        r_i = base[i] + P[s[0]] - P[prv]
        mid = base[i + 1:m] + P[s[1:]] - P[s[:-1]]  # rank k in i+1..m-1, when k <= j
        last = base[i + 1:m + 1] + P[nxt] - P[s]  # rank j+1
        mid_max = np.maximum.accumulate(np.concatenate(([-np.inf], mid)))  # over ranks i+1..j
        mid_sq = np.concatenate(([0.0], np.cumsum(mid * mid - tot[i + 1:m] ** 2)))
        new_max = np.maximum.reduce([np.full(len(js), max(pre[i], r_i)), mid_max, last, suf[js + 2]])
        delta = (r_i * r_i - tot[i] ** 2) + mid_sq + (last * last - tot[i + 1:m + 1] ** 2)
        valid = c[i:m] + 1 <= nxt if step == 1 else np.full(len(js), c[i] - 1 >= prv)
        # Σ² must fall by more than rounding: a change computed from differences could otherwise undo
        # itself (a move and its reverse both "improving" by 1 ulp) and cycle
        better = valid & ((new_max < cur_max) | ((new_max == cur_max) & (delta < -1e-12 * sumsq)))
        out.append(np.flatnonzero(better) * 2 + (0 if step == -1 else 1))
    return np.sort(np.concatenate(out))


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
            share = list(accumulate((1 - alpha) / world_size + alpha * f for f in fill))[:-1]
            # the shares cut the bank's geometry (padding counted: α → 0 is its even split) and, apart, its
            # work alone: where padding fills much of a bank (an MLP bank padded to 72 slots for 9 ranks)
            # cuts in the geometry leave the last ranks only padding, and no move of one matrix across
            # padding changes a load, so the hill-climb cannot bring them back; cut by work, the padding
            # is the last slice's tail
            trials = [_refine(loads, real_prefix, _snap(prefix, [w * s for s in share]))
                      for prefix, w in ((full_prefix, w_full), (real_prefix, w_real))]

            def ratio(cs):
                return max_over_mean([a + b for a, b in zip(loads, _slice_loads(real_prefix, cs, world_size))])
            best = min(trials, key=ratio)
            if ratio(best) < ratio(even):
                cuts = best
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
