"""doctor and the loader's problems: they are listed (terminal, --json, page), and a hang found by absence is
not claimed on a rank whose records the loader dropped or found torn (docs/faults.md, "Incomplete records").

Each damaged run is a copy of tests/data/cpurun-hooks-gloo2 (a completed 2-rank run) in tmp_path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

from commscope.analyze.doctor import Diagnosis
from commscope.pipeline import diagnose_path
from commscope.load import load_path
from paths import TESTS
from report_trace import make_trace, write_run_dir
from rundirs import write_json

GLOO2 = TESTS / "data" / "cpurun-hooks-gloo2"


def copy_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(GLOO2, run)
    return run


def set_steps_from(run, rank, first_line, step):
    """Give every record from line `first_line` (1-based) of the rank's events.jsonl the step `step`."""
    p = run / f"rank{rank}" / "events.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines()]
    for rec in recs[first_line - 1:]:
        if "step" in rec:
            rec["step"] = step
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))


def tear(run, rank):
    """Cut the rank's events.jsonl in half, inside a line."""
    p = run / f"rank{rank}" / "events.jsonl"
    data = p.read_bytes()
    cut = len(data) // 2
    while data[cut - 1:cut] == b"\n":
        cut += 1
    p.write_bytes(data[:cut])


DAMAGE = {
    "step_huge": (lambda run: set_steps_from(run, 1, 103, 2 ** 63 - 1), "the loader ignored"),
    "step_neg": (lambda run: set_steps_from(run, 1, 103, -1_000_000), "the loader ignored"),
    "torn": (lambda run: tear(run, 1), "torn"),
}


def doctor_json(run):
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_undamaged_run_keeps_its_verdict_and_has_no_problems(tmp_path):
    d = diagnose_path(str(copy_run(tmp_path)))
    assert (d.verdict, d.culprit_ranks, d.problems) == ("ok", [], [])


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_completed_rank_with_lost_records_is_insufficient_not_a_hang(tmp_path, damage):
    run = copy_run(tmp_path)
    how, why = DAMAGE[damage]
    how(run)
    problems = load_path(str(run)).problems
    assert problems and all(p.startswith("rank 1:") for p in problems)
    doc = doctor_json(run)
    assert doc["verdict"] == "insufficient" and doc["culprit_ranks"] == []
    assert "rank(s) 1" in doc["summary"] and why in doc["summary"] and "no hang is claimed" in doc["summary"]
    assert "completed step 2" in doc["summary"]  # its status says completed, its log ends earlier
    assert list(doc["details"]["incomplete_ranks"]) == ["1"]
    assert doc["problems"] == problems  # the loader's problems, as report lists them


def test_the_terminal_lists_the_problems(tmp_path):
    run = copy_run(tmp_path)
    tear(run, 1)
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("insufficient")
    assert "problem while loading: rank 1: ignored a torn last line in events.jsonl" in p.stdout


def test_terminal_problems_are_capped_and_each_printed_whole():
    from reports.doctor_terminal import print_doctor_verdict
    from reports.report_terminal import CAVEATS_SHOWN

    problems = [f"rank {i}: events.jsonl: ignored {i + 2} collective records: step is beyond ±2^53 (a counter, "
                f"not a time) (first at line {100 + i}: step=9223372036854775807)" for i in range(CAVEATS_SHOWN + 2)]
    console = Console(width=70, record=True, color_system=None)
    print_doctor_verdict(Diagnosis("ok", summary="ok: fine.", problems=problems), console)
    text = " ".join(console.export_text().split())
    for p in problems[:CAVEATS_SHOWN]:
        assert f"problem while loading: {p}" in text  # wrapped at spaces, no word cut
    assert problems[CAVEATS_SHOWN] not in text
    assert "… 2 more problem(s), see --json" in text


def test_the_page_section_points_at_the_problems():
    from reports.doctor_section import render_doctor

    d = Diagnosis("insufficient", summary="insufficient: x.", problems=["rank 1: ignored a torn last line"])
    assert "The loader met 1 problem(s)" in render_doctor(SimpleNamespace(diagnosis=d))
    d.problems = []
    assert "The loader met" not in render_doctor(SimpleNamespace(diagnosis=d))


# ---- genuine hangs stay hangs -------------------------------------------------------------------
MS = 1_000_000


def hung_run(tmp_path):
    """4 ranks; seq 9 (step 3 attn) launched by 0, 1, 3 (their watchdogs fired); rank 2 stopped at seq 8 and
    was terminated (tests/unit/test_doctor.py's hang)."""
    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), run)
    t = 1_764_670_000_000_000_000 + 3_000 * MS
    for r in (0, 1, 3):
        row = {"kind": "collective", "rank": r, "step": 3, "label": "attn", "phase": "reduce", "op": "reduce_scatter",
               "bytes": 8_000_000, "dtype": "bf16", "group": "0", "group_size": 4, "seq": 9, "call_ns": t + r,
               "return_ns": t + r + 5, "wait_ns": t + 100, "wait_end_ns": None}
        write_json(run / f"rank{r}" / "watchdog.json", {"schema_version": 1, "rank": r, "world_size": 4,
                   "timeout_s": 3, "fired_ns": 1, "waiting_on": row, "inflight": [row], "last_step": 2, "stacks": {}})
        write_json(run / f"rank{r}" / "status.json", {"status": "failed", "error": "hang watchdog: waited",
                                                      "last_step": 2})
    write_json(run / "rank2" / "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)",
                                               "last_step": 2})
    return run


def test_a_genuine_hang_is_still_a_hang(tmp_path):
    d = diagnose_path(str(hung_run(tmp_path)))
    assert (d.verdict, d.culprit_ranks, d.label, d.sequence) == ("hang", [2], "attn", 9)


def test_a_killed_rank_tearing_its_last_line_is_still_the_hang(tmp_path):
    # a rank terminated mid-write may tear its last line: no damage to judge by, as its status did not complete
    run = hung_run(tmp_path)
    with open(run / "rank2" / "events.jsonl", "a") as f:
        f.write('{"kind": "collective", "rank": 2, "st')
    d = diagnose_path(str(run))
    assert any("torn" in p for p in d.problems)
    assert (d.verdict, d.culprit_ranks, d.label, d.sequence) == ("hang", [2], "attn", 9)


def test_a_hung_rank_whose_records_were_dropped_is_insufficient(tmp_path):
    # the absent launch may be one of the dropped records, whatever the rank's status
    run = hung_run(tmp_path)
    p = run / "rank2" / "events.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines()]
    recs[-1]["step"] = 2 ** 63 - 1
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and d.details["incomplete_ranks"].keys() == {"2"}
    assert "rank 2: the loader ignored 1 of its records" in d.summary


def test_a_failed_rank_whose_log_ends_before_its_status_says_is_insufficient(tmp_path):
    """A failed rank's status.json names step 2 as its last finished one, but its events.jsonl was cut
    after step 0 (a copy cut short, a disk that filled): the absence of its launches is no evidence, however
    the rank ended."""
    run = hung_run(tmp_path)
    p = run / "rank2" / "events.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps(r) + "\n" for r in recs if r.get("step", 0) <= 0))
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and d.details["incomplete_ranks"].keys() == {"2"}, d.summary
    assert "rank 2: its status.json says it finished step 2 but its events.jsonl ends at step 0" in d.summary
    # emptied: no finished step at all
    p.write_text("")
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and "its events.jsonl holds no finished step" in d.summary, d.summary


def test_the_last_finished_step_of_a_rank_without_step_records_is_its_status(tmp_path):
    """--trace off writes no step records: the evidence's last finished step is the status's `last_step`."""
    from commscope.analyze.doctor_status import last_finished_step
    from commscope.load import load_path

    run = hung_run(tmp_path)
    for r in range(4):
        p = run / f"rank{r}" / "events.jsonl"
        p.write_text("".join(x + "\n" for x in p.read_text().splitlines() if '"kind": "step"' not in x))
    trace = load_path(str(run))
    assert not len(trace.steps)
    assert [last_finished_step(trace, r) for r in range(4)] == [2, 2, 2, 2]
