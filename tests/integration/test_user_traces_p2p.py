"""A user's own profiled job with point-to-point ops (examples/pipeline_profile.py: pipeline send/recv,
all_to_all_single, all_reduce; torch.distributed.run, gloo, 4 ranks): a send or recv is not numbered with
its group's collectives, so the collectives stay matched across ranks (no false desync), all_to_all's size
is its input's, and a rank slow in every step is found. Real processes and real Kineto traces."""
from __future__ import annotations

from pathlib import Path

import pytest

from commscope.analyze.summary import summarize
from commscope.load import load_path
from commscope.pipeline import diagnose_path
from paths import ROOT
from torchrun import torchrun

pytestmark = pytest.mark.slow
NUMEL = 1024  # the example's --numel: float32 elements a message carries
ACTIVE = 4


def _traces(out: Path, *extra: str) -> Path:
    proc = torchrun(ROOT / "examples" / "pipeline_profile.py", out, "--numel", str(NUMEL), "--active", str(ACTIVE),
                    *extra, nproc=4, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_point_to_point_ops_leave_the_collectives_matched(tmp_path):
    traces = _traces(tmp_path / "pp")
    trace = load_path(str(traces))
    c = trace.collectives
    coll = c[c["group"] == "0"]
    # all_to_all then all_reduce in each profiled step, the same op at each number on every rank
    assert len(coll) == 4 * 2 * ACTIVE
    per_seq = coll.groupby("seq")["op"].agg(lambda s: sorted(set(s)))
    assert per_seq.tolist() == [["all_to_all"], ["all_reduce"]] * ACTIVE
    assert set(coll.groupby("seq")["rank"].nunique()) == {4}
    # all_to_all moves its input, numel × world float32 elements, once (not output + input)
    assert set(coll.loc[coll["op"] == "all_to_all", "bytes"]) == {NUMEL * 4 * 4}
    # stages 0 and 3 send or receive once a step, stages 1 and 2 both
    p2p = c[c["group"] != "0"]
    assert sorted(p2p.groupby("rank").size().items()) == [(0, ACTIVE), (1, 2 * ACTIVE), (2, 2 * ACTIVE), (3, ACTIVE)]
    assert set(p2p["op"]) == {"send", "recv"} and set(p2p["bytes"]) == {NUMEL * 4}
    notes = summarize(trace)["notes"]
    assert any(n.startswith(f"{6 * ACTIVE} point-to-point ops (send, recv) are not matched to their peers") for n in notes)
    # that note says why they have no bandwidth: no "withheld" note counts them as collectives missing members
    assert not [n for n in notes if n.startswith("Bandwidth withheld")], notes
    d = diagnose_path(str(traces))
    assert d.verdict == "ok", d.summary


def test_a_stage_slow_in_every_step_is_a_straggler(tmp_path):
    traces = _traces(tmp_path / "slow", "--slow-rank", "2", "--slow-ms", "200")
    d = diagnose_path(str(traces))
    assert (d.verdict, d.culprit_ranks, d.label) == ("straggler", [2], "allreduce"), d.summary
    # the sleep is most of each step, so its waiting is about the median step the bar is: under it in every
    # step (a steady lag, medium) or over it in some (persistent, high), depending on the machine's noise
    assert d.confidence in ("medium", "high")
    if d.confidence == "medium":
        assert d.details["steady_under_bar"]["rank"] == 2
