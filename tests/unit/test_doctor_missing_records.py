"""Missing records are no evidence of a fault (docs/faults.md, "Incomplete records are no absence"): a run
directory without a rank's folder is `insufficient`, naming the rank and what summary.json says of it, never
a crash; a rank folder with records but no status.json is still a crash. No verdict shows the sentinel -1
as a "last finished step" (terminal, --json, page).

Each run is a hand-built 4-rank run directory (tests/report_trace.py) in tmp_path: fast, one process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

from commscope.pipeline import diagnose_path
from report_trace import make_trace, write_run_dir
from rundirs import write_json


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), path)
    return path


def with_launcher_ranks(run, ranks: dict[str, str], status: str = "completed"):
    s = json.loads((run / "summary.json").read_text())
    write_json(run / "summary.json", {**s, "status": status, "ranks": ranks})


def doctor_cli(run, *args):
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), *args], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "160"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_missing_rank_folder_of_a_completed_run_is_insufficient_not_a_crash(run):
    with_launcher_ranks(run, {str(r): "completed" for r in range(4)})
    shutil.rmtree(run / "rank2")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("insufficient", [], None)
    assert d.summary == (
        "insufficient: the run directory has no folder for rank(s) 2 of the job's 4; summary.json says rank(s) 2 "
        "completed. Their records are missing, which is no sign of a crash or hang, and without them who came "
        "last to a collective is unknown: no hang, desync or straggler can be judged on them. Copy the whole run "
        "directory for a verdict.")
    assert d.details == {"missing_ranks": [2], "ranks": [0, 1, 3], "no_folder_ranks": [2],
                         "launcher_status": {"2": "completed"}}
    assert d.problems == ["no folder for rank(s) 2 of 4"]


def test_without_a_launcher_word_the_missing_folder_is_still_insufficient(run):
    # a run directory of a script using the recording API has no ranks in summary.json
    shutil.rmtree(run / "rank1")
    shutil.rmtree(run / "rank3")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    assert d.summary.startswith("insufficient: the run directory has no folder for rank(s) 1,3 of the job's 4. "
                                "Their records are missing")
    assert d.details["launcher_status"] == {"1": None, "3": None}


def test_what_the_launcher_says_of_a_missing_rank_is_reported_not_judged(run):
    with_launcher_ranks(run, {"0": "completed", "1": "completed", "2": "crashed", "3": "completed"}, "crashed")
    shutil.rmtree(run / "rank2")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    assert "no folder for rank(s) 2 of the job's 4; summary.json says rank(s) 2 crashed." in d.summary


def test_a_rank_folder_with_records_but_no_status_is_still_a_crash(run):
    with_launcher_ranks(run, {"0": "completed", "1": "completed", "2": "completed", "3": "crashed"}, "crashed")
    os.remove(run / "rank3" / "status.json")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [3], 2)
    assert d.summary == ("crash: rank(s) 3 left no status.json (ended abruptly: killed, aborted or os._exit); "
                         "last finished step 2.")


def test_a_status_lost_from_a_rank_the_launcher_saw_complete_is_no_crash(run):
    """summary.json is written after every rank ended, from their status.json files: a rank it says completed
    whose status.json is gone lost the file afterwards (a partial copy). Said as a problem, not judged."""
    with_launcher_ranks(run, {str(r): "completed" for r in range(4)})
    os.remove(run / "rank3" / "status.json")
    d = diagnose_path(str(run))
    assert d.verdict == "ok" and d.culprit_ranks == []
    assert d.problems == ["no status.json for rank(s) 3, which summary.json says completed"]


def test_a_real_crash_stays_a_crash_beside_a_missing_folder(run):
    os.remove(run / "rank3" / "status.json")
    shutil.rmtree(run / "rank1")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [3], 2)


def test_a_hang_among_the_present_ranks_is_still_found_beside_a_missing_folder(run):
    # rank 3 never launched step 2's collectives that ranks 0 and 2 launched; rank 1's folder is gone
    p = run / "rank3" / "events.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] < 2))
    for r in (0, 2):
        write_json(run / f"rank{r}" / "status.json", {"status": "failed", "error": "hang watchdog: waited",
                                                     "last_step": 2})
    write_json(run / "rank3" / "status.json", {"status": "failed", "last_step": 1,
                                              "error": "Terminated: terminated by signal 15 (SIGTERM)"})
    shutil.rmtree(run / "rank1")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("hang", [3], 2)


def finished_no_step(run):
    """Rank 3 crashed before finishing any step: its folder holds its collectives of step 0, no step record."""
    os.remove(run / "rank3" / "status.json")
    p = run / "rank3" / "events.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] == 0 and r["kind"] != "step"))


def test_a_crash_before_the_first_finished_step_says_none_never_minus_one(run):
    finished_no_step(run)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [3], None)
    # its records end inside step 0, in its backward: where it was is said too (left_in_flight.last_region)
    assert d.summary.startswith("crash: rank(s) 3 left no status.json (ended abruptly: killed, aborted or "
                                "os._exit); it finished no step. Rank 3 was last in region backward (step 0) for ")
    assert d.evidence[0]["last_finished_step"] is None and d.evidence[0]["last_region"] == "backward"
    doc = json.loads(doctor_cli(run, "--json"))
    assert (doc["step"], doc["evidence"][0]["last_finished_step"]) == (None, None)
    text = doctor_cli(run)
    row = next(line for line in text.splitlines() if line.startswith("│") and "no status.json" in line)
    assert [c.strip() for c in row.strip("│").split("│")][:3] == ["3", "none", "none: no status.json"]
    assert "-1" not in text


def test_the_crash_summary_names_the_last_region_as_recorded(run):
    """The sentence after "it finished no step." starts with a capital and keeps the region's own case."""
    finished_no_step(run)
    p = run / "rank3" / "events.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps({**r, "name": "Backward.QKV"} if r.get("name") == "backward" else r) + "\n"
                         for r in rows))
    d = diagnose_path(str(run))
    assert d.verdict == "crash" and d.evidence[0]["last_region"] == "Backward.QKV"
    assert "it finished no step. Rank 3 was last in region Backward.QKV (step 0) for " in d.summary


def test_the_page_says_none_for_a_rank_that_finished_no_step(run):
    from reports.doctor_section import render_doctor

    finished_no_step(run)
    html = render_doctor(SimpleNamespace(diagnosis=diagnose_path(str(run))))
    assert ">none<" in html and ">-1<" not in html and "finished no step" in html


def test_the_terminal_evidence_keeps_the_column_when_every_rank_finished_no_step():
    from commscope.analyze.diagnosis import Diagnosis
    from reports.doctor_terminal import print_doctor_verdict

    d = Diagnosis("interrupted", summary="interrupted: the run was stopped by the user; no rank finished a step.",
                  evidence=[{"rank": 0, "status": "interrupted", "error": None, "last_finished_step": None}])
    console = Console(width=100, record=True, color_system=None)
    print_doctor_verdict(d, console)
    text = console.export_text()
    assert "last finished step" in text and "none" in text.split("last finished step")[1]


def test_an_interrupt_before_any_step_names_no_step(run):
    for r in range(4):
        p = run / f"rank{r}" / "events.jsonl"
        p.write_text("")
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                     "last_step": -1})
    d = diagnose_path(str(run))
    assert (d.verdict, d.step) == ("interrupted", None)
    assert "no rank finished a step" in d.summary
    assert [e["last_finished_step"] for e in d.evidence] == [None] * 4


def test_a_rank_that_completed_with_an_empty_log_is_said_so(run):
    """A rank whose script recorded no step (its events.jsonl exists and is empty) is not called unreadable:
    the verdict says its log holds nothing to read, and the problems say which file."""
    (run / "rank3" / "events.jsonl").write_text("")
    write_json(run / "rank3" / "status.json", {"status": "completed", "error": None, "last_step": -1})
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and d.details["unrecorded_ranks"] == [3]
    assert d.summary.startswith("insufficient: rank(s) 3 completed (status.json) but their events.jsonl holds no "
                                "step or collective that could be read (empty, missing or damaged: see the problems)")
    assert "rank 3: events.jsonl holds no record" in d.problems


def test_a_rank_folder_whose_records_cannot_be_read_is_said_so_not_told_to_load_traces(run):
    """Rank 1's events.jsonl is a FIFO (never opened): its folder is there, but none of its records, and the
    verdict points at that file, not at profiler traces to load."""
    os.remove(run / "rank1" / "events.jsonl")
    os.mkfifo(run / "rank1" / "events.jsonl")
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and d.details["missing_ranks"] == [1]
    assert d.summary.endswith("Their rank folders hold no records that could be read (see the problems): a verdict "
                              "needs each rank's events.jsonl.")
