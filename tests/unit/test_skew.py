"""skew.spread (the numpy core of waiting.instances and skew.launch_skew) and waiting.by_rank against their
pandas groupby definition, on random collective tables with missing arrivals, groups, seqs and labels,
single-rank collectives, float seqs, host-timed rows floored at the group's earlier instances, and group
sizes some instances lack members of (launch skew leaves those out)."""
import numpy as np
import pandas as pd
import pytest

from commscope.analyze import skew, waiting


def reference_skew(collectives: pd.DataFrame, at: str) -> pd.DataFrame:
    when = waiting.arrival(collectives) if at == "arrival" else collectives["call_ns"].astype("Int64")
    c = pd.DataFrame({k: collectives[k] for k in ("group", "seq", "label", "op", "step", "rank")})
    c["arrival_ns"] = c["raw_ns"] = when
    c["floored"] = ~waiting.device_timed(collectives) if at == "arrival" else False
    c = c[c["arrival_ns"].notna()]
    if not len(c):
        return pd.DataFrame(columns=skew.SKEW_COLS)
    c = c[c["group"].notna() & c["seq"].notna()]  # groupby drops missing keys
    # a host-timed arrival is not before the latest arrival at any earlier seq of its group
    last = c.groupby(["group", "seq"])["arrival_ns"].max().reset_index().sort_values(["group", "seq"])
    last["floor"] = last.groupby("group")["arrival_ns"].cummax().astype("Int64")
    last["floor"] = last.groupby("group")["floor"].shift(1).astype("Int64")
    c["floor"] = last.set_index(["group", "seq"])["floor"].reindex(
        pd.MultiIndex.from_arrays([c["group"], c["seq"]])).array
    up = c["floored"] & c["floor"].notna() & (c["floor"] > c["arrival_ns"])
    c.loc[up, "arrival_ns"] = c.loc[up, "floor"]
    # ties of raised arrivals keep the order of the arrivals before raising
    c = c.sort_values(["group", "seq", "arrival_ns", "rank", "raw_ns"], kind="stable")
    c["since_first"] = c["arrival_ns"] - c["arrival_ns"].min()
    g = c.groupby(["group", "seq"], sort=False)
    first = g[["label", "op"]].first()
    out = pd.DataFrame({"label": first["label"], "op": first["op"], "step": g["step"].min(), "n_ranks": g.size(),
                        "first_ns": g["arrival_ns"].min(), "last_ns": g["arrival_ns"].max(),
                        "last_rank": g["rank"].last(), "since_sum": g["since_first"].sum(),
                        "since_min": g["since_first"].min()}).reset_index()
    out = out[out["n_ranks"] >= 2].copy()
    out["skew_ns"] = (out["last_ns"] - out["first_ns"]).astype(np.float64)
    after_first = out["since_sum"] - out["n_ranks"] * out["since_min"]
    out["wait_caused_ns"] = (out["n_ranks"] * (out["last_ns"] - out["first_ns"]) - after_first).astype(np.float64)
    out["last_rank"] = out["last_rank"].astype(np.int64)
    if at == "launch":  # launch skew keeps the instances with every member of the group present
        size = collectives.groupby(["group", "seq"])["group_size"].max()
        want = size.reindex(pd.MultiIndex.from_arrays([out["group"], out["seq"]])).to_numpy(np.float64)
        out = out[np.isnan(want) | (out["n_ranks"].to_numpy() >= want)]
    return out[skew.SKEW_COLS].reset_index(drop=True)


def reference_stragglers(sk: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    base = pd.DataFrame({"rank": list(ranks)})
    if not len(sk):  # nobody judged: no rows (waiting.unjudged says why)
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("rank", "times_last") else np.float64)
                             for c in waiting.RANK_COLS})
    g = sk.groupby("last_rank")
    out = base.assign(times_last=base["rank"].map(g.size()).fillna(0).astype(np.int64),
                      wait_caused_ns=base["rank"].map(g["wait_caused_ns"].sum()).fillna(0.0))
    out["last_share"] = out["times_last"] / len(sk)
    total = out["wait_caused_ns"].sum()
    out["score"] = out["wait_caused_ns"] / total if total > 0 else 0.0
    return out[waiting.RANK_COLS].sort_values(["score", "times_last"], ascending=False).reset_index(drop=True)


def _table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    call = rng.integers(1_700_000_000_000_000_000, 1_700_000_000_000_100_000, n)
    df = pd.DataFrame({
        "group": pd.array(rng.choice(["0", "1", "10", "b", None], size=n, p=[.4, .3, .1, .15, .05]), dtype="str"),
        "seq": rng.integers(-3, 6, n),
        "label": pd.array(rng.choice(["x", "y", None], size=n, p=[.5, .4, .1]), dtype="str"),
        "op": rng.choice(["all_reduce", "all_gather"], size=n), "step": rng.integers(0, 4, n),
        "rank": rng.integers(0, 4, n),
        "call_ns": pd.arrays.IntegerArray(call, rng.random(n) < 0.1),
        "start_ns": pd.arrays.IntegerArray(call + rng.integers(0, 5000, n), rng.random(n) < 0.2),
        "timing": rng.choice(["kernel", "gloo_thread", "wall"], size=n),
        # unknown (complete), or a size some instances reach and others do not
        "group_size": rng.choice([np.nan, 2.0, 3.0], size=n)})
    if rng.random() < 0.05:
        df["group"] = pd.array([None] * n, dtype="str")
    if rng.random() < 0.3:  # run directories can hold a float seq with gaps
        seq = df["seq"].astype(float)
        seq[rng.random(n) < 0.1] = np.nan
        df["seq"] = seq
    return df


@pytest.mark.parametrize("at", ["arrival", "launch"])
def test_numpy_skew_and_stragglers_equal_the_groupby_definition(at):
    rng = np.random.default_rng(0)
    for _ in range(80):
        df = _table(rng, int(rng.integers(0, 40)))
        got = (skew.spread(df, waiting.arrival(df), ~waiting.device_timed(df)) if at == "arrival" else
               skew.launch_skew(df))
        want = reference_skew(df, at)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        ranks = sorted(set(df["rank"].tolist()) | {9})
        pd.testing.assert_frame_equal(waiting.by_rank(got, ranks), reference_stragglers(want, ranks),
                                      check_exact=True)
