"""compare's per-label rows charge a wait to the collective it was spent on: a later collective waited on
while an earlier one of its group was still in flight queues behind it (exposure.queue_split), and that
time is the earlier label's (`attributed_exposed_ms`), as a rank late to that label would have it read."""
import pytest

from commscope.analyze.compare_labels import run_samples
from commscope.analyze.summary import summarize
from commscope.load import load_path
from rundirs import T0_NS as T0, US, wall_collective as coll, write_run


def test_a_wait_spent_queued_behind_another_label_is_that_labels(tmp_path):
    """`ve0` is launched at 10 µs and completes at 150 (a peer was late to it); `smear` is launched at 20 and
    waited on first, over [100, 155): 50 µs of that wait is spent while ve0, ahead of it in the group's
    queue, was still in flight. Exposed: smear 55, ve0 0 (done before its own wait); attributed: ve0 50,
    smear 5. compare's samples are the attributed ones."""
    recs = {r: [{"kind": "region", "rank": r, "step": 0, "name": "forward", "micro_step": 0, "start_ns": T0,
                 "end_ns": T0 + 90 * US, "timing": "wall"},
                coll(r, "ve0", 0, 10, 155, 155, 150), coll(r, "smear", 1, 20, 100, 155, 155),
                {"kind": "step", "rank": r, "step": 0, "loss": 1.0, "start_ns": T0, "end_ns": T0 + 160 * US,
                 "tokens": 8}] for r in (0, 1)}
    write_run(tmp_path / "run", recs, summary={"status": "completed", "backend": "gloo", "device": "cpu",
                                               "steps": 1}, meta={"backend": "gloo", "device": "cpu"})
    trace = load_path(str(tmp_path / "run"))
    labels = summarize(trace, with_hta=False)["labels"]
    assert (labels["smear"]["exposed_ms"], labels["ve0"]["exposed_ms"]) == (pytest.approx(0.055), 0.0)
    assert labels["ve0"]["attributed_exposed_ms"] == pytest.approx(0.050)
    s = run_samples(trace).set_index("label")["ms"]
    assert (s["ve0"], s["smear"]) == (pytest.approx(0.050), pytest.approx(0.005))
