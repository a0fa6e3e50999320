"""Placement's hidden time is the label table's: blocked waits inside a compute region are no compute.

DDP blocks on its buckets inside the `backward` region. Placement once took the compute regions as they
were, so a bucket waited on inside backward was "hidden" for its whole duration (hidden + exposed above the
duration) while the label table, whose compute set leaves the blocked waits out, said 12 %.
"""
from __future__ import annotations

import json
import shutil
from collections import defaultdict

import pytest

from commscope.analyze import exposure, placement
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS

SRC = TESTS / "data" / "cpurun-hooks-gloo2"


def waits_inside_backward(tmp_path):
    """A copy of cpurun-hooks-gloo2 whose every `backward` region runs on to the last wait end of its
    (rank, step, micro-step)'s collectives: the waits sit inside backward, as DDP's do."""
    run = tmp_path / "run"
    shutil.copytree(SRC, run)
    for ev in run.glob("rank*/events.jsonl"):
        rows = [json.loads(line) for line in ev.read_text().splitlines() if line.strip()]
        last_wait: dict[int, int] = {}
        for r in rows:
            if r["kind"] == "collective" and r.get("wait_end_ns"):
                last_wait[r["step"]] = max(last_wait.get(r["step"], 0), r["wait_end_ns"])
        for r in rows:
            if r["kind"] == "region" and r["name"] == "backward" and r["step"] in last_wait:
                r["end_ns"] = max(r["end_ns"], last_wait[r["step"]])
        ev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_hidden_plus_exposed_never_exceeds_the_duration(tmp_path):
    trace = load_path(str(waits_inside_backward(tmp_path)))
    df = placement.placement(trace)
    assert len(df) == int((trace.collectives["step"] >= 0).sum()) and len(df) > 20
    slack = df["duration_ms"] - df["hidden_ms"] - df["exposed_ms"]
    assert slack.min() >= -1e-6
    # the waits are long here: with them counted as compute, every waited-on row was hidden whole
    waited = df["exposed_ms"] > 1.0
    assert waited.sum() >= 5
    assert (df.loc[waited, "hidden_ms"] < df.loc[waited, "duration_ms"] - 1.0).all()


def test_placement_hidden_is_the_label_tables(tmp_path):
    trace = load_path(str(waits_inside_backward(tmp_path)))
    table = exposure.collective_table(trace)
    df = placement.placement(trace)
    t = table[table["step"] >= 0].set_index(["rank", "group", "seq"])
    got = df.set_index(["rank", "group", "group_seq"])["hidden_ms"]
    assert got.to_numpy() == pytest.approx(t.loc[got.index, "hidden_ns"].to_numpy() / 1e6, abs=1e-9)
    doc = summarize(trace, with_hta=False)
    hidden, dur = defaultdict(float), defaultdict(float)
    for r in doc["placement"]:
        hidden[r["label"]] += r["hidden_ms"]
        dur[r["label"]] += r["duration_ms"]
    checked = 0
    for label, v in doc["labels"].items():
        if label in dur and dur[label] > 0:
            assert 100 * hidden[label] / dur[label] == pytest.approx(v["hidden_pct"], abs=0.05), label
            checked += 1
    assert checked >= 10
