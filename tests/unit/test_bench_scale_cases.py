"""bench/bench_scale.py's planted-fault cases come from its FAULT_CASES table: each case runs the command
the table names on the job of its fault (one job per fault), doctor's answers are checked against that
job's ground truth, and a command that timed out on the straggler job skips the cases that run it.

`measure` is replaced by a recorder (no process is started); the jobs are generated for real, 4 ranks."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
bench_scale = importlib.import_module("bench_scale")


def _fake_measure(calls: list):
    """A `measure` that records (command, the planted fault of the job it ran on) and answers as a doctor
    that found that fault."""
    def measure(argv, timeout, env=None):
        command = "report" if "report" in argv else "doctor"
        job = Path(argv[argv.index(command) + 1])
        truth = json.loads((job.parent / "ground_truth.json").read_text())
        fault = next(f for f in ("straggler", "desync", "hang") if truth.get(f) is not None)
        calls.append((command, fault))
        got = truth[fault]
        out = json.dumps({"verdict": fault, "culprit_ranks": [got["rank"]], "group": got["group"],
                          "sequence": got["seq"]})
        return {"wall_s": 0.1, "max_rss_mb": 1.0, "tree_peak_rss_mb": 1.0, "timed_out": False, "rc": 0,
                "stdout": out}
    return measure


def test_each_fault_case_runs_its_tables_command_on_its_faults_job(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(bench_scale, "measure", _fake_measure(calls))
    only = tuple(bench_scale.FAULT_CASES)
    case = bench_scale.run_case("run", 4, tmp_path, 60.0, False, set(), lambda s: None, only)
    assert list(bench_scale.FAULT_CASES) == ["doctor_desync", "report_hang", "doctor_hang"]
    # the command each case ran, in order, and the fault of the job it ran on
    assert calls == [("doctor", "desync"), ("report", "hang"), ("doctor", "hang")]
    assert case["truth"]["desync"]["rank"] == 4 // 3 and case["truth"]["hang"]["rank"] == 4 // 3
    assert case["doctor_desync"]["check"]["found"] is True and case["doctor_hang"]["check"]["found"] is True
    assert "check" not in case["report_hang"]  # report's answer is timed, not judged
    assert "report" not in case and "doctor" not in case  # not asked for


def test_a_command_timed_out_on_the_straggler_job_skips_the_fault_cases_that_run_it(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(bench_scale, "measure", _fake_measure(calls))
    case = bench_scale.run_case("run", 4, tmp_path, 60.0, False, {("run", "doctor")}, lambda s: None,
                                tuple(bench_scale.FAULT_CASES))
    assert case["doctor_desync"] == case["doctor_hang"] == {
        "skipped": "doctor ran past the timeout at this or a smaller size"}
    assert calls == [("report", "hang")] and "wall_s" in case["report_hang"]


def test_the_command_line_lists_every_case():
    assert bench_scale.CASES == ("report", "doctor", "hta_construct", "doctor_desync", "report_hang", "doctor_hang")
