"""commscope.analyze.left_in_flight: the collectives a hang left in flight, once per (rank, group, seq),
each with its rank's last sign of life (the watchdog's firing, else its latest record); and the Perfetto
export draws exactly the frame it is given."""
from __future__ import annotations

import json

from commscope.analyze.left_in_flight import last_alive_ns, left_in_flight
from commscope.load import load_path
from report_trace import make_trace, write_run_dir
from reports.perfetto import build_perfetto


def _row(rank, seq, label, call_ns):
    return {"kind": "collective", "rank": rank, "step": 2, "label": label, "phase": "reduce", "op": "reduce_scatter",
         "bytes": 1024, "dtype": "float32", "group": "0", "group_size": 2, "seq": seq, "call_ns": call_ns,
         "return_ns": call_ns + 5, "wait_ns": None, "wait_end_ns": None}


def _hung_run(tmp_path):
    """Rank 0's watchdog fired 5 s after its last collective with two in flight (listed in both of its
    reports); rank 1 left one in inflight.json and no watchdog."""
    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1), steps=(0, 1), style="run"), run)
    trace = load_path(str(run))
    last = {r: int(trace.collectives.loc[trace.collectives["rank"] == r, "end_ns"].max()) for r in (0, 1)}
    fired = last[0] + 5_000_000_000
    rows0 = [_row(0, 90, "attn", last[0] + 90_000), _row(0, 91, "mlp", last[0] + 91_000)]
    (run / "rank0" / "watchdog.json").write_text(json.dumps(
        {"schema_version": 1, "rank": 0, "world_size": 2, "timeout_s": 5, "fired_ns": fired,
         "waiting_on": rows0[0], "inflight": rows0, "last_step": 1, "stacks": {}}))
    (run / "rank0" / "inflight.json").write_text(json.dumps({"schema_version": 1, "rank": 0, "inflight": rows0}))
    (run / "rank1" / "inflight.json").write_text(json.dumps(
        {"schema_version": 1, "rank": 1, "inflight": [_row(1, 90, "attn", last[1] + 90_000)]}))
    return load_path(str(run)), last, fired


def test_each_collective_left_in_flight_once_until_its_ranks_last_sign_of_life(tmp_path):
    trace, last, fired = _hung_run(tmp_path)

    def latest(rank, launched):  # its records' ends, and its in-flight launches (a sign of life too)
        return max([int(f.loc[f["rank"] == rank, c].max()) for f, c in
                    ((trace.steps, "end_ns"), (trace.regions, "end_ns"), (trace.collectives, "end_ns"))] + [launched])

    latest1 = latest(1, last[1] + 90_000)
    assert latest1 > last[1] + 90_000  # here a step or region ends after the launch
    got = left_in_flight(trace)
    assert list(zip(got["rank"], got["seq"], got["until_ns"], got["watchdog_fired"])) == [
        (0, 90, fired, True), (0, 91, fired, True), (1, 90, latest1, False)]
    assert last_alive_ns(trace, 0, fired=True) == fired
    assert last_alive_ns(trace, 0, fired=False) == latest(0, last[0] + 91_000) < fired  # without the watchdog
    assert last_alive_ns(trace, 1, fired=False) == latest1


def test_no_fault_evidence_leaves_nothing_in_flight():
    assert len(left_in_flight(load_path(str(__import__("paths").TESTS / "data" / "cpurun-hooks-gloo2")))) == 0


def test_the_export_draws_the_in_flight_frame_it_is_given(tmp_path):
    trace, last, fired = _hung_run(tmp_path)
    given = left_in_flight(trace)
    given = given[given["rank"] == 0].assign(until_ns=fired + 2_000_000)
    doc = build_perfetto(trace, given)
    t0 = doc["otherData"]["t0_ns"]
    got = [(e["pid"], e["args"]["seq"], round(e["ts"] + e["dur"], 3)) for e in doc["traceEvents"]
           if e.get("cat") == "inflight"]
    assert got == [(0, 90, round((fired + 2_000_000 - t0) / 1e3, 3)), (0, 91, round((fired + 2_000_000 - t0) / 1e3, 3))]


def test_the_export_never_computes_what_was_left_in_flight(tmp_path):
    """The renderer draws only the frame the caller gives: an empty one leaves a hung run's export without
    an in-flight track, and leaving the frame out is an error rather than a computation in reports/."""
    import pytest

    trace, _, _ = _hung_run(tmp_path)
    assert len(left_in_flight(trace)) == 3
    doc = build_perfetto(trace, left_in_flight(trace).iloc[:0])
    assert [e for e in doc["traceEvents"] if e.get("cat") == "inflight"] == []
    assert "in flight (never completed)" not in {e["args"]["name"] for e in doc["traceEvents"]
                                                 if e["ph"] == "M" and e["name"] == "thread_name"}
    with pytest.raises(TypeError):
        build_perfetto(trace)  # type: ignore[call-arg]


def _regions(rows, finished):
    """A trace stand-in of rank 0's regions (name, step, start ms, end ms) and its finished steps."""
    import pandas as pd
    from types import SimpleNamespace

    ms = 1_000_000
    regions = pd.DataFrame([{"rank": 0, "step": st, "micro_step": 0, "name": n, "start_ns": int(a * ms),
                             "end_ns": int(b * ms), "compute": None} for n, st, a, b in rows])
    steps = pd.DataFrame({"rank": [0] * len(finished), "step": finished})
    return SimpleNamespace(regions=regions, steps=steps)


def test_last_region_is_the_nest_open_when_the_records_end_with_its_usual_length():
    from commscope.analyze.left_in_flight import last_region, last_region_text

    rows = [("forward", s, 100 * s, 100 * s + 40) for s in range(4)]
    rows += [("optimizer", s, 100 * s + 60, 100 * s + 70) for s in range(3)]
    rows += [("opt.phase1", s, 100 * s + 61, 100 * s + 63) for s in range(3)]
    # step 3: its optimizer never ended normally; the exception left opt.phase1, then optimizer, 13.8 s later
    rows += [("optimizer", 3, 360, 360 + 13_800.02), ("opt.phase1", 3, 361, 360 + 13_800.01)]
    where = last_region(_regions(rows, [0, 1, 2]), 0)
    assert (where["path"], where["name"], where["step"]) == ("optimizer › opt.phase1", "opt.phase1", 3)
    assert abs(where["duration_ms"] - 13_799.01) < 1e-6
    assert where["typical_ms"] == 2.0
    assert last_region_text(0, where) == ("rank 0 was last in region optimizer › opt.phase1 (step 3) for 13.8 s, "
                                          "against 2 ms in its other steps")
    # a last region as long as usual ended as usual: the rank stopped after it
    assert last_region_text(0, {**where, "duration_ms": 3.0}) == (
        "rank 0's last recorded region, optimizer › opt.phase1 (step 3), ended after 3 ms as in its other steps "
        "(2 ms): the rank stopped after it, outside every recorded region")


def test_a_region_the_ranks_end_came_in_was_cut_short_however_long_it_was():
    """A signal reaching rank 0 1 ms into its optimizer region (status.json ended_ns) unwinds it: the region's
    usual-looking length is where the end came, not a region that ended before the rank stopped."""
    from commscope.analyze.left_in_flight import last_region, last_region_text

    rows = [("optimizer", s, 100 * s + 60, 100 * s + 70) for s in range(3)]
    rows += [("optimizer", 3, 360, 362)]
    trace = _regions(rows, [0, 1, 2])
    trace.config = {"status": {"0": {"status": "failed", "ended_ns": 361 * 1_000_000}}}
    where = last_region(trace, 0)
    assert where["cut_by_end"] is True
    assert last_region_text(0, where) == ("rank 0 was in region optimizer (step 3) when its end came (status.json "
                                          "ended_ns), 1 ms into it, against 10 ms in its other steps")
    # the evidence's time in the region is the same 1 ms, not the 2 ms its record holds (the unwinding included)
    from commscope.analyze.doctor import _region_evidence

    assert _region_evidence(where)["last_region_ms"] == 1.0
    trace.config = {"status": {"0": {"status": "failed", "ended_ns": 363 * 1_000_000}}}  # after the region
    assert last_region(trace, 0)["cut_by_end"] is False
    assert "ended after 2 ms as in its other steps" in last_region_text(0, last_region(trace, 0))


def test_regions_one_after_the_other_are_no_nest_and_a_finished_step_says_nothing():
    from commscope.analyze.left_in_flight import last_region

    # backward starts 0.1 ms after forward ends: forward was not open when the records end
    rows = [("forward", 0, 0, 40), ("backward", 0, 40.1, 95)]
    where = last_region(_regions(rows, []), 0)
    assert (where["path"], where["typical_ms"]) == ("backward", None)
    assert last_region(_regions(rows, [0]), 0) is None  # step 0 finished: its regions say nothing of the end
    assert last_region(_regions([], []), 0) is None
    torn = _regions(rows, [])
    torn.regions["end_ns"] = torn.regions["end_ns"].astype("Int64")
    torn.regions.loc[0, "end_ns"] = None  # a region whose end was never read is none to end last
    assert last_region(torn, 0)["path"] == "backward"


def test_the_doctor_names_where_the_culprit_was(tmp_path):
    from commscope.pipeline import diagnose_path
    from paths import TESTS
    from scale_jobs import gen_job

    job = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "h", 6, steps=6, hang=4)["job"]
    d = diagnose_path(job)
    assert d.verdict == "hang" and d.culprit_ranks == [4]
    culprit = d.evidence[0]
    assert culprit["rank"] == 4 and culprit["last_region"] == "optimizer" and culprit["last_region_step"] == 3
    # the generated job cuts rank 4's records after a whole optimizer region, as long as in its other steps:
    # the region ended as usual, and the rank stopped after it (not inside it)
    assert culprit["last_region_ms"] <= 2 * culprit["last_region_typical_ms"]
    assert (f"; rank 4's last recorded region, optimizer (step 3), ended after {culprit['last_region_ms']:.3g} ms as "
            "in its other steps") in d.summary and "the rank stopped after it, outside every recorded region" in d.summary
    assert all("last_region" not in e for e in d.evidence[1:])  # the waiting ranks are in a collective


def _frame(path, line, func, code):
    return f'  File "{path}", line {line}, in {func}\n    {code}\n'


MAIN_STACK = [_frame("/home/u/train.py", 88, "<module>", "main()"),
              _frame("/home/u/optim.py", 327, "step", "handle.wait()"),
              _frame("/srv/job/commscope/recording/inflight.py", 66, "wait", "super().wait()"),
              _frame("/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", 12, "wait", "self.work.wait()")]


def test_blocked_at_is_the_main_threads_innermost_user_frame():
    from commscope.load.evidence import blocked_at

    watchdog = [_frame("/venv/lib/python3.11/threading.py", 1002, "_bootstrap", "self._bootstrap_inner()")]
    stacks = {"commscope-watchdog (1)": watchdog, "MainThread (140)": MAIN_STACK}
    assert blocked_at(stacks) == "optim.py:327 step: handle.wait()"
    assert blocked_at({"MainThread (140)": MAIN_STACK[2:]}) is None  # library frames only
    assert blocked_at({"commscope-watchdog (1)": MAIN_STACK}) is None  # no main thread
    assert blocked_at(None) is None and blocked_at({"MainThread (1)": "x"}) is None and blocked_at([1]) is None


def test_the_hang_verdict_says_where_the_waiting_ranks_were_blocked(tmp_path):
    from commscope.pipeline import diagnose_path
    from paths import TESTS
    from scale_jobs import gen_job

    job = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "h", 5, steps=6, hang=4)["job"]
    for r in range(4):
        path = tmp_path / "h" / "job" / f"rank{r}" / "watchdog.json"
        doc = json.loads(path.read_text())
        doc["stacks"] = {"MainThread (140)": MAIN_STACK if r < 3 else MAIN_STACK[:1]}
        path.write_text(json.dumps(doc))
    d = diagnose_path(job)
    waiting = {e["rank"]: e.get("blocked_at") for e in d.evidence if e.get("launched") is True}
    assert waiting == {0: "optim.py:327 step: handle.wait()", 1: "optim.py:327 step: handle.wait()",
                       2: "optim.py:327 step: handle.wait()", 3: "train.py:88 <module>: main()"}
    assert d.summary.endswith("; rank(s) 0-2 were blocked at optim.py:327 step: handle.wait(); rank(s) 3 were "
                              "blocked at train.py:88 <module>: main().")
