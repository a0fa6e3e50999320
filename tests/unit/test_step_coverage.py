"""The report's note on ranks whose records cover fewer steps than the others' (analyze.step_coverage): one
rank's events.jsonl cut halfway must not pass for a rank that communicated less (docs/analysis.md, "Ranks
whose records cover fewer steps")."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd

from commscope.analyze.step_coverage import coverage, coverage_notes
from paths import ROOT
from report_trace import make_trace, write_run_dir

TAIL = (" A rank's own figures (its step rows, its exposed time per label) count only the steps its records hold, "
        "and each label's means over ranks (count, bytes and exposed time per rank) average ranks over different "
        "steps: a rank with fewer steps shows less communication and less exposed time for that reason alone.")


def steps_frame(by_rank: dict[int, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": r, "step": s} for r, steps in by_rank.items() for s in steps],
                        columns=["rank", "step"])


def test_one_rank_cut_halfway_is_named_with_the_steps_it_covers():
    f = steps_frame({0: list(range(40)), 1: list(range(20)), 2: list(range(40)), 3: list(range(40))})
    assert coverage_notes(f, [0, 1, 2, 3]) == [
        "Rank 1's records cover steps 0-19 only (20 of 40); the other ranks' records cover steps 0-39." + TAIL +
        " `--steps 0:20` gives figures over the steps every rank has (steps 0-19)."]


def test_several_short_ranks_are_grouped_by_what_they_cover_fewest_first():
    f = steps_frame({0: list(range(10)), 1: list(range(5)), 2: list(range(3, 10)), 3: list(range(5))})
    cov = coverage(f, [0, 1, 2, 3])
    assert cov.short() == {(0, 1, 2, 3, 4): [1, 3], (3, 4, 5, 6, 7, 8, 9): [2]}
    assert cov.common() == [3, 4]
    assert coverage_notes(f, [0, 1, 2, 3]) == [
        "Ranks 1,3' records cover steps 0-4 only (5 of 10); rank 2's records cover steps 3-9 only (7 of 10); "
        "the other ranks' records cover steps 0-9." + TAIL + " `--steps 3:5` gives figures over the steps every "
        "rank has (steps 3-4)."]


def test_steps_no_rank_shares_in_one_range_are_said_so():
    f = steps_frame({0: [0, 1, 2, 3], 1: [0, 1, 3], 2: [0, 2, 3]})
    note = coverage_notes(f, [0, 1, 2])[0]
    assert note.startswith("Rank 1's records cover steps 0-1,3 only (3 of 4); rank 2's records cover steps 0,2-3 "
                           "only (3 of 4); the other ranks' records cover steps 0-3.")
    assert note.endswith(" The steps every rank has (steps 0,3) are not one range: no single `--steps` gives them.")
    f = steps_frame({0: [0, 1], 1: [2, 3]})
    assert coverage_notes(f, [0, 1])[0].endswith("the ranks together cover steps 0-3." + TAIL +
                                                 " No step is held by every rank.")


def test_a_present_rank_without_steps_is_short_and_equal_ranks_need_no_note():
    f = steps_frame({0: [0, 1], 1: [0, 1]})
    assert coverage_notes(f, [0, 1]) == []
    assert coverage_notes(steps_frame({}), [0, 1]) == []  # no steps at all: another note says so
    assert coverage_notes(f, [0, 1, 2])[0].startswith("Rank 2's records cover no step (0 of 2);")
    # step -1 (records outside every step) is no step of a rank's coverage
    assert coverage_notes(steps_frame({0: [-1, 0, 1], 1: [0, 1]}), [0, 1]) == []


def cut_run(tmp_path):
    """A 4-rank run directory of 6 steps whose rank 1's events.jsonl ends after step 2."""
    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=tuple(range(6)), style="run"), run)
    p = run / "rank1" / "events.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= 2))
    return run


def report(run, *args):
    """`commscope report RUN --no-hta ARGS` run in the run's parent folder, where a page without -o is written."""
    p = subprocess.run([sys.executable, "-m", "commscope", "report", str(run), "--no-hta", *args],
                       capture_output=True, text=True, timeout=120, cwd=run.parent,
                       env={**os.environ, "COLUMNS": "400", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_report_json_and_terminal_name_the_rank_whose_records_stop_early(tmp_path):
    run = cut_run(tmp_path)
    note = ("Rank 1's records cover steps 0-2 only (3 of 6); the other ranks' records cover steps 0-5." + TAIL +
            " `--steps 0:3` gives figures over the steps every rank has (steps 0-2).")
    doc = json.loads(report(run, "--json"))
    assert note in doc["notes"]
    # what the note warns of: rank 1's per-rank exposed time counts half the steps of the others'
    by_rank = doc["labels"]["attn"]["exposed_ms_by_rank"]
    assert by_rank["1"] * 2 == by_rank["0"] == by_rank["2"] == by_rank["3"]
    assert sorted({s["step"] for s in doc["steps"] if s["rank"] == 1}) == [0, 1, 2]
    assert f"note: {note}" in " ".join(report(run).split())
    # over the steps every rank has, the ranks agree and nothing is short
    doc = json.loads(report(run, "--json", "--steps", "0:3"))
    assert not any("records cover" in n for n in doc["notes"])
    by_rank = doc["labels"]["attn"]["exposed_ms_by_rank"]
    assert by_rank["1"] == by_rank["0"] == by_rank["2"] == by_rank["3"]


def test_the_page_shows_the_note_under_the_headline(tmp_path):
    run = cut_run(tmp_path)
    out = tmp_path / "page.html"
    report(run, "-o", str(out))
    page = out.read_text()
    assert "Rank 1&#x27;s records cover steps 0-2 only (3 of 6); the other ranks&#x27; records cover steps 0-5." in page
