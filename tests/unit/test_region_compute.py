"""Which regions of a run directory are compute: by name (forward, backward, update:*, compute:*) unless
the record says `"compute": true|false` (rec.region(name, compute=...)); and the report's notes on what
the records leave unknown: host work in regions that do not count (analyze.regions), collectives never
waited on through their handle."""
from __future__ import annotations

import re
import shutil

import pytest

from commscope.analyze.regions import uncounted_leaf_regions
from commscope.analyze.summary import evidence_notes, summarize
from commscope.load.rundir import load
from paths import TESTS

SRC = TESTS / "data" / "cpurun-hooks-gloo2"


def edited(tmp_path, *subs: tuple[str, str]):
    d = tmp_path / "run"
    shutil.copytree(SRC, d)
    for rank in (0, 1):
        f = d / f"rank{rank}" / "events.jsonl"
        text = f.read_text()
        for pattern, repl in subs:
            text = re.sub(pattern, repl, text)
        f.write_text(text)
    return load(str(d))


def test_the_reference_run_has_no_uncounted_leaf_region_and_no_recording_note():
    trace = load(str(SRC))
    assert len(uncounted_leaf_regions(trace)) == 0
    assert not any("Regions not counted" in n or "never waited" in n for n in evidence_notes(trace))


def test_a_renamed_leaf_region_is_named_and_compute_true_counts_it_again(tmp_path):
    base = load(str(SRC))
    renamed = edited(tmp_path, (r'"name":"update:attn"', '"name":"my_update"'))
    u = uncounted_leaf_regions(renamed)
    assert u.to_dict("records") == [{"name": "my_update", "count": 6}]  # 3 steps × 2 ranks
    assert len(renamed.compute) == len(base.compute) - 6
    note = next(n for n in evidence_notes(renamed) if n.startswith("Regions not counted as compute"))
    assert "'my_update' ×6" in note and "compute=True" in note
    flagged = edited(tmp_path / "b", (r'"name":"update:attn",', '"name":"my_update","compute":true,'))
    assert len(flagged.compute) == len(base.compute) and len(uncounted_leaf_regions(flagged)) == 0
    a, b = summarize(base, with_hta=False), summarize(flagged, with_hta=False)
    assert [s["compute_ms"] for s in a["steps"]] == [s["compute_ms"] for s in b["steps"]]


def test_compute_false_takes_a_named_region_out_and_a_non_boolean_is_a_problem(tmp_path):
    base = load(str(SRC))
    off = edited(tmp_path, (r'"name":"forward",', '"name":"forward","compute":false,'))
    assert len(off.compute) == len(base.compute) - 6 and "forward" not in set(off.compute["name"])
    bad = edited(tmp_path / "b", (r'"name":"forward",', '"name":"forward","compute":"yes",'))
    assert any("compute is not true or false" in p for p in bad.problems)
    assert len(bad.regions) == len(base.regions) - 6  # those records are left out, and said so


def test_collectives_never_waited_on_are_counted_in_a_note(tmp_path):
    t = edited(tmp_path, (r'("label":"scalars".*?)"wait_ns":\d+,"wait_end_ns":\d+', r'\1"wait_ns":null,"wait_end_ns":null'))
    note = next(n for n in evidence_notes(t) if "not been waited on" in n)
    assert note.startswith(f"6 of {len(t.collectives)} collectives had not been waited on through their handle "
                           "(handle.wait()) when the step they completed in ended")
    assert summarize(t, with_hta=False)["labels"]["scalars"]["exposed_ms"] == 0.0


def test_a_run_whose_records_hold_no_collective_points_at_its_profiler_traces(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "layout" / "standard", d)
    for f in d.glob("rank*/events.jsonl"):  # a script that labelled its collectives but never recorded them
        f.write_text("".join(x + "\n" for x in f.read_text().splitlines() if '"kind":"collective"' not in x))
    t = load(str(d))
    assert len(t.collectives) == 0 and t.config["profiler_collectives"] > 0
    note = next(n for n in evidence_notes(t) if n.startswith("No collectives"))
    assert f"profiler traces hold {t.config['profiler_collectives']} collective(s)" in note
    assert "profiler traces hold" not in " ".join(evidence_notes(load(str(SRC))))


def test_a_region_whose_launches_were_left_in_flight_holds_comm(tmp_path):
    """A hang leaves the last step's collectives in flight: they are in watchdog.json, not events.jsonl.
    The region that launched them is no leaf for that: it held communication."""
    import json

    d = tmp_path / "run"
    shutil.copytree(SRC, d)
    f = d / "rank0" / "events.jsonl"
    rows = [json.loads(ln) for ln in f.read_text().splitlines()]
    phase = next(r for r in rows if r["kind"] == "region" and r["name"] == "opt.phase1" and r["step"] == 2)
    inside = [r for r in rows if r["kind"] == "collective" and r["step"] == 2
              and phase["start_ns"] <= r["call_ns"] <= phase["end_ns"]]
    assert inside
    f.write_text("".join(json.dumps(r) + "\n" for r in rows if r not in inside))
    assert uncounted_leaf_regions(load(str(d))).to_dict("records") == [{"name": "opt.phase1", "count": 1}]
    hung = [{**r, "wait_ns": None, "end_ns": None} for r in inside]
    (d / "rank0" / "watchdog.json").write_text(json.dumps({
        "schema_version": 1, "rank": 0, "world_size": 2, "timeout_s": 10, "fired_ns": phase["end_ns"] + 10**10,
        "waiting_on": hung[0], "inflight": hung, "last_step": 1, "stacks": {}}))
    assert len(uncounted_leaf_regions(load(str(d)))) == 0
