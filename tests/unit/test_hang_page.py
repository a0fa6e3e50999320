"""How a hung job reads on the page and in the documents: the ranks that did not complete are the run's
outcome (`run_reports`), not problems reading it, and the doctor's evidence puts the rank that never
launched first, in a table of its own, with times in ms rather than epoch ns. A 12-rank job from
bench/gen_job.py whose rank 5 never launches a collective of step 3 (every other rank's watchdog fires)."""
from __future__ import annotations

import json
import re

from cli_result import run_main
from commscope.analyze.diagnosis import evidence_tables
from paths import TESTS
from scale_jobs import gen_job


def hung_job(tmp_path) -> str:
    return gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "h", 12, steps=6, hang=5)["job"]


def test_ranks_that_did_not_complete_are_run_reports_not_loading_problems(tmp_path, capsys):
    job = hung_job(tmp_path)
    code, out = run_main(capsys, "report", job, "--json", "--no-hta")
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["problems"] == []
    assert doc["run_reports"] == ["ranks 0-4,6-11: failed: hang watchdog: collective did not finish within 600 s",
                                  "rank 5: failed: terminated by signal SIGTERM (the launcher stopped the job)",
                                  "ranks 0-4,6-11: the hang watchdog fired (see rank<N>/watchdog.json)"]  # one line for the same words
    code, out = run_main(capsys, "doctor", job, "--json")
    d = json.loads(out.out)
    assert d["verdict"] == "hang" and d["problems"] == [] and d["run_reports"] == doc["run_reports"]

    page = tmp_path / "page.html"
    code, out = run_main(capsys, "report", job, "--no-hta", "-o", page)
    assert code == 0, out.err
    html = page.read_text()
    assert "<h3>Ranks that did not complete</h3>" in html and "Problems while loading" not in html
    assert "The loader met" not in html and "<b>the run reports:</b> rank 5: failed: terminated" in html


def test_the_hang_evidence_puts_the_culprit_first_in_a_table_of_its_own_in_ms(tmp_path, capsys):
    job = hung_job(tmp_path)
    code, out = run_main(capsys, "doctor", job, "--json")
    ev = json.loads(out.out)["evidence"]
    assert ev[0]["rank"] == 5 and ev[0]["launched"] is False and [e["rank"] for e in ev[1:]] == [0, 1, 2, 3, 4, 6, 7,
                                                                                                8, 9, 10, 11]
    tables, origin = evidence_tables(ev)
    assert [len(t) for t in tables] == [1, 11]  # no half-empty table
    calls = [e["call_ns"] for e in ev[1:]]
    assert origin == min(calls + [ev[0]["last_launch_ns"]])
    assert [r["call_ms"] for r in tables[1]] == [round((c - origin) / 1e6, 3) for c in calls]
    assert all(not k.endswith("_ns") for t in tables for r in t for k in r)
    assert all(r["watchdog_fired_ms"] > 1000 for r in tables[1])  # 600 s watchdog: ms since the evidence's start

    page = tmp_path / "page.html"
    run_main(capsys, "report", job, "--no-hta", "-o", page)
    html = page.read_text()
    first = html.index('id="doctor-evidence"')
    assert first < html.index('id="doctor-evidence-2"')
    assert re.search(r"<td[^>]*>5</td>", html[first:html.index("</table>", first)])
    assert "1796" not in html[first:html.index("</table>", html.index('id="doctor-evidence-2"'))]  # no epoch ns


def test_a_malformed_watchdog_report_still_counts_as_fired_and_is_a_problem(tmp_path, capsys):
    """The watchdog fired wherever its file exists, whether or not its report parses; a report that does
    not parse drops the fault evidence of every rank, which `problems` says."""
    job = hung_job(tmp_path)
    (tmp_path / "h" / "job" / "rank0" / "watchdog.json").write_text('{"fired_ns": "x"}')
    code, out = run_main(capsys, "report", job, "--json", "--no-hta")
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert "ranks 0-4,6-11: the hang watchdog fired (see rank<N>/watchdog.json)" in doc["run_reports"]
    assert len(doc["problems"]) == 1 and doc["problems"][0].startswith("fault evidence not read: ")
    assert "watchdog.json" in doc["problems"][0]


def test_export_carries_the_run_reports(tmp_path, capsys):
    job = hung_job(tmp_path)
    out_file = tmp_path / "t.json"
    code, out = run_main(capsys, "export", job, "--perfetto", out_file)
    assert code == 0, out.err
    other = json.loads(out_file.read_text())["otherData"]
    assert other["problems"] == [] and other["run_reports"][1].startswith("rank 5: failed: terminated by signal")
    assert "the run reports: rank 5: failed: terminated by signal" in out.err


def test_evidence_tables_convert_any_integer_time_and_rename_only_what_they_convert():
    import numpy as np

    ev = [{"rank": 1, "call_ns": np.int64(2_000_000_000), "wait_ns": None},
          {"rank": 2, "call_ns": 1_000_000_000, "wait_ns": 1_500_000_000},
          {"rank": 3, "call_ns": "unknown", "launched": True}]
    tables, origin = evidence_tables(ev)
    assert origin == 1_000_000_000
    assert tables[0] == [{"rank": 1, "call_ms": 1000.0, "wait_ms": None}, {"rank": 2, "call_ms": 0.0, "wait_ms": 500.0}]
    assert tables[1] == [{"rank": 3, "call_ns": "unknown", "launched": True}]  # not a time: its name stays


def test_the_verdict_word_is_said_once(tmp_path, capsys):
    """The page's first screen and its doctor section both lead with the verdict in capitals, then the
    summary without the "hang:" it starts with."""
    job = hung_job(tmp_path)
    page = tmp_path / "page.html"
    run_main(capsys, "report", job, "--no-hta", "-o", page)
    html = page.read_text()
    lines = re.findall(r"<b[^>]*>HANG</b> ([^<]{0,40})", html)
    assert len(lines) == 2 and all(line.startswith("rank(s) 0-4,6-11 launched") for line in lines)
    assert "HANG</b> hang:" not in html


def test_a_lone_time_in_the_evidence_is_left_out_not_shown_as_zero():
    """One crashed rank's evidence holds one time: since itself it would read 0.0 ms. Two times read apart."""
    from commscope.analyze.diagnosis import evidence_tables

    tables, origin = evidence_tables([{"rank": 1, "last_finished_step": 2, "last_step_end_ns": 10**18}])
    assert (tables, origin) == ([[{"rank": 1, "last_finished_step": 2}]], None)
    tables, origin = evidence_tables([{"rank": 1, "last_step_end_ns": 10**18},
                                      {"rank": 2, "last_step_end_ns": 10**18 + 2_500_000}])
    assert origin == 10**18 and [r["last_step_end_ms"] for r in tables[0]] == [0.0, 2.5]
