"""A real CPU run of the reference trainer (`commscope run`, 2 gloo ranks, 2 steps): the loader and
summarize() reproduce, per label, what the recorder wrote in events.jsonl."""
import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from commscope.analyze.summary import summarize
from commscope.load import load_path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("cpu") / "run")
    r = subprocess.run([sys.executable, "-m", "commscope", "run", "--nproc", "2", "--preset", "tiny",
                        "--steps", "2", "--out", d], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return d


def events(d, rank):
    with open(os.path.join(d, f"rank{rank}", "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow
def test_per_label_numbers_match_recorded_events(run_dir):
    doc = summarize(load_path(run_dir), with_hta=False)
    assert doc["ranks"] == 2 and doc["source"] == "run" and doc["problems"] == []
    recs = {r: [e for e in events(run_dir, r) if e["kind"] == "collective"] for r in (0, 1)}
    want = collections.defaultdict(lambda: {"count": [], "exposed": [], "wake": [], "dur": [], "bytes": []})
    for r, cs in recs.items():
        per = collections.defaultdict(list)
        for c in cs:
            per[c["label"]].append(c)
        for lab, cl in per.items():
            want[lab]["count"].append(len(cl))
            # exposed: blocked from wait() until the collective completed (end_ns, the completion callback);
            # the rest of the wait is waking up (wake_delay_ms), host scheduling rather than communication
            want[lab]["exposed"].append(sum(max(min(c["wait_end_ns"], c["end_ns"]) - c["wait_ns"], 0)
                                            if c["wait_ns"] is not None else 0 for c in cl) / 1e6)
            want[lab]["wake"].append(sum(c["wait_end_ns"] - max(min(c["wait_end_ns"], c["end_ns"]), c["wait_ns"])
                                         if c["wait_ns"] is not None else 0 for c in cl) / 1e6)
            want[lab]["dur"] += [c["end_ns"] - c["call_ns"] for c in cl]
            want[lab]["bytes"] += [c["bytes"] for c in cl]
    assert set(doc["labels"]) == set(want) and len(want) == 13
    for lab, w in want.items():
        got = doc["labels"][lab]
        assert got["count_per_rank"] == pytest.approx(np.mean(w["count"])) and got["count"] == sum(w["count"])
        assert got["exposed_ms"] == pytest.approx(np.mean(w["exposed"]), abs=1e-4)
        assert got["wake_delay_ms"] == pytest.approx(np.mean(w["wake"]), abs=1e-4)
        assert got["mean_ms"] == pytest.approx(np.mean(w["dur"]) / 1e6, abs=1e-4)
        assert got["bytes"] == pytest.approx(np.median(w["bytes"]))
    # every (group, seq) is seen on both ranks with the same op and bytes
    keys = [{(c["group"], c["seq"]): (c["op"], c["bytes"]) for c in recs[r]} for r in (0, 1)]
    assert keys[0] == keys[1]
    assert len(doc["steps"]) == 4 and all(s["compute_ms"] > 0 for s in doc["steps"])


@pytest.mark.slow
def test_step_boundaries_match_the_recorded_step_times(run_dir):
    """A real 2-rank CPU run: each step's gap_before_ms is its start minus the previous step's end, as
    recorded in events.jsonl, and the start delay is non-negative and within the step."""
    doc = summarize(load_path(run_dir), with_hta=False)
    assert [b["rank"] for b in doc["step_boundaries"]] == [0, 1]
    for r in (0, 1):
        st = sorted((e for e in events(run_dir, r) if e["kind"] == "step"), key=lambda e: e["step"])
        got = {s["step"]: s for s in doc["steps"] if s["rank"] == r}
        assert got[st[0]["step"]]["gap_before_ms"] is None
        for prev, cur in zip(st, st[1:]):
            row = got[cur["step"]]
            assert row["gap_before_ms"] == pytest.approx((cur["start_ns"] - prev["end_ns"]) / 1e6, abs=1e-4)
            assert 0 <= row["start_delay_ms"] <= (cur["end_ns"] - cur["start_ns"]) / 1e6
