"""The Perfetto (Chrome-JSON) export: one process per rank, expected slice counts per track kind, labels and
bytes/seq in args, and no two slices overlapping on any (pid, tid).

Perfetto's own trace processor needs a prebuilt binary that the `perfetto` package downloads on first use;
without network that fails, so the trace-processor test runs only where a binary is available
(PERFETTO_TP_BIN, or the package's cache) and the structural checks below always run."""
from __future__ import annotations

import glob
import os
from collections import Counter, defaultdict

import numpy as np
import orjson
import pandas as pd
import pytest

from commscope.analyze.left_in_flight import left_in_flight
from commscope.errors import UserError
from reports.perfetto import build_perfetto, write_perfetto
from commscope.load.frames import rel
from report_trace import T, US, make_trace


def check_no_overlap(doc: dict) -> None:
    by_track = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, iv in by_track.items():
        iv.sort()
        for (a0, a1), (b0, b1) in zip(iv, iv[1:]):
            assert a1 <= b0 + 1e-9, f"overlap on {key}: {(a0, a1)} vs {(b0, b1)}"


def thread_names(doc: dict) -> dict:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_rel_keeps_nanoseconds_on_epoch_axis():
    col = pd.Series([T + 1, T + 3], dtype="int64")
    assert rel(col, T).tolist() == [1.0, 3.0]
    assert np.isnan(rel(pd.Series([np.nan, 5.0]), 0)[0])


def test_export_structure_counts_and_args():
    tr = make_trace()
    doc = build_perfetto(tr, left_in_flight(tr))
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    names = thread_names(doc)
    per_cat = Counter((e["pid"], e.get("cat")) for e in ev if e["ph"] in ("X", "i"))
    for r in (0, 1):
        assert per_cat[(r, "comm")] == 6 and per_cat[(r, "compute")] == 4 and per_cat[(r, "step")] == 2
        assert per_cat[(r, "region")] == 4 and per_cat[(r, "hook")] == 2
        assert sorted(v for (p, _), v in names.items() if p == r) == [
            "comm attn", "comm mlp", "comm scalars", "compute stream 7", "hooks", "regions", "steps"]
    attn = [e for e in ev if e.get("cat") == "comm" and e["pid"] == 1 and e["args"]["label"] == "attn"]
    assert [e["args"]["seq"] for e in attn] == [0, 3]
    assert all(e["args"]["bytes"] == 8_000_000 and e["args"]["op"] == "reduce_scatter" for e in attn)
    # device-timed: the slice is the execution [start, end) = [300, 500) µs of step 0, on a µs axis from t0
    assert (attn[0]["ts"], attn[0]["dur"]) == (300.0, 200.0)
    assert doc["otherData"]["t0_ns"] == T
    check_no_overlap(doc)


def test_overlapping_collectives_of_one_label_get_extra_lanes(tmp_path):
    tr = make_trace()
    c = tr.collectives.copy()
    extra = c[(c["label"] == "attn") & (c["rank"] == 0) & (c["step"] == 0)].copy()
    extra["start_ns"] = T + 350 * US  # runs inside the first attn collective: needs a second track
    extra["end_ns"] = T + 450 * US
    extra["seq"] = 99
    tr.collectives = pd.concat([c, extra], ignore_index=True)
    doc = build_perfetto(tr, left_in_flight(tr))
    names = thread_names(doc)
    assert "comm attn #2" in {v for (p, _), v in names.items() if p == 0}
    assert "comm attn #2" not in {v for (p, _), v in names.items() if p == 1}
    check_no_overlap(doc)
    out = write_perfetto(tr, tmp_path / "t.json", left_in_flight(tr))
    assert orjson.loads(out.read_bytes()) == orjson.loads(orjson.dumps(doc))


def test_write_refuses_input_directory(tmp_path):
    tr = make_trace()
    tr.path = str(tmp_path)
    with pytest.raises(UserError, match="inside the input directory"):
        write_perfetto(tr, tmp_path / "out.json", left_in_flight(tr))
    tr.path = None  # a trace built in memory has no input directory to protect
    assert write_perfetto(tr, tmp_path / "out.json", left_in_flight(tr)).is_file()


def _trace_processor_bin() -> str | None:
    if os.environ.get("PERFETTO_TP_BIN"):
        return os.environ["PERFETTO_TP_BIN"]
    found = glob.glob(os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*"))
    return next((f for f in found if not f.endswith(".tmp") and os.access(f, os.X_OK)), None)


@pytest.mark.skipif(_trace_processor_bin() is None, reason="no trace_processor binary (needs network to fetch)")
def test_perfetto_trace_processor_reads_expected_slices(tmp_path):
    tp_module = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not a test dependency")
    TraceProcessor, TraceProcessorConfig = tp_module.TraceProcessor, tp_module.TraceProcessorConfig

    tr = make_trace()
    out = write_perfetto(tr, tmp_path / "t.json", left_in_flight(tr))
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=_trace_processor_bin()))
    try:
        df = tp.query("select s.name, t.name as track from slice s join thread_track t on s.track_id = t.id").as_pandas_dataframe()
    finally:
        tp.close()
    assert (df["track"] == "comm attn").sum() == 4 and df["name"].str.startswith("step").sum() == 4


def test_collectives_left_in_flight_are_drawn_until_the_rank_was_last_alive(tmp_path):
    """A hang's evidence (watchdog.json, inflight.json) is in the export: each collective still in flight,
    once per (group, seq) however many files list it, from its launch to the watchdog's firing (or, on a
    rank without a watchdog, to its latest record)."""
    import json

    from commscope.load import load_path
    from report_trace import write_run_dir

    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1), steps=(0, 1), style="run"), run)
    trace = load_path(str(run))
    last = {r: int(trace.collectives.loc[trace.collectives["rank"] == r, "end_ns"].max()) for r in (0, 1)}
    fired = last[0] + 5_000_000_000

    def row(rank, seq, label):
        return {"kind": "collective", "rank": rank, "step": 2, "label": label, "phase": "reduce",
                "op": "reduce_scatter", "bytes": 1024, "dtype": "float32", "group": "0", "group_size": 2,
                "seq": seq, "call_ns": last[rank] + 1000 * seq, "return_ns": last[rank] + 1000 * seq + 5,
                "wait_ns": None, "wait_end_ns": None}

    rows0 = [row(0, 90, "attn"), row(0, 91, "mlp")]
    (run / "rank0" / "watchdog.json").write_text(json.dumps(
        {"schema_version": 1, "rank": 0, "world_size": 2, "timeout_s": 5, "fired_ns": fired,
         "waiting_on": rows0[0], "inflight": rows0, "last_step": 1, "stacks": {}}))
    (run / "rank0" / "inflight.json").write_text(json.dumps({"schema_version": 1, "rank": 0, "inflight": rows0}))
    (run / "rank1" / "inflight.json").write_text(json.dumps({"schema_version": 1, "rank": 1,
                                                              "inflight": [row(1, 90, "attn")]}))
    trace = load_path(str(run))
    # rank 1's latest record: the end of anything it recorded (here its last step or region), after its launch
    latest1 = max(int(f.loc[f["rank"] == 1, c].max()) for f, c in
                  ((trace.steps, "end_ns"), (trace.regions, "end_ns"), (trace.collectives, "end_ns")) if len(f))
    assert latest1 > last[1] + 90_000
    doc = build_perfetto(trace, left_in_flight(trace))
    check_no_overlap(doc)
    t0 = doc["otherData"]["t0_ns"]
    got = sorted((e["pid"], e["args"]["seq"], e["name"], e["ts"], round(e["ts"] + e["dur"], 3), e["args"]["until"])
                 for e in doc["traceEvents"] if e.get("cat") == "inflight")
    us = lambda ns: round((ns - t0) / 1e3, 3)  # noqa: E731
    assert got == [
        (0, 90, "attn:reduce_scatter (in flight)", us(last[0] + 90_000), us(fired), "the hang watchdog fired"),
        (0, 91, "mlp:reduce_scatter (in flight)", us(last[0] + 91_000), us(fired), "the hang watchdog fired"),
        (1, 90, "attn:reduce_scatter (in flight)", us(last[1] + 90_000), us(latest1), "the rank's last record")]
    names = thread_names(doc)
    assert any(n == "in flight (never completed)" for n in names.values())
