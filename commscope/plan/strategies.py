"""Ways to assign the NorMuon matrices to ranks (who computes each update), Canzona's baselines.

Every strategy returns an `Assignment`: `owner` maps each real (non-padding) matrix index to exactly one
rank — whole matrices, never split — and `padding[r]` lists padding work rank r computes anyway
(the bank's padding matrices, or phantom slots of a padded batch). `owner` is the interface a
partitioned optimizer consumes (`dict[matrix_index] -> rank`).

- bank: today's layout: each bank's matrix view split evenly in contiguous chunks, padding included
  (the padding matrices are updated like any other);
- round_robin: KellerJordan Muon: matrices sorted by size (largest first), processed in windows of
  world_size, the i-th goes to rank i % R (a short last window leaves ranks idle, computes no padding);
- snake: the same order, dealt 0..R-1 then R-1..0 (ping-pong), as Megatron's layer-wise optimizer;
- lpt: longest processing time first: sorted by cost, each to the least loaded rank (ties: lowest rank);
- megabatch: dion-style: same-shape matrices batched, each batch padded to a multiple of R with phantom
  zero matrices, slot j of a batch on rank j % R;
- alpha_lpt: Canzona's α-balanced partition (commscope.plan.alpha).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from commscope.plan.matrices import Matrix, buckets


@dataclass
class Assignment:
    name: str
    world_size: int
    owner: dict[int, int]
    padding: list[list[Matrix]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.padding:
            self.padding = [[] for _ in range(self.world_size)]

    def owned(self, rank: int) -> list[int]:
        return sorted(i for i, r in self.owner.items() if r == rank)


def _real(matrices: list[Matrix]) -> list[Matrix]:
    return [m for m in matrices if not m.padding]


def bank(matrices: list[Matrix], world_size: int) -> Assignment:
    a = Assignment("bank", world_size, {})
    for ms in buckets(matrices):
        if len(ms) % world_size:
            raise ValueError(f"bank {ms[0].label}: {len(ms)} matrices do not split over {world_size} ranks")
        per_rank = len(ms) // world_size
        for pos, m in enumerate(ms):
            r = pos // per_rank
            if m.padding:
                a.padding[r].append(m)
            else:
                a.owner[m.index] = r
    return a


def _size_order(matrices: list[Matrix]) -> list[Matrix]:
    return sorted(_real(matrices), key=lambda m: -m.numel)  # stable: bank order within a size


def round_robin(matrices: list[Matrix], world_size: int) -> Assignment:
    return Assignment("round_robin", world_size,
                      {m.index: i % world_size for i, m in enumerate(_size_order(matrices))})


def snake(matrices: list[Matrix], world_size: int) -> Assignment:
    owner = {}
    for i, m in enumerate(_size_order(matrices)):
        window, pos = divmod(i, world_size)
        owner[m.index] = pos if window % 2 == 0 else world_size - 1 - pos
    return Assignment("snake", world_size, owner)


def lpt(matrices: list[Matrix], world_size: int, costs: dict[int, float]) -> Assignment:
    heap = [(0.0, r) for r in range(world_size)]
    owner = {}
    for m in sorted(_real(matrices), key=lambda m: (-costs[m.index], m.index)):
        load, r = heapq.heappop(heap)
        owner[m.index] = r
        heapq.heappush(heap, (load + costs[m.index], r))
    return Assignment("lpt", world_size, owner)


def megabatch(matrices: list[Matrix], world_size: int) -> Assignment:
    a = Assignment("megabatch", world_size, {})
    by_shape: dict[tuple[int, int], list[Matrix]] = {}
    for m in _real(matrices):
        by_shape.setdefault(m.shape, []).append(m)
    for shape, ms in by_shape.items():
        for j, m in enumerate(ms):
            a.owner[m.index] = j % world_size
        for j in range(len(ms), -(-len(ms) // world_size) * world_size):
            a.padding[j % world_size].append(Matrix(-1, ms[0].label, -1, *shape, padding=True))
    return a
