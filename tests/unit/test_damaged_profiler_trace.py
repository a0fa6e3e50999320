"""A run directory whose rank's profiler trace is damaged (cut short by the kill that ended the run) still
loads: the trace is skipped with a problem line and the run's events.jsonl, what the doctor reads, stands.
The damaged file's error crosses from a parse worker to the parent intact, whatever the exception's
constructor takes."""
from __future__ import annotations

import gzip
import json
import pickle
import shutil

import pytest

from cli_result import run_main
from commscope.load import load_path
from commscope.load.files import CorruptGzip
from commscope.load.forked import _sendable
from commscope.load.kineto_events import NotATrace
from paths import TESTS

RUN = TESTS / "data" / "layout" / "transposed"  # two ranks; rank 0 holds a profiler trace


@pytest.fixture
def damaged(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    good = (run / "rank0" / "trace.json.gz").read_bytes()
    (run / "rank1" / "trace.json.gz").write_bytes(good[: len(good) // 2])  # a gzip stream cut in the middle
    return run


@pytest.mark.parametrize("workers", [1, 2])  # parsed in this process, and in worker processes
def test_a_cut_profiler_trace_is_skipped_and_the_run_still_loads(damaged, workers):
    whole = load_path(str(RUN), workers=workers)
    tr = load_path(str(damaged), workers=workers)
    lines = [p for p in tr.problems if "rank1/trace.json.gz" in p]
    assert len(lines) == 1 and lines[0].endswith("; skipped") and "gzip" in lines[0]
    # rank 0's profiled ops (a CPU run's trace holds no kernels) as without the bad file; rank 1's records
    # from its events.jsonl, all of them
    assert sorted(tr.ops["rank"].unique()) == [0] and len(tr.ops) == len(whole.ops) > 1000
    assert len(tr.collectives) == len(whole.collectives) and sorted(tr.steps["rank"].unique()) == [0, 1]
    assert sorted(int(r) for r in tr.config["files"]) == [0]


def test_doctor_and_report_read_the_run_around_a_cut_trace(damaged, capsys):
    code, cap = run_main(capsys, "doctor", damaged, "--json")
    assert code == 0 and cap.err == ""
    assert json.loads(cap.out)["verdict"] == json.loads(run_main(capsys, "doctor", RUN, "--json")[1].out)["verdict"]
    code, cap = run_main(capsys, "report", damaged, "--json", "--no-hta")
    assert code == 0 and any("rank1/trace.json.gz" in p for p in json.loads(cap.out)["problems"])


def test_a_lone_damaged_trace_file_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [') [:20])
    code, cap = run_main(capsys, "doctor", bad)
    assert code == 2 and cap.err.count("\n") == 1 and "Traceback" not in cap.err


def test_the_loaders_errors_survive_the_trip_from_a_worker():
    for e in (NotATrace("/x/rank0.json", "is not JSON"), CorruptGzip("/x/a.gz", "is not a valid gzip file (cut)")):
        back = pickle.loads(pickle.dumps(_sendable(e)))
        assert type(back) is type(e) and str(back) == str(e) and back.what == e.what
    assert pickle.loads(pickle.dumps(NotATrace("/x/r.json", "is not JSON"))).skip_line == "/x/r.json: not JSON; skipped"

    class Odd(Exception):  # a constructor that its pickle cannot call again
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    sent = _sendable(Odd(1, 2))
    assert type(sent) is RuntimeError and str(sent) == "Odd: 1/2"


def test_an_empty_gzip_trace_is_said_to_be_empty(tmp_path, capsys):
    (tmp_path / "rank0.json.gz").write_bytes(b"")
    code, cap = run_main(capsys, "report", tmp_path / "rank0.json.gz", "--json", "--no-hta")
    assert code == 2 and cap.err.strip().endswith("rank0.json.gz is empty (0 bytes)")
