"""`commscope doctor` on hand-built 4-rank run directories with one known fault each (fast, one process), on
partial trace sets, and on the 8×H100 traces, where it must agree with the report's straggler table."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from commscope.analyze import doctor, doctor_status, doctor_straggler
from commscope.analyze.diagnosis import VERDICTS
from commscope.pipeline import diagnose_path
from commscope.load.flight_recorder import read_flight_recorder
from commscope.errors import UserError
from report_trace import T, make_trace, write_run_dir
from rundirs import write_json
from paths import TESTS

MS = 1_000_000
DATA = TESTS / "data"


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), path)
    return path


def events(run, rank):
    p = run / f"rank{rank}" / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()]


def rewrite(run, rank, fn):
    p = run / f"rank{rank}" / "events.jsonl"
    rows = [r for r in (fn(r) for r in events(run, rank)) if r is not None]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))


def put(run, rank, name, doc):
    write_json(run / f"rank{rank}" / name, doc)


def inflight(rank, seq, label, op="reduce_scatter", nbytes=8_000_000, step=3, wait=True):
    t = 1_764_670_000_000_000_000 + 3_000 * MS
    return {"kind": "collective", "rank": rank, "step": step, "label": label, "phase": "reduce", "op": op,
            "bytes": nbytes, "dtype": "bf16", "group": "0", "group_size": 4, "seq": seq, "call_ns": t + rank,
            "return_ns": t + rank + 5, "wait_ns": t + 100 if wait else None, "wait_end_ns": None}


def watchdog(rank, rows):
    return {"schema_version": 1, "rank": rank, "world_size": 4, "timeout_s": 3, "fired_ns": 1,
            "waiting_on": rows[0], "inflight": rows, "last_step": 2, "stacks": {}}


def test_healthy_run_is_ok(run):
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("ok", [])


def shift(run, rank, seqs, field, by):
    """Move `field` of `rank`'s collectives `seqs` by `by` ns, keeping each interval ordered (a launch that
    returns before its call, or a kernel that ends before it starts, is a record the loader refuses)."""
    pairs = {"call_ns": "return_ns", "start_ns": "end_ns", "wait_ns": "wait_end_ns"}

    def moved(r):
        out = {**r, field: r[field] + by}
        end = pairs.get(field)
        if end and out.get(end) is not None:
            out[end] = max(out[end], out[field])
        return out

    rewrite(run, rank, lambda r: moved(r) if r["kind"] == "collective" and r["seq"] in seqs else r)


def test_a_late_launch_whose_device_start_is_on_time_is_no_straggler(run):
    # rank 2's host queues step 1's mlp (seq 4) 500 ms late, but its kernel starts with the others': on a
    # GPU the host runs ahead, and nobody waited
    shift(run, 2, {4}, "call_ns", 500 * MS)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("ok", [])
    assert d.details["judged_steps"] == [1, 2] and d.details["excluded_steps"] == {"0": "warm-up"}


def test_straggler_is_the_late_device_arrival(run):
    # rank 2's mlp kernel (seq 4, step 1) starts 200 µs after the others': they wait 3 × 200 µs, 20 % of
    # the 1 ms step
    shift(run, 2, {4}, "start_ns", 200_000)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence, d.group) == ("straggler", [2], "mlp", 1, 4, "0")
    assert d.confidence == "medium"  # one of the two judged steps
    assert d.evidence == [{"rank": 2, "step": 1, "instances": 1, "waiting_caused_ms": pytest.approx(0.6),
                           "mean_wait_ms": pytest.approx(0.2), "pct_of_median_step": pytest.approx(20.0),
                           "step_ms": pytest.approx(1.0)}]
    det = d.details
    assert det["threshold"]["kind"] == "relative" and det["threshold"]["arrivals"] == "device"
    assert det["threshold"]["ms"] == pytest.approx(0.1)  # 10 % of the 1 ms median step
    assert det["persistence"]["2"]["steps"] == [1] and det["persistence"]["2"]["share_of_judged_steps"] == 0.5
    [inst] = det["instances"]
    assert (inst["sequence"], inst["last_rank"], inst["ranks"], inst["label"]) == (4, 2, 4, "mlp")
    assert inst["waiting_caused_ms"] == pytest.approx(0.6) and inst["arrival_skew_ms"] == pytest.approx(0.2)
    assert inst["launch_skew_ms"] == pytest.approx(0.03)  # host side: the 10 µs per rank launch lag
    # under the bar (absolute or relative) it is not a straggler
    assert diagnose_path(str(run), straggler_ms=0.3).verdict == "ok"
    assert diagnose_path(str(run), straggler_pct=25).verdict == "ok"
    assert diagnose_path(str(run), straggler_ms=0.15).verdict == "straggler"


def test_warmup_steps_are_not_judged(run):
    shift(run, 2, {1}, "start_ns", 300_000)  # step 0
    assert diagnose_path(str(run)).verdict == "ok"
    d = diagnose_path(str(run), warmup_steps=0)
    assert (d.verdict, d.culprit_ranks, d.step) == ("straggler", [2], 0)


def test_a_run_directorys_first_step_is_its_warm_up_whatever_its_number(tmp_path):
    """A script may count its steps from 1: a run directory is recorded from the run's start, so its first
    recorded step is the warm-up; a Kineto trace's window may start late in a run, so there the warm-up is
    the steps numbered below --warmup-steps."""
    from commscope.analyze.waiting import noise_steps
    from commscope.load import load_path

    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(1, 2, 3), style="run"), path)
    shift(path, 2, {1}, "start_ns", 300_000)  # in step 1, the first
    d = diagnose_path(str(path))
    assert d.verdict == "ok" and d.details["excluded_steps"] == {"1": "warm-up"}
    assert d.details["judged_steps"] == [2, 3]
    assert diagnose_path(str(path), warmup_steps=0).verdict == "straggler"
    trace = load_path(str(path))
    assert noise_steps(trace, 2) == {1: "warm-up", 2: "warm-up"}
    trace.source = "kineto"  # the same steps as a trace's window: numbered 1-3, none below 1
    assert noise_steps(trace) == {}


def test_steps_that_some_ranks_did_not_record_are_not_judged():
    """Traces of the ranks cut at different steps: a step that ranks 2-3 did not record has no collective
    every member reached, so its waiting is unknown, not zero; judging it would lower the confidence of a
    straggler seen in the steps every rank recorded (1 of 4 judged steps: low, where it is 1 of 2)."""
    from report_trace import make_trace

    from commscope.analyze.waiting import noise_steps, partial_steps

    trace = make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2, 3, 4))
    c = trace.collectives
    c.loc[(c["rank"] == 2) & (c["step"] == 2) & (c["label"] == "mlp"), "start_ns"] += 200_000
    whole = doctor.diagnose(trace)
    assert (whole.verdict, whole.confidence, whole.details["judged_steps"]) == ("straggler", "low", [1, 2, 3, 4])
    cut = lambda f: f[~(f["rank"].isin([2, 3]) & (f["step"] >= 3))].reset_index(drop=True)
    trace.steps, trace.collectives, trace.compute = cut(trace.steps), cut(trace.collectives), cut(trace.compute)
    assert partial_steps(trace.steps) == {3: [2, 3], 4: [2, 3]}
    assert noise_steps(trace) == {0: "warm-up", 3: "not recorded by ranks 2-3", 4: "not recorded by ranks 2-3"}
    d = doctor.diagnose(trace)
    assert (d.verdict, d.culprit_ranks, d.step, d.confidence) == ("straggler", [2], 2, "medium")
    assert d.details["judged_steps"] == [1, 2]
    assert "of the 1.0 ms median step of steps 0-2, not steps 3-4, which ranks 2-3 did not record)" in d.summary
    trace.steps = trace.steps[~((trace.steps["rank"] == 1) & (trace.steps["step"] == 4))]
    assert partial_steps(trace.steps)[4] == [1, 2, 3] and noise_steps(trace)[4] == "not recorded by ranks 1-3"
    assert partial_steps(trace.steps.iloc[:0]) == {}


def test_persistent_straggler_has_high_confidence_and_shares_are_split(tmp_path):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2, 3), style="run"), path)
    shift(path, 1, {4, 7, 10}, "start_ns", 300_000)  # mlp of steps 1-3: 30 % of each step
    shift(path, 3, {7}, "start_ns", 200_000)  # and rank 3 in step 2, less
    d = diagnose_path(str(path))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [1], "high")
    p = d.details["persistence"]["1"]
    # step 2: rank 1's arrival 300 µs late, rank 3's 200 µs: the others waited (300 + 300 + 100) / 3 µs
    assert p["steps"] == [1, 2, 3] and p["mean_pct_of_median_step"] == pytest.approx((30 + 70 / 3 + 30) / 3)
    assert p["waiting_caused_ms"] == pytest.approx(3 * 0.9 - 0.2)  # in step 2 rank 3 waited only 100 µs
    assert set(d.details["also_late"]) == set()  # rank 3 came last nowhere


def test_a_stall_in_a_step_left_out_is_said_not_judged(tmp_path):
    """Rank 2 stalls 300 µs before mlp in step 2, the profiler window (--profile 2:3): not judged, so the
    verdict is ok, but it says that the step left out holds a stall over the bar and why it is no evidence,
    rather than naming a lesser rank as the most any rank made the others wait."""
    from commscope.rundir.schema import SCHEMA_VERSION

    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2, 3, 4), style="run"), path)
    write_json(path / "config.json", {"schema_version": SCHEMA_VERSION, "args": {"profile": "2:3"}})
    shift(path, 2, {7}, "start_ns", 300_000)
    d = diagnose_path(str(path))
    assert d.verdict == "ok" and d.details["judged_steps"] == [1, 4]
    assert d.details["unjudged_most_waiting"] == {"rank": 2, "step": 2, "excluded": "profiler window",
                                                  "mean_wait_ms": pytest.approx(0.3)}
    assert d.summary.endswith("; not judged: in step 2 (profiler window) rank 2 made the others wait 0.3 ms, "
                              "over the bar, but the profiler's own start and overhead delay the ranks there, so "
                              "that step is no evidence either way (a run profiled in other steps judges it).")
    shift(path, 2, {7}, "start_ns", -300_000)  # without the stall nothing is said of the steps left out
    d = diagnose_path(str(path))
    assert d.verdict == "ok" and "not judged: in step" not in d.summary and "unjudged_most_waiting" not in d.details


def test_the_wording_says_the_waiting_is_over_the_late_steps_only(run):
    shift(run, 2, {4}, "start_ns", 200_000)
    d = diagnose_path(str(run))
    # the median step says which steps it covers: warm-up step 0 included, as the bar's yardstick
    assert d.summary.startswith("straggler: rank 2 made the other ranks wait 0.2 ms each (20.0 % of the 1.0 ms "
                                "median step of steps 0-2) in the 1 step where it was late (step 1, of 2 judged); "
                                "0.6 ms of waiting in all, all of it at 'mlp'; the longest at 'mlp' (step 1, seq 4, "
                                "0.2 ms per waiting rank).")
    assert d.details["median_step_steps"] == [0, 1, 2]
    assert "per step on average" not in d.summary
    assert "Confidence medium (as persistent as so few judged steps can show)" in d.summary
    assert d.details["persistence"]["2"]["max_bar_multiple"] == pytest.approx(2.0)  # 0.2 ms against 0.1 ms


def test_the_verdict_writes_thousands_with_separators_as_the_page_around_it_does(run):
    d = diagnose_path(str(run), straggler_ms=1500)
    assert d.verdict == "ok" and "straggler bar 1,500.0 ms of waiting per step" in d.summary


def test_one_stall_far_over_the_bar_rates_high_an_episode_near_it_low(tmp_path):
    """Persistence alone would call a single stall, one step of many, `low`; one of at least 5× the bar
    (healthy runs stay under 1×) is unmistakable and rates `high`, saying why."""
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=tuple(range(6)), style="run"), path)
    shift(path, 3, {7}, "start_ns", 600_000)  # step 2's mlp: the others wait 0.6 ms, 6× the 0.1 ms bar
    d = diagnose_path(str(path))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "high")
    assert d.details["persistence"]["3"]["max_bar_multiple"] == pytest.approx(6.0)
    assert "in the 1 step where it was late (step 2, of 5 judged)" in d.summary
    assert "Confidence high (one stall 6.0× the bar, far beyond healthy noise)" in d.summary
    # the same stall at 3× the bar, one step of five: an episode
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=tuple(range(6)), style="run"), tmp_path / "run2")
    shift(tmp_path / "run2", 3, {7}, "start_ns", 300_000)
    d = diagnose_path(str(tmp_path / "run2"))
    assert (d.verdict, d.confidence) == ("straggler", "low")
    assert "Confidence low (an episode: 1 of 5 judged steps, at most 3.0× the bar)" in d.summary
    assert doctor_straggler._confidence(1, 39, 12.5) == "high" and doctor_straggler._confidence(1, 39, 4.9) == "low"
    assert doctor_straggler._confidence(3, 4, 1.1) == "high" and doctor_straggler._confidence(1, 2, 1.1) == "medium"


def stretched(trace, k):
    """The hand-built trace with every time k× as far from its start: steps of k ms instead of 1 ms."""
    for df in (trace.steps, trace.compute, trace.collectives, trace.regions, trace.hooks):
        for c in [c for c in df.columns if c.endswith("_ns")]:
            df[c] = T + (df[c] - T) * k
    return trace


def cpu_run(tmp_path, steps=(0, 1, 2), step_ms=1, ranks=(0, 1, 2, 3), name="cpu"):
    """The hand-built run as a CPU (gloo) run records it: no device start, launches are the arrivals."""
    path = tmp_path / name
    write_run_dir(stretched(make_trace(ranks=ranks, steps=steps, style="run"), step_ms), path)
    for r in ranks:
        rewrite(path, r, lambda x: {**x, "timing": "wall", "start_ns": None} if x["kind"] == "collective" else x)
    return path


def test_cpu_late_burst_is_charged_once(tmp_path):
    path = cpu_run(tmp_path, step_ms=100)  # steps long enough that the share, not the host floor, sets the bar
    # rank 3 sleeps 150 ms before step 1's mlp and launches it and everything after it late
    shift(path, 3, {4, 5}, "call_ns", 150 * MS)
    d = diagnose_path(str(path))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence) == ("straggler", [3], "mlp", 1, 4)
    assert d.details["threshold"]["arrivals"] == "host"
    assert d.details["threshold"]["set_by"] == "share of median step" and d.details["threshold"]["ms"] == 100
    waits = {i["sequence"]: i["waiting_caused_ms"] for i in d.details["instances"]}
    # mlp: ranks 0-2 launched at 81 ms + 0/1/2 ms lag, rank 3 at 83 + 150 ms
    assert waits[4] == pytest.approx(100 * (3 * 1530 / 1000 - (0.0 + 0.01 + 0.02)), abs=1e-6)
    # scalars, launched right after: the others could not start it before mlp's last arrival either
    assert 5 not in waits or waits[5] == pytest.approx(0.0, abs=10)
    # 150 % of the median step: over the 100 % bar of host-timed arrivals; 50 % would not be
    shift(path, 3, {4, 5}, "call_ns", -100 * MS)
    assert diagnose_path(str(path)).verdict == "ok"


def plain_loop_run(tmp_path, late_ms, name="cpu"):
    """A run like examples/plain_loop.py: 2 CPU ranks, steps 0-4 of 7 ms; in step 4 rank 0 launches its
    collectives from mlp on `late_ms` late, so rank 1 waits about that long for it."""
    path = cpu_run(tmp_path, steps=tuple(range(5)), step_ms=7, ranks=(0, 1), name=name)
    shift(path, 0, {13, 14}, "call_ns", late_ms * MS)  # its mlp and everything after it
    return path


def test_host_bar_has_a_floor_above_os_scheduling_noise(tmp_path):
    """18 ms of waiting in one step of 7 ms median steps, 2.6× the 100 % share: the kind of stall a loaded
    machine's scheduler alone gives a healthy CPU rank (docs/faults.md), under the host floor, so ok,
    naming the floor."""
    d = diagnose_path(str(plain_loop_run(tmp_path, 18)))
    assert (d.verdict, d.culprit_ranks) == ("ok", []), d.summary
    th = d.details["threshold"]
    assert (th["set_by"], th["ms"], th["host_floor_ms"], th["arrivals"]) == (
        "host scheduling floor", doctor_straggler.STRAGGLER_FLOOR_MS_HOST, 50.0, "host")
    assert th["pct_of_median_step"] == 100
    assert ("straggler bar 50.0 ms of waiting per step (the 50 ms floor of host-timed arrivals, above OS "
            "scheduling noise; 100 % of the 7.0 ms median step of steps 0-4 is less); the most any rank made "
            "the others wait in a step: rank 0, 18.1 ms in step 4") in d.summary
    most = d.details["most_waiting"]  # the same figure, machine-readable: the margin a healthy run leaves
    assert (most["rank"], most["step"]) == (0, 4)
    assert most["mean_wait_ms"] == pytest.approx(18.1, abs=0.1)
    assert most["bar_multiple"] == pytest.approx(most["mean_wait_ms"] / 50.0)
    assert most["pct_of_median_step"] == pytest.approx(100 * most["mean_wait_ms"] / 7.0, rel=0.02)
    # a bar the user gives wins: the floor calibrates only the default
    d = diagnose_path(str(plain_loop_run(tmp_path, 18, "pct")), straggler_pct=100)
    assert (d.verdict, d.culprit_ranks, d.step) == ("straggler", [0], 4)
    assert d.details["threshold"]["set_by"] == "--straggler-pct" and d.details["threshold"]["ms"] == pytest.approx(7)
    assert "host_floor_ms" not in d.details["threshold"]
    d = diagnose_path(str(plain_loop_run(tmp_path, 18, "ms")), straggler_ms=10)
    assert (d.verdict, d.culprit_ranks, d.details["threshold"]["set_by"]) == ("straggler", [0], "--straggler-ms")
    assert d.summary.endswith("bar 10.0 ms per step (--straggler-ms).")


def test_a_host_stall_far_over_scheduling_noise_is_a_straggler(tmp_path):
    d = diagnose_path(str(plain_loop_run(tmp_path, 200)))
    assert (d.verdict, d.culprit_ranks, d.step) == ("straggler", [0], 4), d.summary
    assert d.confidence == "low"  # one step of four, 4× the bar: an episode, but well beyond the noise
    assert d.evidence[0]["mean_wait_ms"] == pytest.approx(200, abs=0.5)
    assert d.details["threshold"]["set_by"] == "host scheduling floor"
    assert d.summary.endswith("bar 50.0 ms per step (the 50 ms floor of host-timed arrivals, above OS scheduling "
                              "noise; 100 % of the median step is less).")


def test_device_timed_bar_has_no_host_floor(tmp_path):
    """GPU arrivals keep the 10 % share however short the step: 0.3 ms in 1 ms steps, once in five, is a
    straggler (low confidence), with no floor."""
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=tuple(range(6)), style="run"), path)
    shift(path, 3, {7}, "start_ns", 300_000)
    d = diagnose_path(str(path))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "low")
    th = d.details["threshold"]
    assert (th["set_by"], th["arrivals"], th["ms"]) == ("share of median step", "device", pytest.approx(0.1))
    assert "host_floor_ms" not in th


def test_profiler_window_and_its_export_are_not_judged(tmp_path):
    path = cpu_run(tmp_path, steps=(0, 1, 2, 3, 4), step_ms=100)
    cfg = json.loads((path / "config.json").read_text())
    write_json(path / "config.json", {**cfg, "args": {**cfg.get("args", {}), "profile": "1:3"}})
    shift(path, 3, {10, 11}, "call_ns", 200 * MS)  # step 3: right after the export
    d = diagnose_path(str(path))
    assert d.verdict == "ok" and d.details["judged_steps"] == [4]
    assert d.details["excluded_steps"] == {"0": "warm-up", "1": "profiler window", "2": "profiler window",
                                           "3": "profiler export"}
    shift(path, 3, {13, 14}, "call_ns", 200 * MS)  # step 4 is judged
    assert diagnose_path(str(path)).culprit_ranks == [3]


def test_crash_is_the_rank_without_status(run):
    os.remove(run / "rank3" / "status.json")
    rewrite(run, 3, lambda r: None if r["step"] == 2 else r)
    put(run, 1, "status.json", {"status": "failed", "error": "DistBackendError: Connection closed by peer",
                                "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [3], 1)
    assert any(e.get("role") == "affected" and e["rank"] == 1 for e in d.evidence)


def test_a_rank_failing_on_its_own_is_a_crash(run):
    put(run, 2, "status.json", {"status": "failed", "error": "RuntimeError: CUDA out of memory", "last_step": 2})
    put(run, 0, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [2])


SIGTERM = "Terminated: terminated by signal 15 (SIGTERM)"
PEER_GONE = "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:37028: Connection reset by peer"


def test_a_rank_killed_from_outside_is_a_crash_not_a_hang(run):
    """`kill -TERM` on rank 1 mid-step: the others launch a collective it never joins, so it looks absent as a
    hung rank does; but it was ended by a signal while nobody had timed out, and the launchers signal ranks
    only after a failure or timeout: it was killed from outside the job. summary.json's ended_first, where
    the launcher wrote one, must agree."""
    rewrite(run, 1, lambda r: None if r["kind"] == "collective" and r["seq"] >= 7 else r)
    for r in range(4):
        put(run, r, "status.json", {"status": "failed", "error": SIGTERM if r == 1 else PEER_GONE, "last_step": 1})
    s = json.loads((run / "summary.json").read_text())

    def ended_first(rank):
        write_json(run / "summary.json", {**s, "status": "failed", "ended_first": {"rank": rank, "how": "signalled",
                                                                                   "error": SIGTERM}})

    ended_first(1)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1])
    assert d.summary.startswith("crash: rank(s) 1 ended by SIGTERM from outside the job while the others ran")
    assert "never did (found by absence)" in d.summary and d.sequence == 7
    # rank 0 killed from outside during a real hang of rank 1: rank 1, torn down after it, stays the hang's
    ended_first(0)
    assert (diagnose_path(str(run)).verdict, diagnose_path(str(run)).culprit_ranks) == ("hang", [1])
    # no launcher summary (a script's own torchrun job): the statuses alone
    os.remove(run / "summary.json")
    assert diagnose_path(str(run)).verdict == "crash"
    for r in range(4):  # every rank ended by a signal: stopped whole, or one killed and the rest torn down?
        put(run, r, "status.json", {"status": "failed", "error": SIGTERM.replace("15 (SIGTERM)", "1 (SIGHUP)"),
                                    "last_step": 1})
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and "every rank was ended by a signal (SIGHUP)" in d.summary
    # the same absence where a rank timed out waiting, or commscope run itself killed rank 1: a hang
    ended_first(1)
    put(run, 0, "status.json", {"status": "failed", "error": "RuntimeError: [gloo] Application timeout caused "
                                "pair closure", "last_step": 1})
    for r in (2, 3):
        put(run, r, "status.json", {"status": "failed", "error": PEER_GONE, "last_step": 1})
    put(run, 1, "status.json", {"status": "failed", "error": SIGTERM, "last_step": 1})
    assert diagnose_path(str(run)).verdict == "hang"
    put(run, 0, "status.json", {"status": "failed", "error": PEER_GONE, "last_step": 1})
    put(run, 1, "status.json", {"status": "failed", "error": "terminated by signal 9 (SIGKILL) by commscope run",
                                "last_step": 1})
    assert diagnose_path(str(run)).verdict == "hang"


def test_the_rank_the_launcher_saw_end_first_by_a_signal_is_the_crash(run):
    """4 ranks, rank 1 killed by SIGTERM from outside while no collective was half-launched: every record is
    complete, ranks 0 and 2 lost their peer and 3 was stopped by torchrun after it. Only when each ended
    tells them apart: summary.json's `ended_first`, the launcher's reading of the status files' times."""
    for r in range(4):
        put(run, r, "status.json", {"status": "failed", "error": SIGTERM if r in (1, 3) else PEER_GONE,
                                    "last_step": 2})
    assert diagnose_path(str(run)).verdict == "insufficient"  # no evidence of who came first
    s = json.loads((run / "summary.json").read_text())
    write_json(run / "summary.json", {**s, "status": "failed", "ended_first": {"rank": 1, "how": "signalled",
                                                                               "error": SIGTERM}})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [1], 2)
    assert d.summary.startswith("crash: rank 1 ended first, by SIGTERM from outside the job")
    assert "rank(s) 0,2-3 failed after it" in d.summary
    assert [e["rank"] for e in d.evidence] == [1, 0, 2, 3]
    write_json(run / "summary.json", {**s, "ended_first": {"rank": 0, "how": "peer-gone", "error": PEER_GONE}})
    assert diagnose_path(str(run)).verdict == "insufficient"  # a lost peer is no cause of its own


@pytest.mark.parametrize("where", ["status", "summary", "launcher.log", "launcher.node1.log", "free space"])
def test_a_run_directory_that_filled_up_is_judged_on_nothing(run, where, monkeypatch):
    """A full disk: rank 0's writes failed (its status says so, or only the launcher's summary does) and rank
    1's status.json did not fit. A missing status there is no crash, and records cut by the disk no hang."""
    rewrite(run, 1, lambda r: None if r["step"] == 2 else r)
    os.remove(run / "rank1" / "status.json")
    full = "OSError: [Errno 28] No space left on device"
    if where == "status":
        put(run, 0, "status.json", {"status": "failed", "error": full, "last_step": 1})
    elif where == "free space":  # not even launcher.log's line fit: no summary.json, on a full disk now
        import shutil as sh
        from types import SimpleNamespace

        os.remove(run / "rank0" / "status.json")
        os.remove(run / "summary.json")
        monkeypatch.setattr(sh, "disk_usage", lambda p: SimpleNamespace(total=10 << 30, used=10 << 30, free=4096))
    elif where.startswith("launcher"):  # no status or summary fit: the ranks' output is the only sign
        os.remove(run / "rank0" / "status.json")
        (run / "launcher.log").write_text("[default0]:step 2\n" * 5000 + "[default0]:done\n")
        if where == "launcher.log":
            (run / "launcher.log").write_text("[default0]:step 2\n" * 5000 + f"[default1]:{full}\n[default0]:done\n")
        else:  # several nodes: the line is in the log of the node that ran rank 1
            (run / where).write_text(f"[default0]:{full}\n")
    else:
        s = json.loads((run / "summary.json").read_text())
        write_json(run / "summary.json", {**s, "status": "failed", "exit_code": 2, "message":
                                          f"failed: {run}: no space left on device (a rank could not write), after 2/3 steps"})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    assert d.summary.startswith("insufficient: the run directory could not be written (")
    assert {"status": f"(rank 0: {full})", "launcher.log": f"(launcher.log: [default1]:{full})",
            "launcher.node1.log": f"(launcher.node1.log: [default0]:{full})",
            "summary": "no space left on device (a rank could not write)",
            "free space": "(no summary.json, and the filesystem holding it has 4,096 bytes free now)"}[where] in d.summary


@pytest.mark.parametrize("own", ["json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 9",
                                 "KeyError: 'sender'", "ValueError: bad timeout_s", "ValueError: bad timeout 3",
                                 "AssertionError: peer count 3 != 4"])
def test_a_rank_failing_on_its_own_is_a_crash_whatever_words_its_error_holds(run, own):
    """A consequence is matched as whole words and never in an error of a type a rank's own code raises."""
    put(run, 2, "status.json", {"status": "failed", "error": own, "last_step": 2})
    put(run, 0, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [2])


@pytest.mark.parametrize("error, consequence, timed_out", [
    ("Terminated: terminated by signal 15 (SIGTERM)", True, False),
    ("hang watchdog: waited 10.0 s (> 10 s) on all_reduce", True, True),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5", True, False),
    ("RuntimeError: [gloo] Application timeout caused pair closure", True, True),
    ("torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
     True, True),
    ("RuntimeError: Timed out waiting 1800000ms for recv operation to complete", True, True),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", True, False),
    ("KeyboardInterrupt: ", True, False),
    ("RuntimeError: CUDA out of memory", False, False),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", False, False),
    ("json.decoder.JSONDecodeError: Unterminated string", False, False),
    ("ValueError: bad timeout", False, False),
])
def test_which_errors_are_a_peers_doing(error, consequence, timed_out):
    assert (doctor_status.is_consequence(error), doctor_status.timed_out(error)) == (consequence, timed_out)


def test_a_rank_killed_after_sigstop_hung_the_job_and_gloo_timeouts_are_victims(run):
    put(run, 1, "status.json", {"status": "failed", "last_step": 1, "error": (
        "hung: stopped (SIGSTOP) for 6.1 s and never resumed (--hang-timeout 6 s); terminated by signal 9 "
        "(SIGKILL) by commscope run")})
    for r in (0, 2, 3):
        put(run, r, "status.json", {"status": "failed", "last_step": 1,
                                    "error": "RuntimeError: [gloo] Application timeout caused pair closure"})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [1]) and "SIGSTOP" in d.summary
    put(run, 1, "status.json", {"status": "completed", "error": None, "last_step": 2})
    assert diagnose_path(str(run)).verdict != "crash"  # the others' gloo timeouts name no culprit


def test_a_completed_rank_without_readable_events_is_insufficient_not_a_hang(run):
    os.remove(run / "rank2" / "events.jsonl")
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and "2" in d.summary and d.culprit_ranks == []


def test_a_hang_says_which_later_collective_the_waiting_ranks_were_blocked_on(run):
    """The run's reports name the collective the watchdog found each rank waiting on (seq 10); the verdict
    names the first one rank 2 never launched (seq 9), and ties the two: 10 is queued behind 9."""
    for r in (0, 1, 3):
        rows = [inflight(r, 9, "attn", wait=False), inflight(r, 10, "mlp")]
        put(run, r, "watchdog.json", {**watchdog(r, rows), "waiting_on": rows[1]})
        put(run, r, "status.json", {"status": "failed", "error": "hang watchdog: waited", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.sequence) == ("hang", [2], 9)
    assert d.summary.endswith("; their watchdogs found rank(s) 0-1,3 waiting on reduce_scatter 'mlp' (group 0, "
                              "seq 10), queued behind seq 9.")


def test_hang_finds_the_rank_that_never_launched(run):
    # seq 9 (step 3 attn) launched by 0, 1, 3 (their watchdogs fired); rank 2 stopped at seq 8
    for r in (0, 1, 3):
        put(run, r, "watchdog.json", watchdog(r, [inflight(r, 9, "attn"), inflight(r, 10, "mlp", wait=False)]))
        put(run, r, "status.json", {"status": "failed", "error": "hang watchdog: waited", "last_step": 2})
    put(run, 2, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence, d.group) == ("hang", [2], "attn", 3, 9, "0")
    missing = [e for e in d.evidence if not e["launched"]]
    assert missing == [{"rank": 2, "launched": False, "last_launched_seq": 8, "last_launched_label": "scalars",
                        "last_launch_ns": missing[0]["last_launch_ns"], "status": "failed",
                        "error": "Terminated: terminated by signal 15 (SIGTERM)"}]
    # the waiting ranks were blocked on seq 9 itself: nothing more to say
    assert "waiting on" not in d.summary
    # an inflight.json of the torn-down rank moves the point of divergence: it did launch 9, not 10
    put(run, 2, "inflight.json", {"schema_version": 1, "rank": 2, "inflight": [inflight(2, 9, "attn", wait=False)]})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.sequence) == ("hang", [2], "mlp", 10)
    # the watchdogs found the ranks waiting on seq 9 (launched before 10, waited on first): the verdict ties
    # the collective never launched (10) to the one the run's reports name (9), not queued behind it
    assert d.summary.endswith("; their watchdogs found rank(s) 0-1,3 waiting on reduce_scatter 'attn' "
                              "(group 0, seq 9).")


def test_desync_names_the_minority(run):
    for r in range(4):
        op = "broadcast" if r == 1 else "reduce_scatter"
        put(run, r, "watchdog.json", watchdog(r, [inflight(r, 9, "attn", op=op)]))
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence) == ("desync", [1], "attn", 3, 9)
    assert "broadcast" in d.summary and "reduce_scatter" in d.summary


def test_a_desync_with_as_many_on_each_side_names_no_culprit(run):
    """Two ranks against two: no majority says which side launched the wrong collective."""
    for r in range(4):
        op = "broadcast" if r in (1, 3) else "reduce_scatter"
        put(run, r, "watchdog.json", watchdog(r, [inflight(r, 9, "attn", op=op)]))
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.sequence) == ("desync", [], 9)
    assert d.summary == ("desync: at group 0 seq 9 ('attn', step 3) rank(s) 0,2 launched reduce_scatter of "
                         "8,000,000 bytes (7.6 MiB) and rank(s) 1,3 launched broadcast of 8,000,000 bytes (7.6 MiB): as "
                         "many on each side, so no majority says which side is wrong (no culprit named).")


def test_a_collective_launched_under_another_label_is_a_desync(run):
    """Rank 1 swaps two same-sized reductions in step 1: at one (group, seq) it reduces 'mlp' where the
    others reduce 'attn'. Op, bytes and dtype agree; the labels the callers passed do not, and the ranks
    mix two gradients without an error from the backend."""
    first = next(e for e in events(run, 0) if e["kind"] == "collective" and e["step"] == 1)
    other = next(e["label"] for e in events(run, 0) if e["kind"] == "collective" and e["label"] != first["label"])
    rewrite(run, 1, lambda e: {**e, "label": other} if e["kind"] == "collective" and e["seq"] == first["seq"]
            and e["group"] == first["group"] else e)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence) == ("desync", [1], first["label"], 1,
                                                                          first["seq"])
    said = f"{first['op']} of {first['bytes']:,} bytes ({first['bytes'] / 2 ** 20:.1f} MiB)"
    assert d.summary.endswith(f"rank(s) 1 launched {said} labelled '{other}' while the others launched it "
                              f"labelled '{first['label']}'; the same op and size under another label, so the "
                              "ranks combine different tensors with nothing to stop them.")
    assert sorted(r["label"] for r in d.evidence) == sorted([first["label"]] * 3 + [other])


def fr_entry(seq, name="nccl:all_reduce", state="completed", n=1024):
    return {"record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": name, "time_created_ns": 10 * seq,
            "input_sizes": [[n]], "input_dtypes": ["Float"], "output_sizes": [[n]], "state": state,
            "is_p2p": False}


def test_flight_recorder_dumps_are_a_second_source(run):
    fr = run / "flight_recorder"
    fr.mkdir()
    for r in range(4):
        entries = [fr_entry(s) for s in range(1, 5)] + ([] if r == 2 else [fr_entry(5, state="started")])
        doc = {"version": "2.4", "pg_config": {}, "entries": entries}
        (fr / f"rank_{r}").write_bytes(pickle.dumps(doc) if r % 2 else json.dumps(doc).encode())
    d = diagnose_path(str(run))
    # the recorder's data is healthy here; the Flight Recorder alone sees rank 2 missing seq 5
    assert d.verdict == "hang" and d.culprit_ranks == [2] and d.sequence == 5 and d.sources == ["flight_recorder"]


def test_flight_recorder_pickles_cannot_run_code(tmp_path):
    p = tmp_path / "rank_0"
    p.write_bytes(pickle.dumps({"entries": [os.getcwd]}))  # a global: refused, never imported or called
    with pytest.raises(UserError, match="not a Flight Recorder dump"):
        read_flight_recorder(str(p))
    p.write_bytes(b"\x80\x04garbage")
    with pytest.raises(UserError):
        read_flight_recorder(str(p))


def test_doctor_cli_json(run):
    os.remove(run / "rank0" / "status.json")
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {k: doc[k] for k in ("verdict", "culprit_ranks", "step")} == {"verdict": "crash", "culprit_ranks": [0],
                                                                         "step": 2}
    assert {"label", "sequence", "evidence"} <= set(doc)


def test_doctor_cli_json_straggler_evidence(run):
    shift(run, 2, {4}, "start_ns", 200_000)
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["verdict"], doc["culprit_ranks"], doc["label"], doc["step"], doc["confidence"]) == (
        "straggler", [2], "mlp", 1, "medium")
    assert doc["evidence"][0]["mean_wait_ms"] == pytest.approx(0.2)
    assert doc["evidence"][0]["pct_of_median_step"] == pytest.approx(20.0)
    assert doc["details"]["labels"] == ["mlp"] and doc["details"]["instances"][0]["sequence"] == 4
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), "--straggler-ms", "1",
                        "--straggler-pct", "5"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "not both" in p.stderr and "Traceback" not in p.stderr


def test_flight_recorder_torchscript_int_lists_load_without_torch(tmp_path):
    # TorchScript's pickler writes int lists as torch.jit._pickle.build_intlist([...]): allowed, rebuilt as a list
    blob = (b"\x80\x02}q\x00X\x07\x00\x00\x00entriesq\x01]q\x02}q\x03X\x0b\x00\x00\x00input_sizesq\x04"
            b"ctorch.jit._pickle\nbuild_intlist\nq\x05]q\x06(K\x02K\x03e\x85q\x07Rq\x08sas.")
    p = tmp_path / "rank_0"
    p.write_bytes(blob)
    assert read_flight_recorder(str(p)) == {"entries": [{"input_sizes": [2, 3]}]}


def test_backend_timeout_without_records_is_a_hang_without_culprit(run):
    for r in range(4):
        put(run, r, "status.json", {"status": "failed", "error": "RuntimeError: [gloo] Timed out waiting 6000ms "
                                    "for recv operation to complete", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", []) and "which rank caused it" in d.summary
    assert [e["rank"] for e in d.evidence] == [0, 1, 2, 3]
    # advice to record launches only where they were not recorded
    cfg = json.loads((run / "config.json").read_text())
    write_json(run / "config.json", {**cfg, "args": {"trace": "off"}})
    assert "--trace light" in diagnose_path(str(run)).summary


@pytest.mark.parametrize("own", ["RuntimeError: DataLoader timed out after 30 seconds",
                                 "TimeoutError: timed out uploading checkpoint shard to s3",
                                 "ConnectionError: could not reach the checkpoint server"])
def test_a_ranks_own_error_with_timeout_or_connection_words_is_its_own_fault(run, own):
    """A user's script raises its own timeout or connection errors: without the distributed machinery in
    them (the backend, Dist*Error, a peer's connection, a signal, the hang watchdog) they are the rank's own
    fault, a crash, not a victim's report of a hang; the peers' backend errors stay consequences."""
    put(run, 1, "status.json", {"status": "failed", "error": own, "last_step": 2})
    for r in (0, 2, 3):
        put(run, r, "status.json", {"status": "failed", "last_step": 2, "error":
                                    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
                                    "closed by peer [127.0.0.1]:29500"})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1]), d.summary
    for r in (0, 2, 3):  # and alone, the others completed: still its own failure
        put(run, r, "status.json", {"status": "completed", "error": None, "last_step": 2})
    assert (diagnose_path(str(run)).verdict, diagnose_path(str(run)).culprit_ranks) == ("crash", [1])


def test_failure_without_evidence_is_insufficient(run):
    put(run, 1, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", []) and "failed" not in VERDICTS


def test_a_user_interrupt_is_interrupted_not_a_crash(run):
    # Ctrl-C: the launcher writes status "interrupted"; one rank was killed before writing its status,
    # the others got the SIGINT (the trainer's status, in the recording API's words)
    os.remove(run / "rank3" / "status.json")
    for r in (0, 1, 2):
        put(run, r, "status.json", {"status": "interrupted", "error": "KeyboardInterrupt", "last_step": 2})
    s = json.loads((run / "summary.json").read_text())
    write_json(run / "summary.json", {**s, "status": "interrupted", "exit_code": 130,
                                      "message": "interrupted by the user after 3/10 steps"})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("interrupted", [], 2)
    assert "interrupted by the user after 3/10 steps" in d.summary
    assert [(e["rank"], e["last_finished_step"]) for e in d.evidence] == [(0, 2), (1, 2), (2, 2), (3, 2)]


def test_partial_trace_sets_are_insufficient_never_ok(tmp_path):
    d = diagnose_path(str(DATA / "hta-testdata" / "trace_filter"))  # 2 of 128 ranks
    assert (d.verdict, d.culprit_ranks) == ("insufficient", []) and d.details["missing_ranks"] == list(range(2, 128))
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(DATA / "modded-nanogpt-8xh100" / "rank1.json.gz", one)
    d = diagnose_path(str(one))
    assert d.verdict == "insufficient" and d.details["missing_ranks"] == [0, 2, 3, 4, 5, 6, 7]
    assert "1 of the job's 8 ranks" in d.summary


def test_names_rank_1_of_the_8xh100_traces_as_the_report_table_does():
    from commscope.analyze.summary import summarize
    from commscope.load import load_path

    trace = load_path(str(DATA / "modded-nanogpt-8xh100"))
    d = doctor.diagnose(trace)
    assert (d.verdict, d.culprit_ranks, d.step) == ("straggler", [1], 11)
    assert d.details["threshold"]["arrivals"] == "device" and d.details["judged_steps"] == [10, 11]
    # the others waited for rank 1's NCCL kernels in step 11: 88.9 ms in all, 12.7 ms per waiting rank
    [ev] = d.evidence
    assert (ev["rank"], ev["step"], ev["instances"]) == (1, 11, 6)
    assert ev["waiting_caused_ms"] == pytest.approx(88.898, abs=1e-3)
    assert ev["mean_wait_ms"] == pytest.approx(88.898 / 7, abs=1e-3)
    assert ev["pct_of_median_step"] == pytest.approx(100 * 88.898 / 7 / d.details["median_step_ms"])
    assert (d.label, d.sequence) == ("_reduce_scatter_base", 8)
    assert [i["sequence"] for i in d.details["instances"]] == [8, 26, 27, 25, 9, 10]
    assert sum(i["waiting_caused_ms"] for i in d.details["instances"]) == pytest.approx(88.898, abs=1e-3)
    # the longest wait is on the reduce-scatter, but most of the waiting is on the all-gathers: both are said
    by_label = d.details["waiting_by_label_ms"]
    assert list(by_label) == ["_allgather_base", "_reduce_scatter_base"]
    assert by_label["_allgather_base"] == pytest.approx(52.62, abs=0.01)
    assert by_label["_reduce_scatter_base"] == pytest.approx(36.28, abs=0.01)
    assert sum(by_label.values()) == pytest.approx(88.898, abs=1e-3)
    text = " ".join(d.summary.split())
    assert ("88.9 ms of waiting in all, most at '_allgather_base' (52.6 ms), then '_reduce_scatter_base' "
            "(36.3 ms); the longest at '_reduce_scatter_base' (step 11, seq 8, 5.0 ms per waiting rank)") in text
    # the report's straggler table: the same rank first, the same waiting
    table = summarize(trace, with_hta=False)["stragglers"]
    assert table[0]["rank"] == 1 and table[0]["wait_caused_ms"] == pytest.approx(ev["waiting_caused_ms"], abs=1e-3)
    # rank 0 made the others wait in step 10 too, less than half as much: over the bar, not named
    assert list(d.details["also_late"]) == ["0"]
    # launch times would have blamed others: the host launched seq 8 last on rank 2
    assert d.details["instances"][0]["launched_last_rank"] == 2


def test_kineto_profile_windows_are_not_read_as_hangs(tmp_path):
    from commscope.analyze.doctor import diagnose
    from report_trace import make_trace

    t = make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="kineto")
    t.collectives = t.collectives[~((t.collectives["rank"] == 2) & (t.collectives["seq"] == 8))]  # window cut
    assert diagnose(t).verdict == "ok"


def test_report_shows_the_verdict_first(run, tmp_path, capsys, monkeypatch):
    from commscope import cli

    os.remove(run / "rank3" / "status.json")
    out = tmp_path / "r.html"
    monkeypatch.setattr(sys, "argv", ["commscope", "report", str(run), "-o", str(out), "--no-hta"])
    with pytest.raises(SystemExit) as e:  # typer's standalone mode exits 0 after the command
        cli.main()
    assert e.value.code == 0
    page = out.read_text()
    assert page.index("CRASH") < page.index('<section id="heatmap"')  # in the summary, the first section
    assert "rank(s) 3 left no status.json" in page
    assert capsys.readouterr().out.lstrip().startswith("doctor: crash: rank(s) 3")


def test_the_loader_returns_fault_evidence_as_frames_and_never_fails_on_it(run):
    from commscope.load import load_path

    put(run, 1, "watchdog.json", watchdog(1, [inflight(1, 9, "attn"), {"no": "seq"}]))
    put(run, 2, "inflight.json", {"schema_version": 1, "rank": 2, "inflight": [inflight(2, 9, "attn", wait=False)]})
    trace = load_path(str(run))
    f = trace.faults
    assert trace.select_steps((0, 1)).faults is f  # evidence is about the run, not a step
    assert f.error is None and f.ranks("watchdog") == [1] and f.ranks("inflight") == [2]
    assert list(zip(f.inflight["rank"], f.inflight["seq"], f.inflight["source"])) == [
        (1, 9, "watchdog.json"), (2, 9, "inflight.json")]
    assert not f.inflight["finished"].any() and f.reports.loc[f.reports["kind"] == "watchdog", "fired_ns"].tolist() == [1]
    assert len(f.flight_recorder) == 0
    (run / "flight_recorder").mkdir()
    (run / "flight_recorder" / "rank_0").write_bytes(b"\x80\x04\x95garbage")
    f = load_path(str(run)).faults  # loading still works; the evidence says why it is missing
    assert "rank_0" in f.error and len(f.reports) == len(f.inflight) == 0
    with pytest.raises(UserError, match="rank_0"):
        diagnose_path(str(run))


def test_a_silent_rank_the_others_timed_out_waiting_for_hung_and_did_not_crash(run):
    # a user script under torchrun: rank 2 stalled before seq 9; the others launched it and gave up waiting
    # (a backend timeout), then the launcher killed rank 2, stuck in C++, before it wrote a status
    os.remove(run / "rank2" / "status.json")
    for r in (0, 1, 3):
        put(run, r, "inflight.json", {"schema_version": 1, "rank": r, "inflight": [inflight(r, 9, "attn")]})
        put(run, r, "status.json", {"status": "failed", "last_step": 2, "error": (
            "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv")})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.sequence) == ("hang", [2], "attn", 9)
    # the same silence with a peer that saw the connection close is a crash: the rank died first
    put(run, 1, "status.json", {"status": "failed", "last_step": 2,
                                "error": "DistBackendError: Connection closed by peer"})
    assert (diagnose_path(str(run)).verdict, diagnose_path(str(run)).culprit_ranks) == ("crash", [2])


def test_a_desync_the_backend_aborted_a_rank_on_is_a_desync_not_a_crash(run):
    for r in range(4):
        op = "broadcast" if r == 1 else "reduce_scatter"
        put(run, r, "inflight.json", {"schema_version": 1, "rank": r, "inflight": [inflight(r, 9, "attn", op=op)]})
    os.remove(run / "rank0" / "status.json")  # gloo aborted it (SIGABRT) on the mismatch
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.sequence) == ("desync", [1], 9)


def test_a_script_that_never_closed_its_recorder_exited_without_a_fault(run):
    for r in range(4):
        put(run, r, "status.json", {"status": "exited", "error": "process exited without Recorder.close()",
                                    "last_step": 2})
    d = diagnose_path(str(run))
    assert d.verdict == "ok" and d.culprit_ranks == []
    assert "ranks 0-3: exited: process exited without Recorder.close()" in d.run_reports and d.problems == []


@pytest.mark.parametrize("status", [
    {"status": "interrupted", "error": "KeyboardInterrupt"},  # commscope.record's and the trainer's words
    {"status": "failed", "error": "KeyboardInterrupt: "},  # a script that writes its own status
])
def test_a_keyboard_interrupt_without_a_launcher_summary_is_interrupted(run, status):
    os.remove(run / "summary.json")  # a script run by torchrun itself: no commscope launcher
    for r in range(4):
        put(run, r, "status.json", {**status, "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("interrupted", [])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from([1.0, 2.0, np.nan]),
                          st.sampled_from(["x", "y"])), max_size=30))
def test_tuple_codes_number_tuples_as_factorizing_them_does(rows):
    """doctor._tuple_codes gives equal tuples equal codes, in order of first appearance, missing values
    equal to each other: what pd.factorize of the tuples (a MultiIndex) gives."""
    cols = [np.array([r[i] for r in rows], dtype=object if i != 1 else np.float64) for i in range(3)]
    got = doctor._tuple_codes(*cols)
    want = pd.factorize(pd.MultiIndex.from_arrays(cols))[0] if rows else np.zeros(0, dtype=np.int64)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("template, source", [("cpurun-hooks-gloo2", "events"), ("modded-nanogpt-8xh100", "trace")])
def test_desync_evidence_names_where_each_launch_was_read(tmp_path, template, source):
    """A desync's evidence rows say where each launch comes from: a run directory's records ("events"), a
    profiler trace ("trace"), as the verdict's `sources` does."""
    from scale_jobs import gen_job

    truth = gen_job.generate(TESTS / "data" / template, tmp_path / "j", 4, steps=4, desync=1)
    d = diagnose_path(truth["job"])
    assert (d.verdict, d.culprit_ranks, d.sequence) == ("desync", [1], truth["desync"]["seq"])
    assert {e["source"] for e in d.evidence} == {source} and len(d.evidence) == 4


def test_a_steady_lag_under_the_bar_is_found_by_steady_under_bar():
    """On host-timed arrivals the bar is a whole median step, and a rank slow in every step lengthens that
    median: its waiting (125 ms in a 186 ms median step) stays under the bar however steady. From half the
    bar in three quarters of the judged steps it is strong (confidence high), from 30 % a steady lag;
    a lag in a few steps only, or a smaller one, is not steady."""
    per = pd.DataFrame({"step": list(range(1, 10)), "rank": [1] * 9, "lost_ns": [125e6] * 8 + [20e6]})
    per["pct"] = 100 * per["lost_ns"] / 186e6
    y = doctor_straggler._Yardstick(186e6, list(range(10)), " of steps 0-9", 186e6,
                                    {"kind": "relative", "ms": 186.0}, list(range(1, 10)))
    steady = doctor_straggler._steady_under_bar(per, y)
    assert steady == {"rank": 1, "steps": list(range(1, 9)), "judged": 9,
                      "mean_pct_of_median_step": pytest.approx(100 * 125 / 186),
                      "bar_multiple": pytest.approx(125 / 186), "strong": True}
    assert doctor_straggler._steady_under_bar(per.iloc[:6].assign(lost_ns=[125e6] * 3 + [20e6] * 3), y) is None
    weak = doctor_straggler._steady_under_bar(per.assign(lost_ns=80e6), y)  # 0.43x the bar: under half of it
    assert (weak["steps"], weak["strong"], weak["bar_multiple"]) == (list(range(1, 10)), False, pytest.approx(80 / 186))
    assert doctor_straggler._steady_under_bar(per.assign(lost_ns=50e6), y) is None  # under 30 % of the bar
    # the steadiest rank is measured by its least waiting in 7 of the 9 steps (three quarters, rounded up):
    # rank 2 caused 100 ms in 6 steps only, rank 1's 7th largest is its 125 ms
    two = pd.DataFrame({"step": list(range(1, 7)), "rank": [2] * 6, "lost_ns": [180e6] * 6, "pct": 0.0})
    assert doctor_straggler.steadiest(pd.concat([per, two]), y) == {"rank": 1, "bar_multiple": pytest.approx(125 / 186)}


def _late_in_every_step(tmp_path, late_ms: float, name: str, step_ms: float = 100, more: dict | None = None):
    """A CPU run of `step_ms` steps 0-5 whose rank 3 launches the last two collectives of each of steps 1-5
    `late_ms` late (`more`: step → ms later still in that step)."""
    path = cpu_run(tmp_path, steps=tuple(range(6)), step_ms=step_ms, name=name)
    last_two = {}
    for e in events(path, 3):
        if e["kind"] == "collective" and e["step"] >= 1:
            last_two.setdefault(e["step"], []).append(e["seq"])
    shift(path, 3, {q for seqs in last_two.values() for q in sorted(seqs)[-2:]}, "call_ns", late_ms * MS)
    for step, ms in (more or {}).items():
        shift(path, 3, set(sorted(last_two[step])[-2:]), "call_ns", ms * MS)
    return path


def test_a_steady_lag_with_one_step_over_the_bar_is_read_as_steady_not_an_episode(tmp_path):
    """70 ms late in each of 5 judged 100 ms steps, and 60 ms more in step 3, over the bar: the one step over
    it alone would be an episode of low confidence, but the lag is in every step: steady, high."""
    d = diagnose_path(str(_late_in_every_step(tmp_path, 70, "late70over", more={3: 60})))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "high"), d.summary
    assert d.details["persistence"]["3"]["steps"] == [1, 2, 3, 4, 5]
    assert "steady: 5 of 5 judged steps at 30 % of the bar or more (at least 75 % in three quarters of them), " \
           "1 of them over it" in d.summary


def test_a_steady_lag_under_the_host_floor_is_a_straggler(tmp_path):
    """20 ms steps whose rank 3 is 25 ms late in each: under the 50 ms floor of host-timed arrivals in every
    step (no single step of this length can reach it), but 40 % of it in all of them: steady, medium. 8 ms
    late (under 30 % of the floor) is ok, with how close it came."""
    d = diagnose_path(str(_late_in_every_step(tmp_path, 25, "floor25", step_ms=20)))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "medium"), d.summary
    assert "(at least 40 % in three quarters of them), though none reaches it" in d.summary
    assert d.details["threshold"]["set_by"] == "host scheduling floor"
    assert "as the floor is above what one step of this length can show" in d.summary
    d = diagnose_path(str(_late_in_every_step(tmp_path, 8, "floor8", step_ms=20)))
    assert d.verdict == "ok" and d.details["steadiest"]["rank"] == 3 and d.details["steadiest"]["bar_multiple"] < 0.3


def test_a_rank_late_in_every_step_under_the_bar_is_a_straggler(tmp_path):
    """70 ms late in each of 5 judged steps of 100 ms: under the 100 % bar of host-timed arrivals in every
    step, but at least half of it in all of them: a steady lag, a straggler of high confidence. 40 ms (at
    least 30 % of the bar) is one of medium confidence; 10 ms is ok, and so is the steady lag under a
    bar the user set."""
    d = diagnose_path(str(_late_in_every_step(tmp_path, 70, "late70")))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "high"), d.summary
    assert d.details["steady_under_bar"]["steps"] == [1, 2, 3, 4, 5]
    assert d.details["persistence"]["3"]["confidence"] == "high"
    assert all(50 <= e["pct_of_median_step"] < 100 for e in d.evidence)
    assert "Confidence high (steady: 5 of 5 judged steps at 30 % of the bar or more (at least 75 % in three " \
           "quarters of them), though none reaches it" in d.summary
    d = diagnose_path(str(_late_in_every_step(tmp_path, 40, "late40")))
    assert (d.verdict, d.culprit_ranks, d.confidence) == ("straggler", [3], "medium"), d.summary
    assert d.details["steady_under_bar"]["strong"] is False and d.details["steady_under_bar"]["steps"] == [1, 2, 3, 4, 5]
    d = diagnose_path(str(_late_in_every_step(tmp_path, 10, "late10")))
    assert d.verdict == "ok" and "steady_under_bar" not in d.details, d.summary
    # the ok verdict says how far the steadiest rank stayed from a steady lag
    assert d.details["steadiest"] == {"rank": 3, "bar_multiple": pytest.approx(0.17, abs=0.005)}
    d = diagnose_path(str(_late_in_every_step(tmp_path, 70, "late70pct")), straggler_pct=100)
    assert d.verdict == "ok", d.summary
    # a bar the clocks' alignment error sets (3 × 40 ms): a constant offset between clocks looks late in every
    # step, so no steady lag is read under it
    path = _late_in_every_step(tmp_path, 70, "late70clock")
    for r in range(4):
        meta = json.loads((path / f"rank{r}" / "meta.json").read_text())
        put(path, r, "meta.json", {**meta, "clock": {"offset_ns": 0, "error_ns": 40 * MS, "method": "allreduce",
                                                     "rounds": 8}})
    d = diagnose_path(str(path))
    assert (d.verdict, d.details["threshold"]["set_by"]) == ("ok", "clock-alignment error"), d.summary




def test_a_rank_whose_trace_holds_no_step_leaves_no_step_to_judge(tmp_path):
    """Rank 1's trace holds no ProfilerStep (another job's trace put in the folder, or one recorded without a
    schedule): its collectives belong to no known step, so no step is recorded by every rank and none is
    judged (docs/faults.md: a step some ranks did not record counts neither as evidence nor as a judged
    step). The same traces with rank 1's steps are judged."""
    src = TESTS / "data" / "gloo2-stack"
    doc = json.loads((src / "rank1.json").read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    (tmp_path / "mix").mkdir()
    shutil.copy(src / "rank0.json", tmp_path / "mix" / "rank0.json")
    (tmp_path / "mix" / "rank1.json").write_text(json.dumps(doc))
    d = diagnose_path(str(tmp_path / "mix"))
    assert d.verdict == "insufficient", d.summary
    assert d.summary.endswith("no step left to judge (excluded: steps 2-3, which rank 1 did not record).")
    assert diagnose_path(str(src)).details["judged_steps"] == [2, 3]
