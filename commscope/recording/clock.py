"""Cross-rank clock alignment: put every rank's timestamps on rank 0's epoch clock, with an error bound.

Each rank's local clock is `perf_counter_ns() + base`, where `base` maps perf_counter to Unix-epoch ns
once at start (perf_counter is monotonic and cheap; time_ns is neither guaranteed). Alignment runs a
few rounds of `all_gather` of local times. Causality gives hard bounds without any symmetry assumption:
an all_gather cannot return on rank i before every rank j has called it, so for every round
`before_j + o_j <= after_i + o_i` (o = offset to the common axis, o_0 = 0). With i = 0 and j = 0 this
bounds each rank's offset to an interval; the recorded offset is its midpoint and `error_ns` its half
width. The bound holds as long as clocks do not drift during the run (perf_counter on one host: they
share a source; across hosts, drift over a training run is far below the bound's usual size).

Invariant: rank 0's offset is exactly 0 and its error 0; every rank computes the same data (all_gather),
so no further round trip is needed.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ClockSync:
    """Offset that maps this rank's local epoch ns onto the common axis (common = local + offset_ns)."""

    offset_ns: int = 0
    error_ns: int = 0
    method: str = "single-process"
    rounds: int = 0
    # The job's identity, the same on every rank of one job and different between jobs: the first rank's
    # clock when the first all_gather began, which every rank receives (None without an alignment over the
    # whole job). Readers refuse rank folders of one run directory that name different jobs.
    job: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def epoch_base_ns() -> int:
    """`base` such that `perf_counter_ns() + base` is Unix-epoch ns (taken once per process)."""
    return time.time_ns() - time.perf_counter_ns()


def offset_bounds(before: torch.Tensor, after: torch.Tensor, rank: int, ref: int = 0) -> tuple[int, int]:
    """Interval [lower, upper] for the offset of `rank` relative to `ref` from all_gather round times.

    `before[k, r]` / `after[k, r]`: rank r's local time just before calling / just after returning
    from the all_gather of round k.
    """
    lower = int((before[:, ref] - after[:, rank]).max())
    upper = int((after[:, ref] - before[:, rank]).min())
    return lower, upper


def align_clocks(
    group: Any = None,
    *,
    device: torch.device | str = "cpu",
    rounds: int = 5,
    now_ns: Callable[[], int] | None = None,
) -> ClockSync:
    """Measure this rank's offset to the group's first rank. Collective: every member must call it."""
    if not (dist.is_available() and dist.is_initialized()):
        return ClockSync()
    world = dist.get_world_size(group)
    if world == 1:
        return ClockSync(method="barrier-allgather", rounds=0)
    now = now_ns or (lambda b=epoch_base_ns(): time.perf_counter_ns() + b)
    me = dist.get_rank(group)
    device = torch.device(device)
    dist.barrier(group)
    befores, afters = [], []
    prev_after = 0
    # rounds+1 gathers: gather k carries (before_k, after_{k-1}); the last one only ships after_{rounds-1}.
    for _ in range(rounds + 1):
        t_before = now()
        buf = torch.tensor([t_before, prev_after], dtype=torch.int64, device=device)
        out = [torch.empty_like(buf) for _ in range(world)]
        dist.all_gather(out, buf, group=group)
        gathered = torch.stack(out).cpu()  # .cpu() waits for the device copy, so t_after is after completion
        prev_after = now()
        befores.append(gathered[:, 0])
        afters.append(gathered[:, 1])
    before = torch.stack(befores[:-1])   # (rounds, world)
    after = torch.stack(afters[1:])      # after_k arrives with gather k+1
    # over a subgroup, "the first rank" differs from one subgroup to the next: no identity of the whole job
    job = f"{int(befores[0][0]):x}" if world == dist.get_world_size() else None
    if me == 0:
        return ClockSync(0, 0, "barrier-allgather", rounds, job)
    lower, upper = offset_bounds(before, after, me)
    # lower > upper would mean a clock jumped during alignment; keep the midpoint, report the full spread.
    return ClockSync((lower + upper) // 2, (abs(upper - lower) + 1) // 2, "barrier-allgather", rounds, job)
