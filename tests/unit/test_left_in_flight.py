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
