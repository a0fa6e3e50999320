"""The spread of one time across the members of each collective instance, and the host-side launch skew.

`spread(collectives, when, floor_rows)`: one row per matched instance (group, seq) seen on ≥ 2 ranks:
label, op, step, n_ranks, first/last time, `skew_ns` (last − first), `last_rank` and `wait_caused_ns` =
Σ over members (last − time_i), the time the others spent before the last one came. It is the numpy core
of `analyze.waiting` (who made whom wait, with device-side arrivals) and of `launch_skew` here.
`floor_rows` (a boolean mask): those rows' times are raised to the latest time seen on any rank at an
earlier seq of the same group: a group's collectives run in order, so a member cannot start waiting for
instance k before instance k−1's last member came (waiting's rule for host-timed arrivals).

`arrival_order(collectives, when, floor_rows)`: spread's rows and their (floored) times, instance by
instance, for figures per (instance, member) such as analyze.waiting's arrival lateness.

`launch_skew(collectives)`: the same on the launch call (`call_ns`): when the *host* queued the
collective. A separate, host-side figure: on GPUs the host runs tens of ms ahead of the device, so a late
launch there says nothing about who made whom wait (docs/analysis.md). It keeps the complete instances
only, as analyze.waiting does: the spread over the members present says nothing of the absent ones.

`complete(collectives, group, seq, n_ranks)`: per instance, whether every member of its group is in the
data; `missing_members(n_present, world_size)` is the clause that says none is, with `ranks_present`'s
"(7 of 8 ranks)", which the straggler table's and the bandwidths' reasons share (analyze.waiting.unjudged,
analyze.exposure.bandwidth_withheld).

numpy on whole columns (one stable sort, then reductions over contiguous groups): pandas groupby on
frames cost ~10× as much. Invariant: the result equals, dtypes included, the pandas groupby definition
(a stable sort by group, seq, time, rank; missing keys dropped; `first` skipping missing labels) that
tests/unit/test_skew.py keeps as the reference.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SKEW_COLS = ["group", "seq", "label", "op", "step", "n_ranks", "first_ns", "last_ns", "skew_ns", "last_rank",
             "wait_caused_ns"]


def arrival_order(collectives: pd.DataFrame, when: pd.Series, floor_rows: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of `spread`'s instances, one instance after the other, each by its (floored) time:
    (rows: positions into `collectives`, t: their times in int64 ns, start, end: each instance's first and
    last position in `rows`). Rows without a time, group or seq take no part; instances seen on one
    rank are kept (spread drops them)."""
    when = pd.array(when, dtype="Int64")
    none = np.zeros(0, dtype=np.int64)
    if when._mask.all():
        return none, none, none, none
    # numpy in the order of a stable sort by (group, seq, time, rank): an instance's rows are then
    # contiguous, its first row the first arrival and its last row the last. Rows without a time, group or
    # seq take no part, as groupby drops missing keys.
    group_code = pd.factorize(collectives["group"], sort=True)[0]  # sorted codes: sort_values' order
    seq = collectives["seq"].to_numpy()
    rows = np.flatnonzero(~when._mask & (group_code >= 0) & ~pd.isna(seq))
    rank = collectives["rank"].to_numpy()
    rows = rows[np.lexsort((rank[rows], when._data[rows], seq[rows], group_code[rows]))]
    t = when._data[rows].astype(np.int64)
    key_g, key_s = group_code[rows], seq[rows]
    opens = np.ones(len(rows), dtype=bool)  # the first row of each (group, seq)
    opens[1:] = (key_g[1:] != key_g[:-1]) | (key_s[1:] != key_s[:-1])
    start = np.flatnonzero(opens)
    end = np.append(start[1:], len(rows)) - 1
    if floor_rows is not None and len(rows):
        # the latest time of every earlier instance of the group (a running max, restarted per group),
        # raised onto the flagged rows; a monotone map, so the sorted order stays valid
        run = t[end].copy()
        new_group = np.ones(len(start), dtype=bool)
        new_group[1:] = key_g[start[1:]] != key_g[start[:-1]]
        bounds = np.append(np.flatnonzero(new_group), len(start))
        for a, b in zip(bounds[:-1], bounds[1:]):  # a few process groups
            run[a:b] = np.maximum.accumulate(run[a:b])
        floor = np.full(len(start), np.iinfo(np.int64).min)
        floor[1:] = np.where(new_group[1:], floor[1:], run[:-1])
        per_row = np.repeat(floor, end - start + 1)
        flagged = np.asarray(floor_rows, dtype=bool)[rows]
        t = np.where(flagged, np.maximum(t, per_row), t)
        # raised times can pass unraised ones of the same instance: sort again (instances keep their place)
        order = np.lexsort((rank[rows], t, np.repeat(np.arange(len(start)), end - start + 1)))
        rows, t = rows[order], t[order]
    return rows, t, start, end


def spread(collectives: pd.DataFrame, when: pd.Series, floor_rows: np.ndarray | None = None) -> pd.DataFrame:
    """Per (group, seq) on ≥ 2 ranks: first/last of `when` (Int64 ns, one per row), skew, the last rank and
    the wait it caused; `floor_rows`: rows whose time cannot precede the group's previous instances
    (module docstring)."""
    when = pd.array(when, dtype="Int64")
    if when._mask.all():
        return pd.DataFrame(columns=SKEW_COLS)
    rows, t, start, end = arrival_order(collectives, when, floor_rows)
    seq, rank = collectives["seq"].to_numpy(), collectives["rank"].to_numpy()
    n = end - start + 1
    # times since the earliest time: their per-instance sums stay far inside int64 (epoch ns do not)
    since = t - (t.min() if len(t) else 0)
    since_sum = np.add.reduceat(since, start)
    step = np.fmin.reduceat(collectives["step"].to_numpy()[rows], start)  # fmin: NaN-skipping, as min()
    keep = n >= 2
    start, end, n, since_sum, step = start[keep], end[keep], n[keep], since_sum[keep], step[keep]
    first, last = t[start], t[end]
    # Σ (last − t_i) = n·(last − first) − Σ (t_i − first), Σ (t_i − first) from the times since the
    # earliest (s): Σ s − n·min s. Exact in int64
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


def launch_skew(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per complete instance, the spread of the host's launch calls (`call_ns`): who *queued* it last (host
    side). An instance some of whose members are absent is left out: its spread over the present members
    is no spread of the group (ranks 0-6 of the 8×H100 fixture would read 28 instances, 37.1 ms mean, where
    none of them has its eighth launch)."""
    out = spread(collectives, collectives["call_ns"])
    if not len(out):
        return out
    keep = complete(collectives, out["group"], out["seq"], out["n_ranks"].to_numpy())
    return out[keep].reset_index(drop=True)


def complete(collectives: pd.DataFrame, group, seq, n_ranks: np.ndarray) -> np.ndarray:
    """Per instance (group, seq) seen on `n_ranks` ranks: True where every member of its group is there
    (its largest recorded `group_size`; an unknown size counts as complete, nothing says otherwise). An
    instance some of whose members are not in the data (a partial trace set, kernels queued before a
    profiler window on some ranks only) has no known last arrival and no known transfer time."""
    if "group_size" not in collectives:
        return np.ones(len(n_ranks), dtype=bool)
    size = pd.to_numeric(collectives["group_size"], errors="coerce").groupby(
        [collectives["group"], collectives["seq"]]).max()
    want = size.reindex(pd.MultiIndex.from_arrays([group, seq])).to_numpy(np.float64)
    return np.isnan(want) | (np.asarray(n_ranks) >= want)


def complete_rows(collectives: pd.DataFrame) -> np.ndarray:
    """Per row of `collectives`: True where its instance (group, seq) holds every member of its group
    (`complete`, counting the rows of the instance); rows without a group or seq belong to no instance and
    are False."""
    if not len(collectives):
        return np.zeros(0, dtype=bool)
    keyed = collectives["group"].notna().to_numpy() & collectives["seq"].notna().to_numpy()
    out = np.zeros(len(collectives), dtype=bool)
    if not keyed.any():
        return out
    c = collectives[keyed]
    n = c.groupby(["group", "seq"])["rank"].transform("nunique").to_numpy()
    out[keyed] = complete(c, c["group"].to_numpy(), c["seq"].to_numpy(), n)
    return out


def ranks_present(n_present: int, world_size: int) -> str:
    """" (7 of 8 ranks)" where some of the job's ranks are absent from the input, else nothing."""
    return f" ({n_present} of {world_size} ranks)" if 0 < n_present < world_size else ""


def missing_members(n_present: int, world_size: int) -> str:
    """The clause for inputs where no collective has all its members, with how many of the job's ranks
    are present where some are not."""
    return f"no collective has every member of its group in the input{ranks_present(n_present, world_size)}"


def _first_present(col: pd.Series, rows: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Per group (rows[start..end]), the first value of `col` that is not missing (groupby.first)."""
    v = col.array.take(rows)
    missing = pd.isna(v)
    if not missing.any():
        return v.take(start)
    pos = np.where(missing, len(rows), np.arange(len(rows)))
    first = np.minimum.reduceat(pos, start) if len(start) else start
    return v.take(np.where(first <= end, first, -1), allow_fill=True)
