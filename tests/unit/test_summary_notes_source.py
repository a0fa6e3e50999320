"""The report's notes speak of the input it read: a run directory has step records, not ProfilerStep
annotations, and a run of the reference trainer that ended before its first collective is not told to
call rec.collective."""
from __future__ import annotations

import json

from commscope.analyze.summary import summarize
from commscope.load import load_path
from report_trace import make_trace, write_run_dir


def _run_without(tmp_path, kinds):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1), steps=(0, 1), style="run"), path)
    for r in (0, 1):
        p = path / f"rank{r}" / "events.jsonl"
        rows = [ln for ln in p.read_text().splitlines() if json.loads(ln)["kind"] not in kinds]
        p.write_text("".join(ln + "\n" for ln in rows))
    return summarize(load_path(str(path)), with_hta=False)["notes"]


def test_a_run_without_steps_says_no_rank_finished_a_step(tmp_path):
    notes = _run_without(tmp_path, {"step"})
    assert "No step records (no rank finished a step): per-step breakdowns and step gaps are empty." in notes
    assert not any("ProfilerStep" in n for n in notes)


def test_a_run_without_collectives_says_it_may_have_ended_before_one(tmp_path):
    notes = _run_without(tmp_path, {"collective", "step"})
    said = next(n for n in notes if n.startswith("No collectives in this trace"))
    assert said.startswith("No collectives in this trace (no collective records in events.jsonl: the run ended "
                           "before its first collective, or its script records none (rec.collective records one))")


def test_collectives_the_loader_dropped_are_not_said_to_be_absent(tmp_path):
    """A gloo trace whose every timestamp is absurd (1e308): the loader drops its events, a problem says
    so, and the note does not claim the job ran no collectives."""
    from paths import TESTS

    for r in (0, 1):
        doc = json.loads((TESTS / "data" / "gloo2" / f"rank{r}.json").read_text())
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] = 1e308
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    trace = load_path(str(tmp_path))
    assert len(trace.collectives) == 0 and any("153 cpu op event(s) with a non-finite" in str(p) for p in trace.problems)
    said_dropped = sum(int(str(p).split(": ")[-1].split()[0]) for p in trace.problems if "event(s) with a" in str(p))
    assert trace.config["events_left_out"] == said_dropped >= 2 * 153
    said = next(n for n in summarize(trace, with_hta=False)["notes"] if n.startswith("No collectives in this trace"))
    assert said.endswith("The loader left out events it could not read (see the problems): collectives among them "
                         "are not counted.")
    notes = _run_without(tmp_path / "clean", {"collective"})
    assert not any("left out events" in n for n in notes)


def _gpu_note(tmp_path, props) -> str:
    from paths import TESTS

    doc = json.loads((TESTS / "data" / "gloo2" / "rank0.json").read_text())
    if props is None:
        del doc["deviceProperties"]
    else:
        doc["deviceProperties"] = props
    tmp_path.mkdir()
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    return next(n for n in summarize(load_path(str(tmp_path)), with_hta=False)["notes"]
                if n.startswith("No GPU activity"))


def test_a_trace_without_device_events_says_what_its_device_list_shows(tmp_path):
    """Kineto writes the GPUs the process saw (an empty list on a CPU job): the note says CPU-only only when
    that list is there and empty, and does not guess when the field is missing."""
    assert _gpu_note(tmp_path / "cpu", []).startswith("No GPU activity (a CPU-only trace: the process saw no GPU)")
    assert _gpu_note(tmp_path / "host", [{"id": 0, "name": "NVIDIA H100"}, {"id": 1, "name": "NVIDIA H100"}]) \
        .startswith("No GPU activity (the trace holds no device events (host side only; the process saw 2 GPU(s))")
    assert _gpu_note(tmp_path / "unsaid", None).startswith(
        "No GPU activity (the trace has no deviceProperties to say whether the process saw a GPU: a CPU-only job, "
        "or a GPU job's host side)")
