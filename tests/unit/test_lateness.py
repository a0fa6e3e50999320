"""Arrival lateness (waiting.lateness, analyze.lateness): exact numbers on hand-built collectives, device-
and host-timed, and on a generated job whose planted straggler must be the one arrival of the top bucket."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from commscope.analyze import lateness, waiting
from commscope.load import load_path
from scale_jobs import DELAY_MS, scale_job

T = 1_700_000_000_000_000_000  # epoch ns


def collectives(rows: list[tuple]) -> pd.DataFrame:
    """(rank, seq, step, label, arrival ns since T, timing): one group "0" of 3 ranks."""
    df = pd.DataFrame(rows, columns=["rank", "seq", "step", "label", "t", "timing"])
    t = T + df["t"].to_numpy(np.int64)
    device = (df["timing"] == "kernel").to_numpy()
    return pd.DataFrame({
        "rank": df["rank"], "group": "0", "group_size": 3, "seq": df["seq"], "step": df["step"],
        "label": df["label"], "op": "all_reduce", "timing": df["timing"],
        # device-timed: launched at T, arriving at the kernel's start; host-timed: arriving at the launch
        "call_ns": pd.array(np.where(device, T, t), dtype="Int64"),
        "start_ns": pd.array([int(x) if d else pd.NA for x, d in zip(t, device)], dtype="Int64")})


def test_device_lateness_histogram_and_quantiles_exact():
    c = collectives([
        (0, 1, 0, "a", 0, "kernel"), (1, 1, 0, "a", 1_500, "kernel"), (2, 1, 0, "a", 7_000, "kernel"),
        (0, 2, 1, "b", 10_000, "kernel"), (1, 2, 1, "b", 10_000, "kernel"), (2, 2, 1, "b", 2_010_000, "kernel"),
        (0, 3, 1, "c", 50_000, "kernel"), (1, 3, 1, "c", 50_000, "kernel"),  # rank 2 missing: no last arrival
    ])
    late = waiting.lateness(c)
    assert late.columns.tolist() == waiting.LATENESS_COLS
    # instance by instance, each by arrival; the incomplete seq 3 is left out, as waiting.instances does
    assert late["seq"].tolist() == [1, 1, 1, 2, 2, 2]
    assert late["rank"].tolist() == [0, 1, 2, 0, 1, 2]
    assert late["lateness_ns"].tolist() == [0, 1_500, 7_000, 0, 0, 2_000_000]
    h = lateness.histogram(late)
    # 1-2-5 buckets from [0, 1 µs) to the one holding 2 ms: [2 ms, 5 ms)
    assert h["lo_ns"].tolist()[:5] == [0, 1_000, 2_000, 5_000, 10_000] and h["hi_ns"].iloc[-1] == 5_000_000
    nonzero = h[h["arrivals"] > 0]
    assert nonzero["lo_ns"].tolist() == [0, 1_000, 5_000, 2_000_000]
    assert nonzero["arrivals"].tolist() == [3, 1, 1, 1] and h["arrivals"].sum() == 6
    assert nonzero["share"].tolist() == pytest.approx([0.5, 1 / 6, 1 / 6, 1 / 6])
    assert nonzero["ranks"].tolist() == [2, 1, 1, 1]
    assert nonzero["worst_rank"].tolist() == [1, 1, 2, 2]  # rank 1's 0 ns at seq 2 comes after rank 0's
    assert nonzero["worst_ns"].tolist() == [0, 1_500, 7_000, 2_000_000]
    assert nonzero["worst_step"].tolist() == [1, 0, 0, 1] and nonzero["worst_label"].tolist() == ["b", "a", "a", "b"]
    q = lateness.quantiles(late)
    # observed values (inverted CDF) of 0, 0, 0, 1.5 µs, 7 µs, 2 ms
    assert q["quantile"].tolist() == [0.5, 0.9, 0.99, 0.999, 1.0]
    assert q["lateness_ns"].tolist() == [0, 2_000_000, 2_000_000, 2_000_000, 2_000_000]
    # the smallest value with at least that share at or below it: 3/6 ≤ 0.5, 4/6 ≥ 0.51 and 0.6, 5/6 ≥ 0.7
    assert lateness.quantiles(late, (0.5, 0.51, 0.6, 0.7))["lateness_ns"].tolist() == [0, 1_500, 1_500, 7_000]


def test_host_lateness_counts_from_the_previous_instance():
    # CPU ranks (launch calls): rank 2 launches seq 1 at 9 ms; the others' seq 2 launches at 3 ms cannot
    # start before 9 ms, so rank 2's late seq 1 is charged once (9 ms) and seq 2's lateness is its own
    c = collectives([
        (0, 1, 0, "a", 0, "wall"), (1, 1, 0, "a", 1_000_000, "wall"), (2, 1, 0, "a", 9_000_000, "wall"),
        (0, 2, 0, "b", 3_000_000, "wall"), (1, 2, 0, "b", 3_000_000, "wall"), (2, 2, 0, "b", 9_400_000, "wall"),
    ])
    late = waiting.lateness(c)
    assert late["lateness_ns"].tolist() == [0, 1_000_000, 9_000_000, 0, 0, 400_000]
    inst = waiting.instances(c)
    # the same arrivals as the straggler model's: Σ over an instance's members of (last − own) = wait caused
    per = late.groupby("seq")["lateness_ns"].agg(["max", "sum", "size"])
    assert (per["max"] * per["size"] - per["sum"]).tolist() == inst["wait_caused_ns"].tolist()


def test_empty_input_gives_empty_frames():
    late = waiting.lateness(collectives([]))
    assert late.empty and lateness.histogram(late).empty and lateness.quantiles(late).empty
    assert lateness.histogram(late).columns.tolist() == lateness.HISTOGRAM_COLS


def test_generated_straggler_is_the_top_bucket(tmp_path):
    truth = scale_job(tmp_path, ranks=40, straggler=29)
    s = truth["straggler"]
    c = load_path(truth["job"]).collectives
    late = waiting.lateness(c)
    assert len(late) == len(c) and late["lateness_ns"].min() == 0  # every instance complete, firsts at 0
    h = lateness.histogram(late)
    top = h[h["arrivals"] > 0].iloc[-1]
    assert top["arrivals"] == 1 and top["worst_rank"] == s["rank"] and top["worst_step"] == s["step"]
    assert top["worst_label"] == s["label"]
    # the planted 1.5 s stall lands in its own bucket, [1 s, 2 s), with nothing between it and 200 ms
    assert (top["lo_ns"], top["hi_ns"]) == (1_000_000_000, 2_000_000_000) and top["lo_ns"] <= DELAY_MS * 1e6
    assert h[(h["lo_ns"] >= 200_000_000) & (h["hi_ns"] <= 1_000_000_000)]["arrivals"].sum() == 0
    # its lateness by the host rule, from the raw launches: its call − the first arrival, where no rank's
    # arrival precedes the group's previous instances
    g = c[c["group"] == s["group"]]
    call = g["call_ns"].astype("int64")
    floor = call[g["seq"] < s["seq"]].max()
    at = g["seq"] == s["seq"]
    first = np.maximum(call[at & (g["rank"] != s["rank"])], floor).min()
    mine = int(call[at & (g["rank"] == s["rank"])].iloc[0])
    assert top["worst_ns"] == mine - first
    assert lateness.quantiles(late)["lateness_ns"].iloc[-1] == mine - first
    assert DELAY_MS * 1e6 - 100e6 < top["worst_ns"] < DELAY_MS * 1e6  # the stall, less the template's own lag
