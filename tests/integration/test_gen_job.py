"""bench/gen_job.py: the N-rank jobs it writes load as the format they claim, keep the template's records,
and carry the fault its ground truth names, where commscope doctor finds it."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from commscope.pipeline import diagnose_path
from commscope.load import load_path
from paths import ROOT, TESTS

DATA = TESTS / "data"
sys.path.insert(0, str(ROOT / "bench"))
gen_job = importlib.import_module("gen_job")  # a bench script, as tests/integration/test_bench_scripts.py imports them


def test_run_dir_job_repeats_the_template_and_plants_the_straggler(tmp_path):
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 12, steps=7, straggler=7, at_step=3)
    assert json.loads((tmp_path / "j" / "ground_truth.json").read_text()) == truth
    t = load_path(truth["job"])
    assert t.world_size == 12 and t.ranks == list(range(12)) and not t.problems
    # config.json is the template's with this job's size: the page shows it beside summary.json
    config = json.loads((tmp_path / "j" / "job" / "config.json").read_text())
    assert (config["world_size"], config["args"]["steps"]) == (12, 7)
    src = load_path(str(DATA / "cpurun-hooks-gloo2"))
    per_step = int((src.collectives["rank"] == 0).sum()) // src.steps["step"].nunique()
    c = t.collectives
    # every rank: 7 steps of the template's collectives, seq counting on without gaps
    for r, g in c.groupby("rank"):
        assert sorted(g["seq"]) == list(range(7 * per_step)), r
    assert sorted(t.steps.groupby("rank").size().unique()) == [7]
    assert set(c["group_size"].unique()) == {12}
    s = truth["straggler"]
    x = c[(c["group"] == s["group"]) & (c["seq"] == s["seq"])].set_index("rank")["call_ns"].astype(float)
    others = x.drop(7)
    assert x[7] - others.max() > 0.5 * s["delay_ms"] * 1e6  # late by the stall, beyond every other rank
    d = diagnose_path(truth["job"])
    assert (d.verdict, d.culprit_ranks, d.sequence, d.step) == ("straggler", [7], s["seq"], 3)
    # the others wait for it inside that collective: their exposed communication in step 3 grows by the stall
    from commscope.analyze.summary import summarize

    steps = summarize(t, with_hta=False)["steps"]
    exposed = {(r["rank"], r["step"]): r["exposed_comm_ms"] for r in steps}
    for r in range(12):
        if r != 7:
            assert exposed[(r, 3)] - exposed[(r, 2)] > 0.8 * s["delay_ms"], r
    # summary.json's step times (what `compare` reads) carry the stall in that step, and only there
    clean = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "c", 12, steps=7, at_step=3)
    times = [json.loads((Path(j).parent / "job" / "summary.json").read_text())["step_times_ms"]
             for j in (truth["job"], clean["job"])]
    assert [round(a - b, 6) for a, b in zip(*times)] == [0, 0, 0, round(s["delay_ms"], 6), 0, 0, 0]


def test_run_dir_hang_is_found_by_absence(tmp_path):
    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 9, steps=7, hang=4, at_step=2)
    d = diagnose_path(truth["job"])
    h = truth["hang"]
    assert (d.verdict, d.culprit_ranks, d.group, d.sequence) == ("hang", [4], h["group"], h["seq"])
    # each peer's watchdog holds the one collective it waits in, not its template's later repeats
    for r in (0, 8):
        wd = json.loads((Path(truth["job"]) / f"rank{r}" / "watchdog.json").read_text())
        assert [(x["step"], x["seq"]) for x in wd["inflight"]] == [(2, h["seq"])]


def test_kineto_job_desync_and_jitter(tmp_path):
    truth = gen_job.generate(DATA / "modded-nanogpt-8xh100", tmp_path / "j", 16, desync=11)
    files = sorted(Path(truth["job"]).iterdir())
    assert len(files) == 16 and all(f.name.endswith(".json.gz") for f in files)
    t = load_path(truth["job"])
    assert t.world_size == 16 and t.ranks == list(range(16))
    # rank 8 copies rank 0's trace: same collectives, times moved by the jitter only
    c = t.collectives
    a, b = (c[c["rank"] == r].sort_values(["group", "seq"]) for r in (0, 8))
    assert list(a["seq"]) == list(b["seq"]) and list(a["label"]) == list(b["label"])
    dt = (b["start_ns"].astype(float).to_numpy() - a["start_ns"].astype(float).to_numpy())
    assert np.nanmax(np.abs(dt)) < 5e6 and np.nanmax(np.abs(dt)) > 0
    d = diagnose_path(truth["job"])
    w = truth["desync"]
    assert (d.verdict, d.culprit_ranks, d.group, d.sequence) == ("desync", [11], w["group"], w["seq"])


def test_refuses_a_fault_outside_the_job(tmp_path):
    with pytest.raises(SystemExit, match="outside"):
        gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "j", 4, steps=2, straggler=4)
