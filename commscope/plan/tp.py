"""Canzona's tensor-parallel side as a plan: micro-groups of whole matrices with host ranks.

Under tensor parallelism of degree T each matrix is sharded T ways, but NorMuon needs it whole. Canzona
(the Canzona paper, §3.2.2) batches the matrices into micro-groups; within a group each matrix gets a host rank
that gathers it, computes the update and scatters the result back; groups are pipelined so the next
group's gather overlaps this group's compute.

Algorithm: matrices in LPT order (largest cost first); a min-heap of host loads (load, rank) picks the
least loaded TP rank for each matrix (loads accumulate across groups); a matrix joins the open group
unless the group's bytes would exceed `capacity_bytes`, in which case the group is closed and the matrix
opens a new one. A matrix larger than the capacity gets a group of its own (matrices are never split).

Volumes per group: gathering a matrix onto its host moves the (T − 1)/T of it the host lacks; the
scatter moves the same back. The predicted compute makespan sums each group's slowest host, assuming
gathers/scatters are hidden by the pipeline.
"""
from __future__ import annotations

import heapq

from commscope.plan.matrices import Matrix
from commscope.plan.evaluate import TimeModel

DEFAULT_CAPACITY_BYTES = 512 * 2 ** 20


def micro_groups(matrices: list[Matrix], tp: int, costs: dict[int, float], time_model: TimeModel,
                 bytes_per_element: int, capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> dict:
    if tp < 1:
        raise ValueError("tp must be >= 1")
    real = sorted((m for m in matrices if not m.padding), key=lambda m: (-costs[m.index], m.index))
    heap = [(0.0, r) for r in range(tp)]
    groups: list[list[tuple[Matrix, int]]] = [[]]
    group_bytes = 0
    for m in real:
        size = m.numel * bytes_per_element
        if groups[-1] and group_bytes + size > capacity_bytes:  # close the group; the matrix opens the next
            groups.append([])
            group_bytes = 0
        load, host = heapq.heappop(heap)  # the host does not depend on the group: loads span all groups
        heapq.heappush(heap, (load + costs[m.index], host))
        groups[-1].append((m, host))
        group_bytes += size
    groups = [g for g in groups if g]

    per_rank_load, per_rank_ms = [0.0] * tp, [0.0] * tp
    out_groups, makespan = [], 0.0
    for gi, g in enumerate(groups):
        host_ms = [0.0] * tp
        for m, host in g:
            per_rank_load[host] += costs[m.index]
            per_rank_ms[host] += time_model.ms(m)
            host_ms[host] += time_model.ms(m)
        size = sum(m.numel * bytes_per_element for m, _ in g)
        moved = size * (tp - 1) // tp
        makespan += max(host_ms)
        out_groups.append({
            "group": gi, "matrices": [m.index for m, _ in g], "hosts": [h for _, h in g],
            "bytes": size, "gather_bytes": moved, "scatter_bytes": moved,
            "host_ms": host_ms, "compute_ms": max(host_ms),
        })
    return {
        "tp": tp, "capacity_bytes": capacity_bytes, "group_count": len(out_groups),
        "per_rank_load": per_rank_load, "per_rank_ms": per_rank_ms,
        "predicted_makespan_ms": makespan,
        "gather_bytes": sum(g["gather_bytes"] for g in out_groups),
        "scatter_bytes": sum(g["scatter_bytes"] for g in out_groups),
        "groups": out_groups,
        # matrices larger than the capacity, each alone in its group (never split): over the capacity it names
        "over_capacity": sorted(m.index for m in real if m.numel * bytes_per_element > capacity_bytes),
    }
