"""Placement of collectives relative to the end of backward, and the queueing split of exposed time."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from commscope.analyze import exposure, placement
from commscope.analyze.compare_labels import PLACEMENT_METRIC, PLACEMENT_SUFFIX, compare_labels, run_samples
from commscope.analyze.summary import summarize
from commscope.load import load_path
from rundirs import write_run
from paths import TESTS

DATA = TESTS / "data"
MS = 1_000_000
T0 = 10**18


def _coll(rank, step, seq, label, call, end, wait=None, wait_end=None, op="reduce_scatter", nbytes=1024):
    return {"kind": "collective", "rank": rank, "step": step, "label": label, "phase": "reduce", "op": op,
            "bytes": nbytes, "dtype": "float32", "group": "0", "group_size": 1, "seq": seq,
            "call_ns": T0 + int(call * MS), "return_ns": T0 + int(call * MS) + 1000,
            "wait_ns": None if wait is None else T0 + int(wait * MS),
            "wait_end_ns": None if wait_end is None else T0 + int(wait_end * MS),
            "start_ns": None, "end_ns": T0 + int(end * MS), "timing": "wall"}


def _region(rank, step, name, s, e, micro=0):
    return {"kind": "region", "rank": rank, "step": step, "name": name, "micro_step": micro,
            "start_ns": T0 + int(s * MS), "end_ns": T0 + int(e * MS), "timing": "wall"}


def _step(rank, step, s, e):
    return {"kind": "step", "rank": rank, "step": step, "loss": 1.0, "start_ns": T0 + int(s * MS),
            "end_ns": T0 + int(e * MS)}


def queue_run(tmp_path):
    """attn (launched 0, done 100) and mlp (1 → 150) queued before scalars (2 → 151), whose wait blocks
    10 → 152 (the last 1 ms after its completion); attn and mlp are waited on after they finished."""
    lines = [_region(0, 0, "forward", -20, -10), _region(0, 0, "backward", -10, 0),
             _coll(0, 0, 0, "attn", 0, 100, 160, 160.5), _coll(0, 0, 1, "mlp", 1, 150, 161, 161.25),
             _coll(0, 0, 2, "scalars", 2, 151, 10, 152, op="all_reduce", nbytes=36), _step(0, 0, -20, 170)]
    return write_run(tmp_path / "q", {0: lines})


def test_queued_time_is_charged_to_the_head_of_the_queue(tmp_path):
    t = exposure.collective_table(load_path(str(queue_run(tmp_path))))
    by = {r.label: r for r in t.itertuples()}
    # exposed 10 → 151 (its end): 10 → 100 behind attn, 100 → 150 behind mlp, 150 → 151 its own; the wait's
    # last 1 ms, after completion, is wake-up delay
    assert by["scalars"].exposed_ns == pytest.approx(141 * MS, abs=1e3)
    assert by["scalars"].queued_ns == pytest.approx(140 * MS, abs=1e3)
    assert by["scalars"].own_exposed_ns == pytest.approx(1 * MS, abs=1e3)
    assert by["scalars"].wake_delay_ns == pytest.approx(1 * MS, abs=1e3)
    assert by["attn"].queue_charged_ns == pytest.approx(90 * MS, abs=1e3)
    assert by["mlp"].queue_charged_ns == pytest.approx(50 * MS, abs=1e3)
    # waited on after it was done: nothing exposed, the whole wait is wake-up delay
    assert by["attn"].queued_ns == 0 and by["attn"].own_exposed_ns == 0
    assert by["attn"].wake_delay_ns == pytest.approx(0.5 * MS, abs=1e3)
    doc = summarize(load_path(str(queue_run(tmp_path))), with_hta=False)
    lab = doc["labels"]
    assert lab["scalars"]["exposed_ms"] == pytest.approx(141, abs=1e-3)
    assert lab["scalars"]["own_exposed_ms"] == pytest.approx(1, abs=1e-3)
    assert lab["attn"]["attributed_exposed_ms"] == pytest.approx(90, abs=1e-3)
    assert lab["mlp"]["attributed_exposed_ms"] == pytest.approx(50, abs=1e-3)
    assert lab["mlp"]["wake_delay_ms"] == pytest.approx(0.25, abs=1e-3)


def test_recorded_end_is_bounded_by_a_later_completion(tmp_path):
    """attn's recorded end (its wait, 300) is later than scalars' completion (120): launch order is
    completion order, so attn was done by 120; scalars' wait 120 → 130, after its own completion, is
    wake-up delay, not exposed."""
    lines = [_coll(0, 0, 0, "attn", 0, 300, 299, 300), _coll(0, 0, 1, "scalars", 1, 120, 50, 130, op="all_reduce"),
             _step(0, 0, -1, 400)]
    t = exposure.collective_table(load_path(str(write_run(tmp_path / "b", {0: lines}))))
    by = {r.label: r for r in t.itertuples()}
    assert by["scalars"].queued_ns == pytest.approx(70 * MS, abs=1e3)
    assert by["scalars"].own_exposed_ns == pytest.approx(0, abs=1e3)
    assert by["scalars"].wake_delay_ns == pytest.approx(10 * MS, abs=1e3)
    assert by["attn"].queue_charged_ns == pytest.approx(70 * MS, abs=1e3)


def test_cpu_run_scalars_wait_is_mostly_queueing():
    """The recorded CPU run (hooks schedule): the 36-byte scalars all_reduce is the most exposed label,
    but it waits behind the reduce-scatters launched before it; per rank, own + charged = exposed."""
    trace = load_path(str(DATA / "cpurun-hooks-gloo2"))
    t = exposure.collective_table(trace)
    doc = summarize(trace, with_hta=False)
    s = doc["labels"]["scalars"]
    assert next(iter(doc["labels"])) == "scalars"
    assert s["own_exposed_ms"] < 0.05 * s["exposed_ms"] and s["queued_ms"] > 0.9 * s["exposed_ms"]
    assert doc["labels"]["attn"]["queue_charged_ms"] > 0.5 * s["queued_ms"]
    for _, g in t.groupby("rank"):
        assert (g["own_exposed_ns"] + g["queue_charged_ns"]).sum() == pytest.approx(g["exposed_ns"].sum(), rel=1e-9)


def test_kernel_timed_collectives_do_not_queue():
    t = exposure.collective_table(load_path(str(DATA / "modded-nanogpt-8xh100")))
    assert t["queued_ns"].sum() < 1e-3 * t["exposed_ns"].sum()


def sched_run(path: Path, inside: bool, steps=4, ranks=2):
    """Per step: backward 0 → 10 ms; attn's reduce launched at 5 ms (inside) or 11 ms (after), its wait
    at 20 ms, done at 12 (inside: hidden) or 18 ms."""
    events = {}
    for r in range(ranks):
        lines = []
        for s in range(steps):
            o = s * 100
            call, end = (o + 5, o + 12) if inside else (o + 11, o + 25)
            lines += [_region(r, s, "forward", o - 10, o), _region(r, s, "backward", o, o + 10),
                      _region(r, s, "optimizer", o + 20, o + 30),
                      _coll(r, s, s, "attn", call, end, o + 20, max(end, o + 20)), _step(r, s, o - 10, o + 40)]
        events[r] = lines
    return write_run(path, events, summary={"status": "completed", "backend": "gloo", "device": "cpu",
                                            "losses": [1.0] * steps, "step_times_ms": [50.0] * steps})


def test_placement_rows_and_backward_end(tmp_path):
    trace = load_path(str(sched_run(tmp_path / "in", inside=True)))
    df = placement.placement(trace)
    assert len(df) == len(trace.collectives)
    assert set(df["backward_end_source"]) == {"backward region"} and set(df["start_basis"]) == {"launch"}
    assert df["start_vs_backward_end_ms"].to_numpy() == pytest.approx(np.full(8, -5.0), abs=1e-3)
    assert df["exposed_ms"].max() == 0.0
    assert all(o[:1] == ["backward"] for o in df["overlapped"])
    assert df["hidden_ms"].to_numpy() == pytest.approx(np.full(8, 5.0), abs=1e-3)  # 5 → 10 under backward
    doc = summarize(trace, with_hta=False)
    p = doc["placement"]
    assert len(p) == 8 and {"rank", "step", "seq", "label", "op", "bytes", "start_vs_backward_end_ms",
                            "exposed_ms"} <= set(p[0])
    assert p[0]["start_vs_backward_end_ms"] == pytest.approx(-5.0, abs=1e-3) and p[0]["seq"] == 0


def test_placement_order_within_a_step(tmp_path):
    df = placement.placement(load_path(str(queue_run(tmp_path))))
    assert list(df["label"]) == ["attn", "mlp", "scalars"] and list(df["seq"]) == [0, 1, 2]
    assert list(df["start_vs_backward_end_ms"].round(3)) == [0.0, 1.0, 2.0]
    assert df["queued_ms"].iloc[2] == pytest.approx(140, abs=1e-3)


def test_placement_on_gpu_traces_uses_backward_named_kernels():
    trace = load_path(str(DATA / "modded-nanogpt-8xh100"))
    df = placement.placement(trace)
    coll = trace.collectives
    assert len(df) == int((coll["step"] >= 0).sum())
    assert set(df["backward_end_source"]) == {"backward-named compute"}
    # independent recomputation for rank 3, step 11
    c = trace.compute[(trace.compute["rank"] == 3) & (trace.compute["step"] == 11)]
    bw_end = int(c[c["name"].str.contains("backward")]["end_ns"].max())
    mine = coll[(coll["rank"] == 3) & (coll["step"] == 11)].sort_values("call_ns")
    want = [(int(s) - bw_end) / 1e6 for s in mine["start_ns"]]
    got = df[(df["rank"] == 3) & (df["step"] == 11)]
    assert list(got["start_vs_backward_end_ms"]) == pytest.approx(want, abs=1e-6)
    assert list(got["group_seq"]) == list(mine["seq"])


def test_overlapped_names_do_not_depend_on_how_pairs_are_blocked(monkeypatch):
    """_overlapped makes (collective, compute event) pairs in blocks and reduces them when enough are held:
    blocks of a few pairs give the same hidden time and names as one block of all."""
    trace = load_path(str(DATA / "modded-nanogpt-8xh100"))
    table = exposure.collective_table(trace)
    whole = placement.placement(trace, table)
    monkeypatch.setattr(placement, "_PAIR_BLOCK", 3)
    small = placement.placement(trace, table)
    assert whole["overlapped"].tolist() == small["overlapped"].tolist()
    assert whole["hidden_ms"].tolist() == small["hidden_ms"].tolist()
    assert sum(map(len, whole["overlapped"])) > len(whole)  # several names per collective on this trace


def test_compare_shows_a_collective_moving_into_backward(tmp_path):
    base = [sched_run(tmp_path / f"after{i}", inside=False) for i in range(5)]
    cand = [sched_run(tmp_path / f"inside{i}", inside=True) for i in range(5)]
    t = compare_labels([[run_samples(load_path(str(r))) for r in g] for g in (base, cand)], ["after", "inside"])
    by = {r["label"]: r for r in t.to_dict("records")}
    row = by["attn" + PLACEMENT_SUFFIX]
    assert row["metric"] == PLACEMENT_METRIC and row["verdict"] == "earlier"
    assert row["base_ms"] == pytest.approx(1.0, abs=1e-3) and row["cand_ms"] == pytest.approx(-5.0, abs=1e-3)
    assert by["attn"]["metric"] == "exposed_ms" and by["attn"]["verdict"] == "better"
    assert by["attn"]["base_ms"] == pytest.approx(5.0, abs=1e-3) and by["attn"]["cand_ms"] == 0.0
