"""Numbers a fresh reader checked against the inputs: bus bandwidth where the group size is unknown or 1,
exposed time where a collective's end is unknown, exposed time capped at the collective's completion,
host time at step boundaries without the profiler's own, and the doctor's median-step wording."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from commscope.analyze import doctor, exposure, step_gaps, timeline
from commscope.analyze.summary import summarize
from commscope.load import kineto_comms, load_path
from paths import TESTS
from reports.doctor_section import render_doctor
from reports.doctor_terminal import print_doctor_verdict
from rundirs import write_run

DATA = TESTS / "data"
MS = 1_000_000
T0 = 10**18


# ---- 1. busbw: the group size from pg_config; unknown or 1 is null, never 0 -------------------------------
def test_gloo_trace_takes_the_group_size_all_pg_config_groups_share():
    """gloo's c10d ops name no process group; both of gloo2's groups have pg_size 2."""
    trace = load_path(str(DATA / "gloo2"))
    assert set(trace.collectives["group_size"]) == {2}
    labels = summarize(trace, with_hta=False)["labels"]
    # nccl-tests factors at n = 2: reduce_scatter and all_gather (n−1)/n = 0.5, all_reduce 2(n−1)/n = 1
    assert (labels["grad"]["algbw_gbps"], labels["grad"]["busbw_gbps"]) == (0.009831, 0.004915)
    assert (labels["w"]["algbw_gbps"], labels["w"]["busbw_gbps"]) == (0.02557, 0.02557)
    assert (labels["_allgather_base"]["algbw_gbps"], labels["_allgather_base"]["busbw_gbps"]) == (0.003409, 0.001705)


def test_gloo_group_size_is_unknown_where_the_groups_differ(tmp_path):
    for f in ("rank0.json", "rank1.json"):
        doc = json.loads((DATA / "gloo2" / f).read_text())
        doc["distributedInfo"]["pg_config"][1]["pg_size"] = 1  # a group of one beside the default group of 2
        (tmp_path / f).write_text(json.dumps(doc))
    trace = load_path(str(tmp_path))
    assert trace.collectives["group_size"].isna().all()
    for v in summarize(trace, with_hta=False)["labels"].values():
        assert v["busbw_gbps"] is None and v["algbw_gbps"] > 0  # unknown, not 0 GB/s


def test_kineto_group_size_fallbacks():
    pgs = {"0": {"pg_name": "0", "pg_size": 8}, "5": {"pg_name": "5", "pg_size": 4}}
    assert kineto_comms._group_size("5", pgs, {"world_size": 8}) == 4
    assert kineto_comms._group_size("0", {}, {"world_size": 128}) == 128  # the default group: the world
    assert math.isnan(kineto_comms._group_size("7", pgs, {"world_size": 8}))  # a group pg_config lacks
    assert math.isnan(kineto_comms._group_size("0", {}, {"world_size": math.nan}))
    # HTA's trace_filter traces: no pg_config, world size 128, every collective in the default group
    c = load_path(str(DATA / "hta-testdata" / "trace_filter")).collectives
    assert set(c.loc[c["group"].str.startswith("0"), "group_size"]) == {128}


def test_a_group_of_unknown_size_in_a_partial_job_judges_nobody():
    """trace_filter holds 2 of 128 ranks; its all_gathers outside any process group (group stream:203)
    record no size. Counted as complete they gave a straggler and a bandwidth on two ranks of 128 that the
    doctor called insufficient; their members may be among the missing ranks, so they are taken as
    spanning the job, and the report withholds both, saying why."""
    tr = load_path(str(DATA / "hta-testdata" / "trace_filter"))
    c = tr.collectives
    stream = c["group"].astype(str).str.startswith("stream:")
    assert stream.sum() == 4 and set(c.loc[stream, "group_size"]) == {128}
    assert ("4 collective(s) of group(s) stream:203 record no group size; with 2 of the job's 128 ranks in the "
            "input their members may be among the missing ranks, so they are taken as spanning all 128: no arrival "
            "skew, straggler or bandwidth is judged on them") in tr.problems
    doc = summarize(tr, with_hta=False)
    assert doc["stragglers"] is None and doc["stragglers_reason"].startswith("cannot be judged: no collective")
    assert all(v["algbw_gbps"] is None for v in doc["labels"].values())
    assert doc["labels"]["_allgather_base_"]["bandwidth_withheld"].startswith("no collective of the label has every")


def test_busbw_is_null_in_a_group_of_one():
    f = exposure.bus_factors(
        np.array(["all_reduce", "broadcast", "all_reduce", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                  "broadcast", np.nan, None, "all_reduce", "all_reduce"], dtype=object),
        np.array([1, 1, np.nan, 2, 4, 8, 3, 5, 4, 4, 0, 7], dtype=np.float64))
    assert np.isnan(f[:3]).all() and np.isnan(f[10])  # n = 1, unknown n, n = 0: no bus factor
    assert f[3:10].tolist() == [1.0, 0.75, 7 / 8, 2 / 3, 1.0, 1.0, 1.0]  # an unknown op counts as 1, like broadcast
    assert f[11] == 2.0 * 6 / 7  # the same float as nccl-tests' 2(n-1)/n computed in Python
    labels = summarize(load_path(str(DATA / "layout_h200" / "standard")), with_hta=False)["labels"]
    assert labels["mlp"]["algbw_gbps"] == 16.7 and labels["mlp"]["busbw_gbps"] is None
    assert all(v["busbw_gbps"] is None for v in labels.values())


# ---- 2. exposed time of collectives whose end is unknown --------------------------------------------------
def test_unknown_end_is_unknown_exposure_not_zero():
    """HTA's distributed_info_unavailable trace: 6 all_to_all whose kernels are not in the trace."""
    trace = load_path(str(DATA / "hta-testdata" / "distributed_info_unavailable"))
    table = exposure.collective_table(trace)
    assert exposure.exposure_unknown(trace.collectives).tolist() == [True] * 6
    assert table["exposed_ns"].isna().all() and table["queued_ns"].isna().all()
    per = exposure.label_stats(table)
    assert per["exposed_unknown"].tolist() == [6] and per["exposed_ms"].isna().all()
    doc = summarize(trace, with_hta=False)
    a = doc["labels"]["all_to_all"]
    assert (a["exposed_ms"], a["exposed_ms_by_rank"], a["own_exposed_ms"], a["attributed_exposed_ms"]) == \
        (None, {"0": None}, None, None)
    [step] = doc["steps"]
    assert (step["step"], step["compute_ms"], step["exposed_comm_ms"], step["idle_ms"], step["exposed_comm_pct"]) == \
        (1009, 26.444, None, None, None)  # record_param_comms is not compute


def test_a_label_total_counts_the_known_exposed_times_and_says_how_many_are_not():
    table = pd.DataFrame({"rank": [0, 0, 0, 1], "label": ["a", "a", "b", "a"], "op": "all_reduce",
                          "bytes": 8.0, "duration_ns": [2e6, np.nan, np.nan, 3e6],
                          "exposed_ns": [1e6, np.nan, np.nan, 0.0], "hidden_ns": [1e6, np.nan, np.nan, 3e6],
                          "timing": "kernel", "transfer_ns": 2e6, "busbw_gbps": 4e-6})
    per = exposure.label_stats(table).set_index(["rank", "label"])
    assert per.loc[(0, "a"), "exposed_ms"] == 1.0 and per.loc[(0, "a"), "exposed_unknown"] == 1
    assert np.isnan(per.loc[(0, "b"), "exposed_ms"]) and per.loc[(0, "b"), "exposed_unknown"] == 1
    assert per.loc[(1, "a"), "exposed_ms"] == 0.0 and per.loc[(1, "a"), "exposed_unknown"] == 0


# ---- 3. exposed time ends at the collective's completion ---------------------------------------------------
def _coll(call, end, wait, wait_end, timing="wall", start=None, label="loss"):
    return {"kind": "collective", "rank": 0, "step": 0, "label": label, "phase": "allreduce", "op": "all_reduce",
            "bytes": 12, "dtype": "float32", "group": "0", "group_size": 1, "seq": 0,
            "call_ns": T0 + call * MS, "return_ns": T0 + call * MS + 1000, "wait_ns": T0 + wait * MS,
            "wait_end_ns": T0 + wait_end * MS, "start_ns": None if start is None else T0 + start * MS,
            "end_ns": T0 + end * MS, "timing": timing}


def _one_step(tmp_path, coll):
    lines = [{"kind": "region", "rank": 0, "step": 0, "name": "forward", "micro_step": 0, "start_ns": T0,
              "end_ns": T0 + 40 * MS, "timing": "wall"}, coll,
             {"kind": "step", "rank": 0, "step": 0, "loss": 1.0, "start_ns": T0, "end_ns": T0 + 100 * MS}]
    return load_path(str(write_run(tmp_path / "r", {0: lines})))


def test_the_wait_after_completion_is_wake_up_delay_not_exposure(tmp_path):
    """Launched at 50 ms, completed at 60 (the host's completion callback), waited on 55 → 75: blocked
    20 ms, of which 5 before completion."""
    trace = _one_step(tmp_path, _coll(50, 60, 55, 75))
    [row] = exposure.collective_table(trace).itertuples()
    assert (row.duration_ns, row.exposed_ns, row.wake_delay_ns) == (10 * MS, 5 * MS, 15 * MS)
    assert row.exposed_ns <= row.duration_ns
    assert exposure.exposed_spans(trace.collectives, exposure.compute_sets(trace)[0], T0) == [[(55 * MS, 60 * MS)]]
    [br] = timeline.step_breakdown(trace).itertuples()
    # compute 0 → 40 ms; exposed 55 → 60; the wake-up (60 → 75) is idle, not communication, not compute
    assert (br.compute_ns, br.exposed_comm_ns, br.idle_ns) == (40 * MS, 5 * MS, 55 * MS)
    lab = summarize(trace, with_hta=False)["labels"]["loss"]
    assert (lab["exposed_ms"], lab["wake_delay_ms"], lab["mean_ms"]) == (5.0, 15.0, 10.0)


def test_a_wait_that_begins_after_completion_exposes_nothing(tmp_path):
    [row] = exposure.collective_table(_one_step(tmp_path, _coll(50, 60, 70, 72))).itertuples()
    assert (row.exposed_ns, row.wake_delay_ns) == (0.0, 2 * MS)


def test_cuda_event_waits_are_not_capped(tmp_path):
    """On CUDA the end is an event after wait() on the device: no host completion to cap the wait at."""
    [row] = exposure.collective_table(_one_step(tmp_path, _coll(50, 60, 55, 75, "cuda_event", 51))).itertuples()
    assert row.exposed_ns == 20 * MS and np.isnan(row.wake_delay_ns)


def test_recorded_cpu_run_exposure_stays_within_the_duration():
    """tests/data/layout/standard: rank 0's scalars all_reduce of step 1 ran 3.9 ms; its caller was blocked
    17.9 ms, 14.7 of them after completion."""
    t = exposure.collective_table(load_path(str(DATA / "layout" / "standard")))
    wall = t[t["timing"] == "wall"]
    assert (wall["exposed_ns"] <= wall["duration_ns"]).all()
    worst = t.loc[t["wake_delay_ns"].idxmax()]
    assert (worst["rank"], worst["label"]) == (0, "scalars")
    assert (worst["duration_ns"], worst["exposed_ns"], worst["wake_delay_ns"]) == (3921977.0, 3220761.0, 14717138.0)
    assert worst["wait_end_ns"] - worst["wait_ns"] == 3220761 + 14717138


# ---- 4. host time at step boundaries leaves the profiler's steps out --------------------------------------
def test_step_gaps_leave_the_profiler_window_out():
    trace = load_path(str(DATA / "layout" / "standard"))  # --profile 3
    gaps = step_gaps.step_gaps(trace)
    assert gaps.loc[gaps["step"] == 3, "excluded"].tolist() == ["profiler window"] * 2
    assert gaps.loc[gaps["step"] < 3, "excluded"].isna().all()
    s = step_gaps.gap_summary(gaps).set_index("rank")
    assert s.loc[0, "steps"] == 2 and s.loc[0, "excluded_steps"] == 1
    assert s.loc[0, "host_pct"] == pytest.approx(0.6886, abs=1e-4)  # 79.8 with the profiler's start-up
    assert s.loc[0, "gap_max_ms"] == pytest.approx(8.4609, abs=1e-4)
    doc = summarize(trace, with_hta=False)
    assert [b["host_pct"] for b in doc["step_boundaries"]] == [0.69, 1.24]
    # the step's own numbers stay as measured
    assert {(x["rank"], x["step"]): x["start_delay_ms"] for x in doc["steps"]}[(0, 3)] == 11237.3618


def test_step_gaps_leave_the_profiler_export_out():
    trace = load_path(str(DATA / "layout_h200" / "standard"))  # --profile 4:5, each rank exports before step 6
    gaps = step_gaps.step_gaps(trace).set_index("step")
    assert gaps["excluded"].to_dict() == {1: None, 2: None, 3: None, 4: "profiler window", 5: "profiler window",
                                          6: "profiler export", 7: None}
    assert gaps.loc[6, "gap_ns"] / MS == pytest.approx(3036.963, abs=1e-3)
    [s] = step_gaps.gap_summary(gaps.reset_index()).itertuples()
    assert (s.steps, s.excluded_steps) == (4, 3) and s.host_pct == pytest.approx(2.5636, abs=1e-4)


# ---- 5, 6. the doctor's share of the median step, and which steps the median covers ------------------------
def test_doctor_names_the_share_of_the_median_step_and_its_steps():
    trace = load_path(str(DATA / "modded-nanogpt-8xh100"))
    d = doctor.diagnose(trace)
    [ev] = d.evidence
    assert "pct_of_step" not in ev
    assert ev["pct_of_median_step"] == pytest.approx(30.35, abs=5e-3) and ev["step_ms"] == pytest.approx(47.6, abs=0.05)
    assert d.details["median_step_steps"] == [10, 11] and d.details["median_step_ms"] == pytest.approx(41.84, abs=5e-3)
    # two steps, one of them the late one: its delay weighs in the median, and the verdict says so
    assert ("(30.4 % of the 41.8 ms median step of steps 10-11, one of them the late step itself, whose delay "
            "weighs in so short a median)") in d.summary
    console = Console(record=True, width=250)
    print_doctor_verdict(d, console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "waiting caused (ms)" in line and "step time (ms)" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [  # headers in words
        "rank", "step", "collectives", "waiting caused (ms)", "mean wait (ms)", "% of median step", "step time (ms)"]
    page = render_doctor(SimpleNamespace(diagnosis=d, window=None, trace=trace))
    assert '<th data-key="pct_of_median_step">% of median step</th>' in page
    assert "median step (41.8 ms), not of the step time beside it (that step&#x27;s median over the ranks)" in page \
        or "median step (41.8 ms), not of the step time beside it (that step's median over the ranks)" in page
    assert "step time: that step's median over the ranks." in text
    # the link zooms the timeline to the culprit's step (report.js follows #step=N), not only scrolls
    assert f'See it in <a href="#step={ev["step"]}">the timeline</a> (step {ev["step"]})' in page


def test_doctor_median_step_says_which_steps_it_leaves_out():
    d = doctor.diagnose(load_path(str(DATA / "layout" / "standard")))
    assert d.verdict == "ok" and d.details["median_step_steps"] == [0, 1, 2]
    # step 3 is the profiler window; the export step (4) was not recorded, so it is not named
    assert "(100 % of the 830.9 ms median step of steps 0-2, not profiler window step 3)" in d.summary


def test_a_step_whose_device_idles_says_its_time_is_the_devices_busy_span():
    """HTA's triton_example: one 1.8 µs kernel in a 13.3 s ProfilerStep. The step's device window is the
    kernel, so its step time reads 0.002 ms; a note says that is the device's busy span, not the step."""
    doc = summarize(load_path(str(DATA / "hta-testdata" / "triton_example")), with_hta=False)
    assert doc["steps"][0]["step_ms"] < 0.01
    assert ("1 of 1 steps keep the device busy for under 1% of their host range (e.g. rank 0 step 1: 0.002 ms of "
            "kernels in a 13,336.3 ms step)") in " ".join(doc["notes"])
    assert not [n for n in summarize(load_path(str(DATA / "modded-nanogpt-8xh100")), with_hta=False)["notes"]
                if "keep the device busy" in n]
