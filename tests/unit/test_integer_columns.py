"""Integers stay integers from the fault evidence to what the user reads: a watchdog report's ns times (above
2**53, where float64 is off by up to 128 ns) and byte counts come out of the loader as nullable Int64, of
left_in_flight and the Perfetto export as the exact ints the files hold, and of `doctor` (--json and the
evidence table) without a `.0`. The collectives frame holds bytes as float64 (a Kineto collective may have
no size): the export writes its whole values as ints."""
from __future__ import annotations

import json

import numpy as np
import orjson
import pandas as pd

from cli_result import run_main
from commscope.analyze.launches import launch_table
from commscope.analyze.left_in_flight import left_in_flight
from commscope.load import load_path
from commscope.load.flight_recorder import launch_frame, launch_rows
from report_trace import make_trace, write_run_dir
from reports.doctor_terminal import _cell, number_text
from reports.perfetto import build_perfetto
from rundirs import write_json

WAIT = 1_796_481_568_074_141_472  # watchdog.json's wait_ns in the audit: float64 reads it 32 ns off
CALL = WAIT - 543_001
assert float(WAIT) != WAIT and WAIT > 2 ** 53


def row(rank, seq, op="all_reduce", wait=True, nbytes=36):
    return {"kind": "collective", "rank": rank, "step": 3, "label": "scalars", "phase": "allreduce", "op": op,
            "bytes": nbytes, "dtype": "float32", "group": "0", "group_size": 2, "seq": seq, "call_ns": CALL + rank,
            "return_ns": CALL + rank + 5, "wait_ns": WAIT if wait else None, "wait_end_ns": None}


def hung_run(tmp_path, rows1=None):
    """Rank 0's watchdog fired with two collectives in flight, one of them never waited on (wait_ns null,
    which made the column float64); rank 1 lists `rows1` in its own watchdog report when given."""
    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1), steps=(0, 1), style="run"), run)
    fired = WAIT + 10_000_000_017
    rows0 = [row(0, 90), row(0, 91, wait=False, nbytes=393216)]
    write_json(run / "rank0" / "watchdog.json", {"schema_version": 1, "rank": 0, "world_size": 2, "timeout_s": 10,
                                                 "fired_ns": fired, "waiting_on": rows0[0], "inflight": rows0,
                                                 "last_step": 1, "stacks": {}})
    if rows1:
        write_json(run / "rank1" / "watchdog.json", {"schema_version": 1, "rank": 1, "world_size": 2,
                                                     "timeout_s": 10, "fired_ns": fired + 1, "waiting_on": rows1[0],
                                                     "inflight": rows1, "last_step": 1, "stacks": {}})
    return run, fired


def test_the_loader_keeps_evidence_integers_exact(tmp_path):
    run, _ = hung_run(tmp_path)
    fl = load_path(str(run)).faults.inflight
    for c in ("group_size", "seq", "bytes", "step", "call_ns", "wait_ns"):
        assert fl[c].dtype == "Int64", c
    assert fl["wait_ns"].tolist() == [WAIT, pd.NA]
    assert fl["bytes"].tolist() == [36, 393216]
    assert fl["call_ns"].tolist() == [CALL, CALL]


def test_left_in_flight_and_the_export_write_the_files_integers(tmp_path):
    run, fired = hung_run(tmp_path)
    trace = load_path(str(run))
    fl = left_in_flight(trace)
    assert fl["until_ns"].tolist() == [fired, fired]
    doc = orjson.loads(orjson.dumps(build_perfetto(trace, fl)))  # as the file holds it
    args = [e["args"] for e in doc["traceEvents"] if e.get("cat") == "inflight"]
    got = [(a["seq"], a["bytes"], a["call_ns"], a["wait_ns"], a["step"], a["group_size"]) for a in args]
    assert got == [(90, 36, CALL, WAIT, 3, 2), (91, 393216, CALL, None, 3, 2)]
    assert all(type(a["bytes"]) is int and type(a["call_ns"]) is int for a in args)
    assert type(args[0]["wait_ns"]) is int
    # the collectives' own slices: float64 bytes in the frame, whole ints in the file
    assert trace.collectives["bytes"].dtype == "float64"
    sizes = {e["args"]["bytes"] for e in doc["traceEvents"] if e.get("cat") == "comm" and e["ph"] == "X"}
    assert sizes and all(type(b) is int for b in sizes)


def test_an_unknown_size_stays_null_in_the_export():
    trace = make_trace()
    trace.collectives.loc[trace.collectives.index[0], "bytes"] = float("nan")
    doc = orjson.loads(orjson.dumps(build_perfetto(trace, left_in_flight(trace))))
    sizes = [e["args"]["bytes"] for e in doc["traceEvents"] if e.get("cat") == "comm" and e["ph"] == "X"]
    assert sizes.count(None) == 1 and all(type(b) is int for b in sizes if b is not None)


def test_flight_recorder_rows_are_integers():
    entry = {"process_group": ("0", "default_pg"), "collective_seq_id": 7, "profiling_name": "nccl:all_reduce",
             "time_created_ns": WAIT, "input_sizes": [[1024], [3]], "input_dtypes": ["Float", "BFloat16"],
             "state": "scheduled", "is_p2p": False}
    # bytes are elements × each input's dtype size (4 B a Float, 2 B a BFloat16), never an element count;
    # a dtype commscope does not know, or inputs without one each, leave the size unknown
    unknown = [{**entry, "input_dtypes": ["Float", "QUInt4x2"]}, {**entry, "input_dtypes": ["Float"]}]
    df = launch_frame(launch_rows(0, {"entries": [entry, *unknown]}))
    assert (df["bytes"].dtype, df["call_ns"].dtype, df["wait_ns"].dtype) == ("Int64", "Int64", "Int64")
    assert (df["bytes"].iloc[0], df["call_ns"].iloc[0], df["seq"].iloc[0]) == (1024 * 4 + 3 * 2, WAIT, 7)
    assert df["bytes"].iloc[1:].isna().all()
    assert df["wait_ns"].isna().all() and df["step"].isna().all()
    assert len(launch_frame([])) == 0 and launch_frame([])["call_ns"].dtype == "Int64"


def test_the_launch_table_keeps_byte_counts_integers(tmp_path):
    run, _ = hung_run(tmp_path)
    trace = load_path(str(run))
    lt = launch_table(trace.collectives, trace.faults.inflight)
    assert lt["bytes"].dtype == "Int64" and lt["call_ns"].dtype == "Int64"
    assert lt.loc[lt["seq"] == 90, "bytes"].tolist() == [36]


def test_a_whole_float_byte_count_in_a_report_is_read_as_an_int_and_a_fraction_refused(tmp_path):
    run, _ = hung_run(tmp_path, rows1=[row(1, 90, nbytes=36.0)])
    assert load_path(str(run)).faults.inflight["bytes"].tolist() == [36, 393216, 36]
    run2, _ = hung_run(tmp_path / "b", rows1=[row(1, 90, nbytes=36.5)])
    t = load_path(str(run2))
    assert len(t.faults.inflight) == 0
    assert t.faults.error == f"{run2 / 'rank1' / 'watchdog.json'} is not a commscope watchdog report (bytes is '36.5')"


def test_an_unknown_size_in_a_report_stays_unknown_and_is_no_desync(tmp_path):
    """A report that does not know a collective's size says null: read as 0 it would differ from the peers'
    36 bytes at the same (group, seq) and read as a desync."""
    from commscope.analyze.doctor import diagnose

    run, _ = hung_run(tmp_path, rows1=[row(1, 90, nbytes=None)])
    t = load_path(str(run))
    assert t.faults.inflight["bytes"].tolist()[:2] == [36, 393216] and pd.isna(t.faults.inflight["bytes"].iloc[2])
    assert diagnose(t).verdict != "desync"


def test_doctor_prints_desync_byte_counts_as_integers(tmp_path, capsys):
    """The audit's desync: 393216 bytes, as --json and the evidence table print it."""
    run, _ = hung_run(tmp_path, rows1=[row(1, 90, op="broadcast", nbytes=393216)])
    doc = json.loads((tmp_path / "run" / "rank0" / "watchdog.json").read_text())
    doc["inflight"][0]["bytes"] = doc["waiting_on"]["bytes"] = 393216
    write_json(tmp_path / "run" / "rank0" / "watchdog.json", doc)
    code, cap = run_main(capsys, "doctor", run, "--json")
    got = json.loads(cap.out)
    # two ranks, one on each side: no majority, no culprit named (analyze.doctor.check_desync)
    assert (code, got["verdict"], got["culprit_ranks"]) == (0, "desync", [])
    assert [(e["rank"], e["op"], e["bytes"], e["call_ns"]) for e in got["evidence"]] == [
        (0, "all_reduce", 393216, CALL), (1, "broadcast", 393216, CALL + 1)]
    assert '"bytes": 393216,' in cap.out
    code, cap = run_main(capsys, "doctor", run)
    assert code == 0
    table = [ln for ln in cap.out.splitlines() if ln.startswith("│")]
    assert len(table) == 2 and all("│ 393,216 │" in ln for ln in table), cap.out
    assert "393,216.0" not in cap.out


def test_the_evidence_table_formats_counts_whole_and_missing_integers_as_a_dash():
    assert number_text(393216.0, "bytes") == "393,216"
    assert number_text(393216, "bytes") == "393,216"
    assert number_text(12.5, "waiting_caused_ms") == "12.5"
    assert _cell(pd.NA, "bytes") == "–"


def test_json_documents_write_a_missing_integer_as_null():
    """doctor --json's evidence is read from nullable Int64 columns: pandas' missing values are null, as
    every --json document writes them (commscope.util.jsondoc)."""
    from commscope.util.jsondoc import document

    assert orjson.loads(document({"bytes": pd.NA, "t": pd.NaT, "n": np.int64(3), "x": float("nan")})) == {
        "bytes": None, "t": None, "n": 3, "x": None}
