"""The first screen's "Ranks to look at" starts with the doctor's culprit ranks. A hung rank causes no
measured waiting (its peers' waits never finish) and may expose nothing, so a list built from waiting
caused and exposed time alone would leave it out, beside a verdict that names it. Jobs from bench/gen_job.py
(tests/scale_jobs.py) with a planted hang, desync or straggler."""
from __future__ import annotations

from commscope.analyze.diagnosis import Diagnosis
from commscope.analyze.doctor import diagnose_trace
from commscope.analyze.report_overview import CULPRITS_LISTED, Finding, _culprits_first, highlights
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from scale_jobs import gen_job

TEMPLATE = TESTS / "data" / "cpurun-hooks-gloo2"


def ranks_listed(tmp_path, **fault) -> tuple[list, Diagnosis]:
    truth = gen_job.generate(TEMPLATE, tmp_path / "j", 12, steps=4, **fault)
    tr = load_path(truth["job"])
    d = diagnose_trace(tr, tolerate_bad_files=True)
    return highlights(summarize(tr, with_hta=False, diagnosis=d), d).ranks, d


def test_a_hung_rank_heads_the_ranks_to_look_at(tmp_path):
    ranks, d = ranks_listed(tmp_path, hang=5)
    assert d.verdict == "hang" and d.culprit_ranks == [5]
    assert ranks[0].name == "rank 5" and ranks[0].why[0].startswith("the doctor's hang culprit (")
    assert [f.name for f in ranks].count("rank 5") == 1


def test_a_desynchronized_rank_heads_the_list_and_a_listed_straggler_moves_up_once(tmp_path):
    ranks, d = ranks_listed(tmp_path, desync=7)
    assert d.verdict == "desync" and ranks[0].name == "rank 7" and ranks[0].why[0].startswith("the doctor's desync culprit")
    ranks, d = ranks_listed(tmp_path / "s", straggler=9, at_step=2, delay_ms=1500)
    assert d.verdict == "straggler" and ranks[0].name == "rank 9"
    assert ranks[0].why[0].startswith("the doctor's straggler culprit") and len(ranks[0].why) >= 3  # its own lines kept
    assert [f.name for f in ranks].count("rank 9") == 1


def test_many_culprits_take_one_line_after_the_first_few_and_other_verdicts_change_nothing():
    listed = [Finding("rank 2", 5.0, ["arrives last"]), Finding("rank 40", 1.0, ["exposed"])]
    d = Diagnosis("hang", culprit_ranks=list(range(CULPRITS_LISTED + 5)), label="attn", step=3)
    out = _culprits_first([Finding(f.name, f.exposed_ms, list(f.why)) for f in listed], d)
    assert [f.name for f in out] == ["rank 0", "rank 1", "rank 2", "5 more ranks: 3-7", "rank 40"]
    assert out[2].why == ["the doctor's hang culprit (attn, step 3)", "arrives last"]
    assert _culprits_first(listed, Diagnosis("ok")) == listed
    assert _culprits_first(listed, RuntimeError("diagnosis failed")) == listed



def test_culprits_first_leaves_its_input_as_it_was():
    listed = [Finding("rank 2", 5.0, ["arrives last"])]
    d = Diagnosis("hang", culprit_ranks=[2], label="attn", step=3)
    once, twice = _culprits_first(listed, d), _culprits_first(listed, d)
    assert once == twice and listed == [Finding("rank 2", 5.0, ["arrives last"])]
    assert once[0].why == ["the doctor's hang culprit (attn, step 3)", "arrives last"]
