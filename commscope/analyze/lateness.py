"""The distribution of arrival lateness: how late the members of each collective instance arrive after its
first member, over every instance and member of the job.

At a thousand ranks a per-rank table cannot show whether waiting is spread thin (every rank a little
late, every time) or comes from a few late arrivals (one rank stalled once); the distribution can.
Lateness is analyze.waiting's arrival model, per member (waiting.lateness): device start where the
collective's execution is timed on the device, the launch call (not before the group's previous instance)
on CPU ranks; instances reached by every member of their group only; the first arrival counts, with 0.

`histogram(late)`: one row per bucket of a 1-2-5 series — [0, 1 µs), [1, 2 µs), [2, 5 µs), [5, 10 µs),
[10, 20 µs), … up to the bucket of the largest lateness, empty buckets in between kept (a gap between
jitter and a stall is the point). Per bucket: `arrivals`, `share` of all arrivals, distinct `ranks`, and
the latest arrival in it (`worst_rank`, `worst_ns`, its `worst_step`, `worst_label`).
`quantiles(late)`: lateness at QUANTILES, each an observed value (the inverted CDF: the smallest lateness
with at least that share of arrivals at or below it).

Invariant: pure functions of the frame waiting.lateness returns; every arrival is in exactly one bucket.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

QUANTILES = (0.5, 0.9, 0.99, 0.999, 1.0)
HISTOGRAM_COLS = ["lo_ns", "hi_ns", "arrivals", "share", "ranks", "worst_rank", "worst_ns", "worst_step",
                  "worst_label"]
QUANTILE_COLS = ["quantile", "lateness_ns"]
FIRST_EDGE_NS = 1_000  # the first bucket, [0, 1 µs), holds the first arrivals and ties with them


def edges(max_ns: float) -> np.ndarray:
    """Bucket edges in ns: 0, then 1, 2, 5 × 10^k from 1 µs until the last edge exceeds `max_ns`."""
    out = [0, FIRST_EDGE_NS]
    k = 0
    while out[-1] <= max_ns:
        out.append(FIRST_EDGE_NS * (2, 5, 10)[k % 3] * 10 ** (k // 3))
        k += 1
    return np.asarray(out, dtype=np.int64)


def histogram(late: pd.DataFrame) -> pd.DataFrame:
    """Arrivals per lateness bucket (module docstring), smallest lateness first."""
    if not len(late):
        return pd.DataFrame(columns=HISTOGRAM_COLS)
    ns = late["lateness_ns"].to_numpy(np.int64)
    e = edges(float(ns.max()))
    bucket = np.searchsorted(e, ns, side="right") - 1  # e[b] <= ns < e[b + 1]
    n = len(e) - 1
    arrivals = np.bincount(bucket, minlength=n)
    rank = late["rank"].to_numpy(np.int64)
    ranks = pd.Series(rank).groupby(bucket).nunique().reindex(range(n), fill_value=0).to_numpy()
    # the latest arrival of each bucket: the last row of a stable sort by (bucket, lateness)
    order = np.lexsort((ns, bucket))
    last = order[np.r_[np.flatnonzero(np.diff(bucket[order])), len(order) - 1]]
    worst = pd.DataFrame({"b": bucket[last], "rank": rank[last], "ns": ns[last],
                          "step": late["step"].to_numpy()[last],
                          "label": late["label"].astype(object).to_numpy()[last]}).set_index("b").reindex(range(n))
    return pd.DataFrame({"lo_ns": e[:-1], "hi_ns": e[1:], "arrivals": arrivals.astype(np.int64),
                         "share": arrivals / len(ns), "ranks": ranks.astype(np.int64),
                         "worst_rank": worst["rank"].astype("Int64").array,
                         "worst_ns": worst["ns"].astype("Int64").array,
                         "worst_step": pd.to_numeric(worst["step"]).astype("Int64").array,
                         "worst_label": worst["label"].to_numpy()})[HISTOGRAM_COLS]


def quantiles(late: pd.DataFrame, qs: tuple[float, ...] = QUANTILES) -> pd.DataFrame:
    """Lateness (ns) at each quantile of `qs`: observed values (module docstring)."""
    if not len(late):
        return pd.DataFrame(columns=QUANTILE_COLS)
    ns = late["lateness_ns"].to_numpy(np.int64)
    return pd.DataFrame({"quantile": list(qs),
                         "lateness_ns": np.quantile(ns, qs, method="inverted_cdf").astype(np.int64)})
