"""A label's share of the step time counts only its exposed time inside the steps: collectives launched
before the first profiled step or after the last spend no step time (summary `exposed_in_steps_ms`)."""
import pytest

from commscope.analyze.report_overview import highlights
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS


@pytest.fixture(scope="module")
def h100():
    # 8 ranks, steps 10-11; 96 all_gather and 93 reduce_scatter kernels run before the first profiled step
    return summarize(load_path(str(TESTS / "data" / "modded-nanogpt-8xh100")), with_hta=False)


def test_in_step_exposure_leaves_out_the_collectives_outside_every_step(h100):
    labels = h100["labels"]
    assert labels["all_gather"]["exposed_ms"] == pytest.approx(1.6592)
    assert labels["all_gather"]["exposed_in_steps_ms"] == 0.0 and labels["reduce_scatter"]["exposed_in_steps_ms"] == 0.0
    for lab in ("_allgather_base", "_reduce_scatter_base"):  # launched inside steps 10-11: all of it
        assert labels[lab]["exposed_in_steps_ms"] == labels[lab]["exposed_ms"]
    # the in-step parts add up to the per-step rows' exposed communication (per rank)
    per_rank = sum(s["exposed_comm_ms"] for s in h100["steps"]) / h100["ranks"]
    assert sum(v["exposed_in_steps_ms"] for v in labels.values()) == pytest.approx(per_rank, abs=1e-3)


def test_a_label_outside_every_step_gets_no_share_of_the_step_time(h100):
    why = {f.name: f.why for f in highlights(h100).labels}
    assert why["_allgather_base"][0] == "14.5% of the step time per rank is spent waiting on this all_gather"
    assert why["_reduce_scatter_base"][0] == "7.2% of the step time per rank is spent waiting on this reduce_scatter"
    assert why["all_gather"][0] == ("all of it outside every step (launched before the first step or after the "
                                    "last): not part of the step time")
    assert not any("% of the step time" in w for w in why["all_gather"])
    # the labels' shares add up to the headline's
    assert highlights(h100).exposed_pct == pytest.approx(21.7, abs=0.05)


def test_a_label_partly_outside_the_steps_says_how_much():
    steps = [{"rank": 0, "step": 0, "step_ms": 100.0, "exposed_comm_ms": 6.0}]
    label = {"op": "all_reduce", "count": 3, "exposed_ms": 10.0, "exposed_in_steps_ms": 6.0}
    why = highlights({"ranks": 1, "steps": steps, "labels": {"x": label}}).labels[0].why
    assert why[0] == ("6.0% of the step time per rank is spent waiting on this all_reduce "
                      "(6.000 ms inside the steps; 4.000 ms outside every step)")
    # a document from before exposed_in_steps_ms: its exposed time, as it reads
    old = {k: v for k, v in label.items() if k != "exposed_in_steps_ms"}
    why = highlights({"ranks": 1, "steps": steps, "labels": {"x": old}}).labels[0].why
    assert why[0] == "10.0% of the step time per rank is spent waiting on this all_reduce"
