"""`report --json` says which ranks the page draws first: `representative_ranks_culprits_first`, the
representative ranks with the doctor's culprits first, from the same verdict and in the same order as the
page's timeline at scale (analyze.representative.culprits_first)."""
from __future__ import annotations

import json
import re

from cli_result import run_main
from commscope.analyze.diagnosis import Diagnosis
from commscope.analyze.representative import culprits_first
from commscope.analyze.summary import SCHEMA_VERSION
from paths import TESTS
from scale_jobs import gen_job


def test_report_json_lists_the_ranks_the_page_draws_in_its_order(tmp_path, capsys):
    """A 40-rank job whose rank 33 hangs at step 10: no number picks rank 33 (it made nobody wait in a
    finished step), the doctor blames it, and both the document and the page put it first."""
    job = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "hang", 40, steps=12, hang=33,
                           at_step=10)["job"]
    code, out = run_main(capsys, "report", job, "--json", "--no-hta")
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["schema_version"] == SCHEMA_VERSION == 13
    reps = doc["representative_ranks"]
    first = doc["representative_ranks_culprits_first"]
    assert 33 not in [r["rank"] for r in reps]
    assert first[0] == {"rank": 33, "why": ["the doctor's hang culprit"]}
    assert first[1:] == reps  # the representative ranks follow, unchanged, in their order

    page = tmp_path / "page.html"
    code, out = run_main(capsys, "report", job, "--no-hta", "-o", page)
    assert code == 0, out.err
    html = page.read_text()
    note = re.search(r'<p class="note" id="timeline-drawn">(.*?)</p>', html).group(1)
    drawn = [int(r) for r in re.findall(r"<b>r(\d+)</b>", note)]
    assert drawn == [r["rank"] for r in first]


def test_report_json_of_a_healthy_run_names_no_culprit(capsys):
    code, out = run_main(capsys, "report", TESTS / "data" / "cpurun-hooks-gloo2", "--json", "--no-hta")
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["representative_ranks_culprits_first"] == doc["representative_ranks"]
    assert [r["rank"] for r in doc["representative_ranks"]] != []


def test_culprits_first_without_a_verdict_or_representatives():
    reps = [{"rank": 5, "why": ["median total step time"]}, {"rank": 2, "why": ["least total step time"]}]
    assert culprits_first(reps, [2, 5, 9], None) == reps
    assert culprits_first(reps, [2, 5, 9], RuntimeError("no verdict")) == reps  # a failed diagnosis blames no one
    assert culprits_first([], [4, 3, 9], None) == [{"rank": 3, "why": ["lowest rank"]}]
    crash = Diagnosis(verdict="crash", culprit_ranks=[9, 2])
    assert culprits_first(reps, [2, 5, 9], crash) == [
        {"rank": 9, "why": ["the doctor's crash culprit"]},
        {"rank": 2, "why": ["the doctor's crash culprit", "least total step time"]},
        {"rank": 5, "why": ["median total step time"]}]
