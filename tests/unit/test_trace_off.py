"""A run recorded with --trace off: its ranks write their status and nothing else, by design. The doctor
and the report say that, not that the ranks are missing or finished no step; a failed run still gets the
verdict its statuses support (a backend timeout is a hang, without a culprit)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from commscope.analyze.summary import summarize
from commscope.cli import app
from commscope.load import load_path
from commscope.pipeline import diagnose_path
from paths import TESTS
from report_pages import report_page

DATA = TESTS / "data" / "cpurun-trace-off"


def test_a_completed_run_is_insufficient_because_nothing_was_recorded_not_because_ranks_are_missing():
    d = diagnose_path(str(DATA / "completed"))
    assert (d.verdict, d.culprit_ranks, d.details) == ("insufficient", [], {"trace": "off"})
    assert d.summary == ("insufficient: the run was recorded with --trace off, so its ranks wrote their status and no "
                         "step, collective or hook record: no straggler, desync or hang can be judged; summary.json "
                         "says: 2 ranks completed 3 steps. Run with --trace light (the default) for a verdict.")
    assert d.problems == []  # no events.jsonl is the run's choice, not a file the loader failed to read
    doc = json.loads(CliRunner().invoke(app, ["doctor", str(DATA / "completed"), "--json"]).stdout)
    assert doc["verdict"] == "insufficient" and "missing" not in doc["summary"]


def test_the_report_says_what_was_recorded_once():
    trace = load_path(str(DATA / "completed"))
    assert trace.problems == [] and len(trace.collectives) == len(trace.steps) == 0
    s = summarize(trace, with_hta=False)
    assert s["notes"] == ["Recorded with --trace off: the ranks wrote their status only, no step, collective or hook "
                          "record, so every figure here is empty. Run with --trace light (the default) to record them."]


def test_a_hung_run_is_a_hang_without_a_culprit_and_says_how_to_get_one():
    d = diagnose_path(str(DATA / "hang"))
    assert (d.verdict, d.culprit_ranks) == ("hang", [])
    # the rank that timed out is named as such, not lumped with the one the teardown ended
    assert d.summary.startswith("hang: rank(s) 0 timed out (rank 0: RuntimeError: Application timeout caused pair "
                                "closure) but the records do not show which rank caused it")
    assert "record with --trace light for a culprit" in d.summary
    # rank 1 did not time out but was ended by the teardown (SIGTERM), as the launcher's summary names it
    assert d.details == {"suspects": [1]} and "Rank(s) 1 did not time out but were ended by a signal" in d.summary
    summary = json.loads((DATA / "hang" / "summary.json").read_text())
    assert "rank(s) 1 never joined" in summary["message"]
    assert [e["rank"] for e in d.evidence] == [0, 1]


def test_the_page_says_no_rank_recorded_anything_instead_of_drawing_an_empty_timeline(tmp_path):
    """The headline names the job's ranks beside the recorded ones (not "0 ranks" under a verdict naming 2),
    the timeline is a sentence, not empty axes, and an insufficient verdict is amber, as in the doctor
    section, not a fault's red."""
    import re

    page = report_page(DATA / "completed", tmp_path / "t.html")
    assert re.search(r'class="headline">0 of 2 ranks recorded · 0 steps', page)
    assert 'id="timeline-plot"' not in page and "No rank recorded anything to draw" in page
    assert 'class="verdict unsure"' in page
    page = report_page(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "w.html")
    assert re.search(r'class="headline">2 ranks · 3 steps', page) and 'id="timeline-plot"' in page


def test_compare_of_runs_without_step_records_compares_their_summaries_and_says_why_not_per_label(capsys):
    """The summaries' step times and losses still compare; the per-label rows need step records, which a
    run of --trace off does not write: one line says so, and compare exits 0 (it was a traceback)."""
    import pytest

    from commscope.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(DATA / "completed"), str(DATA / "completed")])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    assert "Traceback" not in out + err
    assert (f"per-label comparison skipped: {DATA / 'completed'}: no step records to compare per label (a run of "
            "--trace off records none)") in " ".join(out.split())


def test_a_rank_killed_in_a_run_of_trace_off_finished_an_unknown_number_of_steps(tmp_path):
    """--trace off records no step, and a rank killed outright leaves no status: its last step is unknown,
    not "it finished no step"."""
    run, summary = _rank_1_killed(tmp_path)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1])
    assert d.summary.endswith("how many steps it finished is unknown (a run of --trace off records no step, and "
                              "it left no status).")
    assert "finished no step" not in d.summary


def test_a_rank_that_left_no_status_is_among_the_run_reports(tmp_path):
    """The crashed rank (no status.json, others wrote theirs) is listed with the ranks that did not complete,
    in report --json and doctor --json alike; a rank the summary says completed is a loading problem instead."""
    from commscope.analyze.problems import run_reports

    run, summary = _rank_1_killed(tmp_path)
    reports = run_reports(load_path(str(run)))
    assert reports == ["rank 0: failed: RuntimeError: Connection closed by peer",
                       "rank 1: no status.json (it ended without writing one: killed, aborted or os._exit)"]
    doc = json.loads(CliRunner().invoke(app, ["doctor", str(run), "--json"]).stdout)
    assert doc["run_reports"] == reports
    summary["ranks"]["1"] = "completed"  # the summary saw it complete: its status file was lost since
    (run / "summary.json").write_text(json.dumps(summary))
    assert run_reports(load_path(str(run))) == reports[:1]


def _rank_1_killed(tmp_path):
    """The completed run with rank 1 killed outright (no status.json) and rank 0 failed after it; the run
    and its summary."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(DATA / "completed", run)
    (run / "rank1" / "status.json").unlink()
    summary = json.loads((run / "summary.json").read_text())
    summary.update(status="crashed", ranks={"0": "failed", "1": "crashed"}, exit_code=1, message="rank 1 crashed")
    (run / "summary.json").write_text(json.dumps(summary))
    status = json.loads((run / "rank0" / "status.json").read_text())
    status.update(status="failed", error="RuntimeError: Connection closed by peer", last_step=1)
    (run / "rank0" / "status.json").write_text(json.dumps(status))
    return run, summary
