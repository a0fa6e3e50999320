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

Both are numpy on whole columns (one stable sort, then reductions over contiguous groups): pandas
groupby on frames cost ~10× as much. Invariant: the result equals, dtypes included, the pandas groupby
definition (a stable sort by group, seq, arrival, rank; missing keys dropped; `first` skipping missing
labels) that tests/test_skew.py keeps as the reference.
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
    when = (arrival(collectives) if at == "arrival" else collectives["call_ns"].astype("Int64")).array
    # numpy on whole columns, in the order of a stable sort by (group, seq, arrival, rank): a group's
    # rows are then contiguous, its first row the first arrival and its last row the last (pandas
    # groupby's per-group reductions on a frame cost ~10× this). Rows without an arrival time, group or
    # seq take no part, as groupby drops missing keys.
    group_code = pd.factorize(collectives["group"], sort=True)[0]  # sorted codes: sort_values' order
    seq = collectives["seq"].to_numpy()
    if when._mask.all():
        return pd.DataFrame(columns=SKEW_COLS)
    rows = np.flatnonzero(~when._mask & (group_code >= 0) & ~pd.isna(seq))
    rank = collectives["rank"].to_numpy()
    rows = rows[np.lexsort((rank[rows], when._data[rows], seq[rows], group_code[rows]))]
    t = when._data[rows]
    key_g, key_s = group_code[rows], seq[rows]
    opens = np.ones(len(rows), dtype=bool)  # the first row of each (group, seq)
    opens[1:] = (key_g[1:] != key_g[:-1]) | (key_s[1:] != key_s[:-1])
    start = np.flatnonzero(opens)
    end = np.append(start[1:], len(rows)) - 1
    n = end - start + 1
    # times since the earliest arrival: their per-group sums stay far inside int64 (epoch ns do not)
    since = t - (t.min() if len(t) else 0)
    since_sum = np.add.reduceat(since, start)
    step = np.fmin.reduceat(collectives["step"].to_numpy()[rows], start)  # fmin: NaN-skipping, as min()
    keep = n >= 2
    start, end, n, since_sum, step = start[keep], end[keep], n[keep], since_sum[keep], step[keep]
    first, last = t[start], t[end]
    # Σ (last − arrival) = n·(last − first) − Σ (arrival − first), Σ (arrival − first) from the times since
    # the earliest arrival (s): Σ s − n·min s. Exact in int64
    wait = n * (last - first) - (since_sum - n * since[start])
    at_start = rows[start]
    return pd.DataFrame({
        "group": collectives["group"].array.take(at_start), "seq": seq[at_start],
        "label": _first_present(collectives["label"], rows, start, end),
        "op": _first_present(collectives["op"], rows, start, end),
        "step": step,
        "n_ranks": n.astype(np.int64), "first_ns": pd.array(first, dtype="Int64"),
        "last_ns": pd.array(last, dtype="Int64"), "skew_ns": (last - first).astype(np.float64),
        "last_rank": rank[rows[end]].astype(np.int64),
        "wait_caused_ns": wait.astype(np.float64)})


def _first_present(col: pd.Series, rows: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Per group (rows[start..end]), the first value of `col` that is not missing (groupby.first)."""
    v = col.array.take(rows)
    missing = pd.isna(v)
    if not missing.any():
        return v.take(start)
    pos = np.where(missing, len(rows), np.arange(len(rows)))
    first = np.minimum.reduceat(pos, start) if len(start) else start
    return v.take(np.where(first <= end, first, -1), allow_fill=True)


def stragglers(skew: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    base = pd.DataFrame({"rank": list(ranks)})
    if not len(skew):
        return base.assign(times_last=0, last_share=np.nan, wait_caused_ns=0.0, score=np.nan)[STRAGGLER_COLS]
    # per rank by matching last ranks in numpy, one frame at the end (the waits are whole ns in float64,
    # far below 2⁵³: their sums are exact in any order, so equal to groupby's)
    last, wait = skew["last_rank"].to_numpy(), skew["wait_caused_ns"].to_numpy(np.float64)
    r = base["rank"].to_numpy()
    hit = last[None, :] == r[:, None]
    times_last = hit.sum(axis=1).astype(np.int64)
    caused = np.where(hit, wait[None, :], 0.0).sum(axis=1)
    total = caused.sum()
    out = pd.DataFrame({"rank": r, "times_last": times_last, "last_share": times_last / len(skew),
                        "wait_caused_ns": caused, "score": caused / total if total > 0 else 0.0})
    return out.sort_values(["score", "times_last"], ascending=False).reset_index(drop=True)
