"""The profiler's steps (a --profile window and the step after it, its export) stay out of the report's
headline aggregates and compare's per-step samples, and the report says so; the per-step rows keep them."""
from __future__ import annotations

from pathlib import Path

import pytest

from commscope.analyze.compare_labels import STEP_LABEL, compare_labels, run_samples
from commscope.analyze.report_overview import highlights
from commscope.analyze.summary import summarize
from commscope.load import load_path
from rundirs import write_run

MS = 1_000_000
T0 = 10**18


def _ev(kind, rank, step, s, e, **kw):
    return {"kind": kind, "rank": rank, "step": step, "start_ns": T0 + int(s * MS), "end_ns": T0 + int(e * MS),
            **kw}


def run(path: Path, profile: str | None, slow_step: int | None = 2, steps: int = 6, ranks: int = 2) -> Path:
    """Steps of 100 ms: forward 0 → 40, backward 40 → 80, one all_reduce waited on 80 → 90 (exposed 10 ms),
    idle to 100; `slow_step` takes 1,000 ms (the profiler starting: idle after the wait)."""
    events = {}
    for r in range(ranks):
        lines = []
        for s in range(steps):
            o = s * 2000
            dur = 1000 if s == slow_step else 100
            lines += [_ev("region", r, s, o, o + 40, name="forward", micro_step=0, timing="wall"),
                      _ev("region", r, s, o + 40, o + 80, name="backward", micro_step=0, timing="wall"),
                      {"kind": "collective", "rank": r, "step": s, "label": "grads", "phase": "allreduce",
                       "op": "all_reduce", "bytes": 4096, "dtype": "float32", "group": "0", "group_size": ranks,
                       "seq": s, "call_ns": T0 + (o + 80) * MS, "return_ns": T0 + (o + 80) * MS + 1000,
                       "wait_ns": T0 + (o + 80) * MS, "wait_end_ns": T0 + (o + 90) * MS, "start_ns": None,
                       "end_ns": T0 + (o + 90) * MS, "timing": "wall"},
                      {"kind": "step", "rank": r, "step": s, "loss": 1.0, "start_ns": T0 + o * MS,
                       "end_ns": T0 + (o + dur) * MS}]
        events[r] = lines
    config = {"args": {"profile": profile}} if profile else {"args": {}}
    return write_run(path, events, config=config,
                     summary={"status": "completed", "backend": "gloo", "device": "cpu", "losses": [1.0] * steps,
                              "step_times_ms": [100.0] * steps})


def test_headline_leaves_the_profiler_steps_out(tmp_path):
    doc = summarize(load_path(str(run(tmp_path / "p", "2:4"))), with_hta=False)
    assert doc["profiler_steps"] == {"2": "profiler window", "3": "profiler window", "4": "profiler export"}
    assert len(doc["steps"]) == 12  # the per-step rows keep every step
    h = highlights(doc)
    # every step counted: mean (5 · 100 + 1000) / 6 = 250 ms, share 60 / 1500 = 4 %
    assert h.step_ms_mean == pytest.approx(100.0, abs=1e-3)
    assert h.exposed_pct == pytest.approx(10.0, abs=1e-3)
    assert h.steps_left_out == {2: "profiler window", 3: "profiler window", 4: "profiler export"}
    assert h.step_scope == " (over 2 ranks, steps 0–5, not 2–4: profiler window and its export; step 0 included)"
    note = [n for n in doc["notes"] if "profiler" in n]
    assert len(note) == 1
    assert note[0].startswith("Steps 2–3 (profiler window) and 4 (profiler export) are left out")
    assert "mean step 400.000 ms against 100.000 ms" in note[0]


def test_without_a_profiler_every_step_counts(tmp_path):
    doc = summarize(load_path(str(run(tmp_path / "p", None))), with_hta=False)
    assert doc["profiler_steps"] == {} and not [n for n in doc["notes"] if "profiler" in n]
    h = highlights(doc)
    assert h.step_ms_mean == pytest.approx(250.0, abs=1e-3) and h.steps_left_out == {}
    assert h.step_scope == " (over 2 ranks, steps 0–5, step 0 included)"


def test_a_run_profiled_throughout_keeps_its_steps(tmp_path):
    doc = summarize(load_path(str(run(tmp_path / "p", "0:5"))), with_hta=False)
    h = highlights(doc)
    assert h.steps_left_out == {} and h.step_ms_mean == pytest.approx(250.0, abs=1e-3)
    assert [n for n in doc["notes"] if n.startswith("Every step is the profiler's")]


def test_compare_step_time_leaves_the_profiler_steps_out(tmp_path):
    base = run(tmp_path / "base", None, slow_step=None)
    cand = run(tmp_path / "cand", "2:4")
    samples = run_samples(load_path(str(cand)))
    assert sorted(samples["step"].unique()) == [1, 5]  # 0: warm-up; 2–4: the profiler's
    assert samples.attrs["left_out"] == {2: "profiler window", 3: "profiler window", 4: "profiler export"}
    df = compare_labels([[run_samples(load_path(str(r)))] for r in (base, cand)], ["base", "cand"])
    step = df[df["label"] == STEP_LABEL].iloc[0]
    assert step["cand_ms"] == pytest.approx(100.0, abs=1e-3) and step["delta_ms"] == pytest.approx(0.0, abs=1e-3)
    assert df.attrs["notes"] == ["cand: steps 2–3 (profiler window) and 4 (profiler export) give no sample "
                                 "(the profiler's start-up and trace export)"]


def test_the_page_and_terminal_headline_say_which_steps_the_mean_leaves_out(tmp_path, monkeypatch):
    from bad_inputs import invoke

    path = run(tmp_path / "p", "2:4")
    page = tmp_path / "p.html"
    code, out, err = invoke(["report", str(path), "--no-hta", "-o", str(page)])
    assert code == 0, err
    html = page.read_text()
    assert ("mean step 100.000 ms (over 2 ranks, steps 0–5, not 2–4: profiler window and its export; step 0 "
            "included)") in html


def test_compare_says_which_steps_of_which_run_gave_no_sample(tmp_path, monkeypatch):
    import json

    from bad_inputs import invoke

    base, cand = run(tmp_path / "base", None, slow_step=None), run(tmp_path / "cand", "2:4")
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = invoke(["compare", str(base), str(cand)])
    assert code == 0, err
    notes = [ln for ln in out.splitlines() if ln.startswith("note: ")]
    # the CI's definition, then the one run that gave no sample at some steps
    assert len(notes) == 2 and notes[0].startswith("note: CI: Welch's t interval")
    assert notes[1].startswith("note: cand: steps 2–3 (profiler window) and 4 (profiler export) give no sample")
    code, out, err = invoke(["compare", str(base), str(cand), "--json"])
    doc = json.loads(out)
    assert doc["labels_notes"] == [notes[1].removeprefix("note: ")]
    assert doc["labels_ci"].startswith(notes[0].removeprefix("note: "))  # the terminal wraps the line
    step = next(r for r in doc["labels"] if r["label"] == STEP_LABEL)
    assert step["cand_ms"] == pytest.approx(100.0, abs=1e-6)  # the 1,000 ms profiled step left out
