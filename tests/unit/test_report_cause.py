"""The report's first screen names the label that causes the exposed time when the most exposed one only
queued behind it, and says which steps its straggler totals cover."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from commscope.analyze.report_overview import cause, highlights
from commscope.analyze.summary import summarize
from commscope.load import load_path
from rundirs import write_run

MS = 1_000_000
T0 = 10**18


def _coll(seq, label, call, end, wait, wait_end, op="all_reduce"):
    return {"kind": "collective", "rank": 0, "step": 0, "label": label, "phase": "reduce", "op": op,
            "bytes": 1024, "dtype": "float32", "group": "0", "group_size": 1, "seq": seq,
            "call_ns": T0 + int(call * MS), "return_ns": T0 + int(call * MS) + 1000, "wait_ns": T0 + int(wait * MS),
            "wait_end_ns": T0 + int(wait_end * MS), "start_ns": None, "end_ns": T0 + int(end * MS), "timing": "wall"}


def straggler_run(tmp_path):
    """ve0 (delayed: runs 0 → 100) is waited on after it completed, so it is exposed 0 ms; smear_gate,
    launched behind it in the same group, is waited on from 10 to its end at 102: exposed 92 ms, of which
    90 ms queued behind ve0 and 2 ms its own."""
    lines = [_coll(0, "ve0", 0, 100, 160, 160.5, op="reduce_scatter"), _coll(1, "smear_gate", 1, 102, 10, 102),
             {"kind": "step", "rank": 0, "step": 0, "loss": 1.0, "start_ns": T0 - 20 * MS, "end_ns": T0 + 170 * MS}]
    return write_run(tmp_path / "s", {0: lines})


def test_the_cause_of_the_exposed_time_is_named_beside_its_victim(tmp_path):
    doc = summarize(load_path(str(straggler_run(tmp_path))), with_hta=False)
    lab = doc["labels"]
    assert list(lab)[0] == "smear_gate" and lab["smear_gate"]["exposed_ms"] == pytest.approx(92, abs=1e-3)
    assert lab["ve0"]["exposed_ms"] == 0 and lab["ve0"]["attributed_exposed_ms"] == pytest.approx(90, abs=1e-3)
    c = cause(doc)
    assert c is not None and c.name == "ve0" and c.exposed_ms == pytest.approx(90, abs=1e-3)
    want = ("most of it is caused by ve0 (90.000 ms per rank attributed: its own exposure 0.000 ms plus the "
            "waits queued behind it 90.000 ms)")
    assert c.why == [want]
    h = highlights(doc)
    assert h.cause == c
    assert h.labels[0].name == "smear_gate" and h.labels[0].why[1] == want


def test_no_cause_line_when_the_most_exposed_label_is_its_own_cause():
    summary = {"labels": {"attn": {"exposed_ms": 50.0, "own_exposed_ms": 50.0, "queue_charged_ms": 10.0,
                                   "attributed_exposed_ms": 60.0},
                          "mlp": {"exposed_ms": 10.0, "own_exposed_ms": 0.0, "queued_ms": 10.0,
                                  "queued_behind_ms": {"attn": 10.0}, "attributed_exposed_ms": 0.0}}}
    assert cause(summary) is None
    assert highlights(summary).cause is None


def test_the_stragglers_total_says_which_steps_it_covers():
    steps = [{"rank": r, "step": s, "step_ms": 100.0, "exposed_comm_ms": 1.0} for r in (0, 1) for s in range(6)]
    summary = {"ranks": 2, "steps": steps, "labels": {},
               "stragglers": [{"rank": 1, "times_last": 5, "wait_caused_ms": 1519.71, "score": 0.97}]}
    diagnosis = SimpleNamespace(verdict="straggler", summary="straggler", label=None,
                                details={"judged_steps": [1, 2, 3, 4, 5]})
    why = highlights(summary, diagnosis).ranks[0].why
    assert why[1] == ("the other ranks wait 1,519.710 ms for it in total over all steps 0–5 (97% of all such "
                      "waiting; the doctor's totals count only the steps it judges, 1–5, in which a rank was over its "
                      "straggler bar)")
    ok = SimpleNamespace(verdict="ok", summary="ok", label=None, details={})
    why = highlights({**summary, "steps_selected": [2, 6]}, ok).ranks[0].why
    assert why[1] == ("the other ranks wait 1,519.710 ms for it in total over the selected steps 0–5 (97% of "
                      "all such waiting; the doctor's totals count only the steps it judges in which a rank was over "
                      "its straggler bar)")
    # beside a crash, or without a verdict, there are no straggler totals of the doctor's to tell apart
    crash = SimpleNamespace(verdict="crash", summary="crash", label=None, details={}, culprit_ranks=[0], step=3)
    for d in (crash, None):
        why = next(f for f in highlights(summary, d).ranks if f.name == "rank 1").why
        assert why[1] == "the other ranks wait 1,519.710 ms for it in total over all steps 0–5 (97% of all such waiting)"


def test_the_terminal_names_the_cause_under_the_table(tmp_path, monkeypatch):
    from bad_inputs import invoke

    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = invoke(["report", str(straggler_run(tmp_path)), "--no-hta", "-o", str(tmp_path / "p.html")])
    assert code == 0, err
    flat = " ".join(out.split())
    assert ("smear_gate: most of it is caused by ve0 (90.000 ms per rank attributed: its own exposure 0.000 ms "
            "plus the waits queued behind it 90.000 ms)") in flat
