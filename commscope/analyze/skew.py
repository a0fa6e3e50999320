"""Arrival skew across ranks and the stragglers that cause it.

A collective cannot complete before its last member arrives, so every other member waits (at least)
from its own arrival until the last arrival. Arrival, on the common time axis:
- on GPUs (timing `kernel` or `cuda_event`): when the collective started on the device (`start_ns`) —
  the host launches far ahead of the device (tens of ms in the 8×H100 fixture), so launch times say
  nothing about who made whom wait; an NCCL kernel that starts early spins until its peers' start;
- on CPUs (gloo): the launch call (`call_ns`).
Collectives without an arrival time are left out.

`arrival_skew(collectives)`: one row per (group, seq) seen on ≥ 2 ranks: label, op, n_ranks, first/last
arrival, `skew_ns` (last − first), `last_rank`, `wait_caused_ns` = Σ over members (last − arrival).
`stragglers(skew, ranks)`: per rank: `times_last`, `last_share` (of all collectives), `wait_caused_ns`
and `score` = its share of all wait caused (0…1), sorted worst first.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SKEW_COLS = ["group", "seq", "label", "op", "step", "n_ranks", "first_ns", "last_ns", "skew_ns", "last_rank",
             "wait_caused_ns"]
STRAGGLER_COLS = ["rank", "times_last", "last_share", "wait_caused_ns", "score"]


def arrival(collectives: pd.DataFrame) -> pd.Series:
    """Arrival time (Int64 ns) of each collective on its rank."""
    on_device = collectives["timing"].isin(["kernel", "cuda_event"]) & collectives["start_ns"].notna()
    return collectives["start_ns"].where(on_device, collectives["call_ns"]).astype("Int64")


def arrival_skew(collectives: pd.DataFrame, at: str = "arrival") -> pd.DataFrame:
    """Per (group, seq) seen on ≥ 2 ranks: first/last time, skew, last rank and the wait it caused.
    `at="arrival"`: when each rank's collective could start (`arrival`); `at="launch"`: when it was
    launched (`call_ns`), the straggler question "who launched late"."""
    if at not in ("arrival", "launch"):
        raise ValueError(f"at must be 'arrival' or 'launch', not {at!r}")
    when = arrival(collectives) if at == "arrival" else collectives["call_ns"].astype("Int64")
    # only the columns used (carrying the whole collective table through filter and sort cost most of it)
    c = pd.DataFrame({k: collectives[k] for k in ("group", "seq", "label", "op", "step", "rank")})
    c["arrival_ns"] = when
    c = c[c["arrival_ns"].notna()]
    if not len(c):
        return pd.DataFrame(columns=SKEW_COLS)
    c = c.sort_values(["group", "seq", "arrival_ns", "rank"], kind="stable")
    # times since the earliest arrival: their per-group sums stay far inside int64 (epoch ns do not)
    c["since_first"] = c["arrival_ns"] - c["arrival_ns"].min()
    g = c.groupby(["group", "seq"], sort=False)  # groups come in (group, seq) order: c is sorted
    # one call per reduction: the same kernels as a named-aggregation dict, at half its cost
    first = g[["label", "op"]].first()
    out = pd.DataFrame({"label": first["label"], "op": first["op"], "step": g["step"].min(), "n_ranks": g.size(),
                        "first_ns": g["arrival_ns"].min(), "last_ns": g["arrival_ns"].max(),
                        "last_rank": g["rank"].last(), "since_sum": g["since_first"].sum(),
                        "since_min": g["since_first"].min()}).reset_index()
    out = out[out["n_ranks"] >= 2].copy()
    out["skew_ns"] = (out["last_ns"] - out["first_ns"]).astype(np.float64)
    # Σ (last − arrival) = n·(last − first) − Σ (arrival − first), Σ (arrival − first) from the times since
    # the earliest arrival (s): Σ s − n·min s. Exact in int64
    after_first = out["since_sum"] - out["n_ranks"] * out["since_min"]
    out["wait_caused_ns"] = (out["n_ranks"] * (out["last_ns"] - out["first_ns"]) - after_first).astype(np.float64)
    out["last_rank"] = out["last_rank"].astype(np.int64)
    return out[SKEW_COLS].reset_index(drop=True)


def stragglers(skew: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    base = pd.DataFrame({"rank": list(ranks)})
    if not len(skew):
        return base.assign(times_last=0, last_share=np.nan, wait_caused_ns=0.0, score=np.nan)[STRAGGLER_COLS]
    g = skew.groupby("last_rank")
    out = base.assign(times_last=base["rank"].map(g.size()).fillna(0).astype(np.int64),
                      wait_caused_ns=base["rank"].map(g["wait_caused_ns"].sum()).fillna(0.0))
    out["last_share"] = out["times_last"] / len(skew)
    total = out["wait_caused_ns"].sum()
    out["score"] = out["wait_caused_ns"] / total if total > 0 else 0.0
    return out[STRAGGLER_COLS].sort_values(["score", "times_last"], ascending=False).reset_index(drop=True)
