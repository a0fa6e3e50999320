"""The doctor on profiler traces whose rank stops mid-step (analyze.doctor_cut): a hang from Kineto traces,
found only where the trace shows it, never at a window's edge. Inputs: jobs bench/gen_job.py makes from the
real 8×H100 traces (tests/data/modded-nanogpt-8xh100), and those traces themselves."""
from __future__ import annotations

import pytest

from commscope.analyze.doctor import diagnose_trace
from commscope.load import load_path
from paths import TESTS
from scale_jobs import gen_job

H100 = TESTS / "data" / "modded-nanogpt-8xh100"


@pytest.mark.parametrize("ranks, hung", [(8, 2), (8, 3), (16, 13)])
def test_a_rank_whose_trace_stops_inside_a_step_is_the_hang(tmp_path, ranks, hung):
    truth = gen_job.generate(H100, tmp_path / "k", ranks, hang=hung)
    d = diagnose_trace(load_path(truth["job"]))
    h = truth["hang"]
    assert (d.verdict, d.culprit_ranks, d.group, d.sequence, d.step) == ("hang", [hung], h["group"], h["seq"], h["step"])
    assert d.details["last_seq"] == h["seq"] - 1
    assert "cannot tell which" in d.summary  # hung, crashed or cut short: the trace alone does not say


def test_whole_windows_and_partial_inputs_are_not_called_a_hang(tmp_path):
    assert diagnose_trace(load_path(H100)).verdict == "straggler"  # every rank has the same collectives
    truth = gen_job.generate(H100, tmp_path / "k", 8, hang=3)
    for f in (tmp_path / "k" / "job").glob("rank*.json*"):  # rank 3 left out: no cross-rank absence
        if f.name.startswith("rank3."):
            f.unlink()
    assert diagnose_trace(load_path(truth["job"])).verdict != "hang"
