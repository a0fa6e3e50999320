"""exposure.label_stats / label_totals (numpy columns, one groupby-sum) against their per-column pandas
groupby definition, exactly, on random collective tables: missing labels, ops, bytes, durations and
transfer times, integer bytes (gloo traces), and values whose sums depend on compensated summation."""
import numpy as np
import pandas as pd
import pytest

from commscope.analyze import exposure


def reference_totals(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    ok = (table["bytes"] > 0) & (table["op"] != "barrier") & (table["transfer_ns"] > 0)  # a barrier has none
    t = pd.DataFrame({**{k: table[k] for k in keys}, "op": table["op"], "bytes": table["bytes"],
                      "duration_ns": table["duration_ns"], "exposed_ns": table["exposed_ns"],
                      "_b": table["bytes"].where(ok), "_t": table["transfer_ns"].where(ok),
                      "_bb": (table["busbw_gbps"] * table["transfer_ns"]).where(ok),
                      # busbw over the collectives whose bus factor is known (group size known and > 1)
                      "_bt": table["transfer_ns"].where(ok & table["busbw_gbps"].notna()),
                      "_unknown": table["exposed_ns"].isna()})
    # what compute left uncovered: duration − hidden_ns, whatever the timing
    t["_exp_in"] = np.maximum(table["duration_ns"] - table["hidden_ns"], 0.0)
    g = t.groupby(keys, sort=True)
    sums = g[["duration_ns", "exposed_ns", "_exp_in", "_b", "_t", "_bb", "_bt"]].sum()
    out = pd.DataFrame({"op": g["op"].first(), "count": g.size(), "bytes": g["bytes"].sum(min_count=1),
                        "dur": g["duration_ns"].mean(), "dur_sum": sums["duration_ns"],
                        "exposed": g["exposed_ns"].sum(min_count=1),  # unknown where no collective's is known
                        "_exp_in": sums["_exp_in"], "_b": sums["_b"], "_t": sums["_t"], "_bb": sums["_bb"],
                        "_bt": sums["_bt"], "exposed_unknown": g["_unknown"].sum().astype(np.int64)}
                       ).reset_index()
    out["mean_ms"] = out["dur"] / 1e6
    out["exposed_ms"] = out["exposed"] / 1e6
    with np.errstate(invalid="ignore", divide="ignore"):
        out["hidden_pct"] = np.where(out["dur_sum"] > 0, 100.0 * (1 - out["_exp_in"] / out["dur_sum"]), np.nan)
        out["algbw_gbps"] = np.where(out["_t"] > 0, out["_b"] / out["_t"], np.nan)
        out["busbw_gbps"] = np.where(out["_bt"] > 0, out["_bb"] / out["_bt"], np.nan)
    return out


def _table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    def some_nan(x, p):
        x = x.astype(np.float64)
        x[rng.random(n) < p] = np.nan
        return x
    int_bytes = rng.random() < 0.3
    nbytes = rng.integers(1, 10**9, n) if int_bytes else some_nan(rng.integers(1, 10**9, n), 0.2)
    nbytes[rng.random(n) < 0.05] = 0  # barriers
    dur = some_nan(rng.integers(0, 10**7, n), 0.05)
    return pd.DataFrame({
        "rank": rng.integers(0, 3, n),
        "label": pd.array(rng.choice(["ve0", "lm_head", "attn", None], size=n, p=[.4, .3, .25, .05]), dtype="str"),
        "op": pd.array(rng.choice(["all_reduce", "all_gather", "barrier", None], size=n, p=[.55, .3, .05, .1]),
                       dtype="str"),
        "bytes": nbytes, "duration_ns": dur,
        "exposed_ns": some_nan(rng.integers(0, 10**7, n), 0.05),
        "hidden_ns": some_nan(rng.integers(0, 10**7, n), 0.05),
        "timing": rng.choice(["kernel", "wall", "cuda_event", "gloo_thread"], size=n),
        "transfer_ns": some_nan(rng.integers(0, 10**6, n), 0.1),
        "busbw_gbps": some_nan(rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n), 0.1)})


@pytest.mark.parametrize("keys", [["rank", "label"], ["label"]])
def test_grouped_totals_equal_the_groupby_definition(keys):
    rng = np.random.default_rng(1)
    cols = ["op", "count", "bytes", "mean_ms", "exposed_ms", "hidden_pct", "algbw_gbps", "busbw_gbps",
            "exposed_unknown"]
    for n in [*rng.integers(1, 60, 40), 3000, 3000]:
        table = _table(rng, int(n))
        got, want = exposure._grouped_totals(table, keys), reference_totals(table, keys)
        pd.testing.assert_frame_equal(got, want[keys + cols], check_exact=True)
