"""Collective instances across ranks: which rows of the collectives frame are one call of one collective.

A collective call is identified on every member rank by its process group and its sequence number in that
group (`group`, `seq`; docs/frames.md), the key skew.arrival_skew matches arrivals by. `instance_ids`
numbers the instances seen on at least two ranks, so a viewer can link one call across ranks (flow arrows in
the Perfetto export, linking lines in the report's timeline).

Invariant: ids are dense 0..n-1 in order of the instance's earliest execution start (launch where no start
is known), -1 for rows without a key or seen on one rank only; the frame is not modified.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def instance_ids(coll: pd.DataFrame) -> np.ndarray:
    """Per row of `coll` (any ranks), its instance id or -1 (module docstring)."""
    if len(coll) == 0 or "group" not in coll or "seq" not in coll:
        return np.full(len(coll), -1, dtype=np.int64)
    key = pd.DataFrame({"group": coll["group"].astype("object").to_numpy(),
                        "seq": pd.to_numeric(coll["seq"], errors="coerce").to_numpy(),
                        "rank": coll["rank"].to_numpy()})
    when = pd.to_numeric(coll["start_ns"], errors="coerce").fillna(pd.to_numeric(coll["call_ns"], errors="coerce"))
    key["t"] = when.to_numpy(np.float64)
    ok = key["group"].notna().to_numpy() & ~np.isnan(key["seq"].to_numpy(np.float64))
    out = np.full(len(coll), -1, dtype=np.int64)
    if not ok.any():
        return out
    k = key[ok]
    g = k.groupby(["group", "seq"], sort=False)
    n_ranks = g["rank"].transform("nunique").to_numpy()
    first_t = g["t"].transform("min").to_numpy()
    shared = n_ranks >= 2
    if not shared.any():
        return out
    ks = k[shared].assign(first_t=first_t[shared])
    # dense ids in time order of the instance (NaN times last, then by key for a stable order)
    inst = ks.drop_duplicates(["group", "seq"]).sort_values(["first_t", "seq"], na_position="last", kind="stable")
    ids = pd.Series(np.arange(len(inst)), index=pd.MultiIndex.from_frame(inst[["group", "seq"]]))
    sel = np.flatnonzero(ok)[shared]
    out[sel] = ids.reindex(pd.MultiIndex.from_frame(ks[["group", "seq"]])).to_numpy()
    return out
