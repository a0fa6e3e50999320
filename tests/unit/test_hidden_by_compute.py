"""`hidden_pct` on a run directory is the share of a collective's span covered by compute (docs/analysis.md,
"The quantities"), not 1 − its own wait / duration: a hand-built run where one collective's span is
partly computed over and partly spent waiting on another collective, with every number known."""
import pytest

from commscope.analyze import exposure
from commscope.analyze.summary import summarize
from commscope.load import load_path
from reports import report_terminal
from rundirs import T0_NS as T0, US, wall_collective as coll, write_cpu_run, write_run


def region(rank, name, a, b):
    return {"kind": "region", "rank": rank, "step": 0, "name": name, "micro_step": 0,
            "start_ns": T0 + a * US, "end_ns": T0 + b * US, "timing": "wall"}


def records(rank):
    """One step [0, 140) µs. Compute: forward [0, 40), backward [40, 100). `early` is launched at 10 µs and
    completes at 120, waited on over [100, 120); `late` is launched at 60 µs inside backward and completes
    at 130, waited on over [120, 130). So late's span of 70 µs is computed over for 40 (60 → 100), spent
    waiting on `early` for 20 and on itself for 10."""
    return [region(rank, "forward", 0, 40), region(rank, "backward", 40, 100),
            coll(rank, "early", 0, 10, 100, 120, 120), coll(rank, "late", 1, 60, 120, 130, 130),
            {"kind": "step", "rank": rank, "step": 0, "loss": 1.0, "start_ns": T0, "end_ns": T0 + 140 * US,
             "tokens": 8}]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hidden") / "run"
    write_cpu_run(d, {0: records(0), 1: records(1)})
    return load_path(str(d))


def test_hidden_is_the_span_covered_by_compute_not_the_time_not_waited_on(run):
    t = exposure.collective_table(run).set_index(["rank", "label"])
    late, early = t.loc[(0, "late")], t.loc[(0, "early")]
    assert late["duration_ns"] == 70 * US and late["exposed_ns"] == 10 * US
    assert late["hidden_ns"] == 40 * US  # backward [60, 100), not 70 − 10 = 60
    assert late["hidden_pct"] == pytest.approx(100 * 40 / 70)
    assert early["duration_ns"] == 110 * US and early["hidden_ns"] == 90 * US  # [10, 100)
    assert early["hidden_pct"] == pytest.approx(100 * 90 / 110)


def test_per_label_and_per_rank_overlap_agree(run):
    doc = summarize(run, with_hta=False)
    assert doc["labels"]["late"]["hidden_pct"] == 57.14 and doc["labels"]["early"]["hidden_pct"] == 81.82
    assert doc["labels"]["late"]["exposed_ms"] == 0.01 and doc["labels"]["early"]["exposed_ms"] == 0.02
    # the union of the spans [10, 130) is computed over for [10, 100): 90 of 120 µs. The two labels together
    # (40 + 90 of 70 + 110 µs = 72.2 %) count the 40 µs both are in flight over compute twice, the union once.
    assert doc["recorded_comm_overlap_pct_by_rank"] == {"0": 75.0, "1": 75.0}


def test_terminal_names_the_quantity(run):
    from rich.console import Console

    con = Console(width=100, record=True)
    report_terminal.print_report_summary(summarize(run, with_hta=False), con)
    text = con.export_text()
    assert "hidden %: share of the duration compute hid" in " ".join(text.split())  # wrapped as a paragraph
    assert "57.1" in text and "81.8" in text


def test_a_barrier_has_no_bandwidth_and_leaves_its_labels_totals_alone(tmp_path):
    """A barrier moves no bytes: its bandwidth is unknown (NaN, null in JSON), not 0 GB/s, which would read
    as a broken link; a label holding barriers and data collectives gets the data's bandwidth alone."""
    def barrier(rank, label, seq, call, end):
        return {**coll(rank, label, seq, call, call + 1, end, end), "op": "barrier", "bytes": 0, "dtype": None}
    # the second barrier carries 1 byte, as Kineto records c10d::barrier's dummy tensor: still no bandwidth
    recs = {r: [region(r, "forward", 0, 40), barrier(r, "sync", 0, 5, 6 + r * 4),
                {**barrier(r, "mixed", 1, 41, 45), "bytes": 1},
                coll(r, "mixed", 2, 50, 60, 70, 70),
                {"kind": "step", "rank": r, "step": 0, "loss": 1.0, "start_ns": T0, "end_ns": T0 + 140 * US,
                 "tokens": 8}] for r in (0, 1)}
    write_run(tmp_path / "run", recs, summary={"status": "completed", "backend": "gloo", "device": "cpu",
                                               "steps": 1}, meta={"backend": "gloo", "device": "cpu"})
    run = load_path(str(tmp_path / "run"))
    t = exposure.collective_table(run).set_index(["rank", "label", "seq"])
    assert t.loc[(0, "sync", 0), "transfer_ns"] == 1 * US  # rank 0's 1 µs: the last to arrive
    assert t.loc[[(0, "sync", 0), (1, "mixed", 1)], ["algbw_gbps", "busbw_gbps"]].isna().all().all()
    assert t.loc[(0, "mixed", 2), "algbw_gbps"] == pytest.approx(4000 / (20 * US))  # 4000 bytes in 20 µs
    labels = summarize(run, with_hta=False)["labels"]
    assert labels["sync"]["algbw_gbps"] is None and labels["sync"]["busbw_gbps"] is None
    assert labels["mixed"]["algbw_gbps"] == pytest.approx(0.2)  # the all_reduce's alone, not diluted


def test_collectives_ended_at_their_wait_give_no_bandwidth(tmp_path):
    """gloo's reduce_scatter_tensor gives no completion: the recorder takes its end as the wait's return and
    marks it `end_at_wait`. Waited after a 60 µs compute region, its 16 KB 'take' 60 µs: no transfer time,
    the label's bandwidth withheld with that reason; its exposed time and hidden share stand. A label with
    one measured collective keeps the bandwidth over it."""
    def rs(rank, label, seq, call, wait, end, at_wait=True):
        return {**coll(rank, label, seq, call, wait, end, end), "op": "reduce_scatter", "bytes": 16384,
                **({"end_at_wait": True} if at_wait else {})}
    recs = {r: [region(r, "forward", 0, 60), rs(r, "grads", 0, 1, 61, 62), rs(r, "mixed", 1, 63, 64, 70),
                rs(r, "mixed", 2, 71, 72, 80, at_wait=False),
                {"kind": "step", "rank": r, "step": 0, "loss": 1.0, "start_ns": T0, "end_ns": T0 + 140 * US,
                 "tokens": 8}] for r in (0, 1)}
    write_cpu_run(tmp_path / "run", recs)
    run = load_path(str(tmp_path / "run"))
    t = exposure.collective_table(run).set_index(["rank", "label", "seq"])
    assert t.loc[(0, "grads", 0), "duration_ns"] == 61 * US and t.loc[(0, "grads", 0), "exposed_ns"] == 1 * US
    assert t.loc[(0, "grads", 0), "hidden_ns"] == 59 * US  # forward [1, 60)
    assert t["transfer_ns"].loc[(slice(None), "grads", 0)].isna().all()
    assert t.loc[(0, "mixed", 2), "transfer_ns"] == 9 * US
    doc = summarize(run, with_hta=False)
    grads, mixed = doc["labels"]["grads"], doc["labels"]["mixed"]
    assert grads["busbw_gbps"] is None and grads["bandwidth_withheld"].endswith(
        "their ends are the waits' returns (the backend gives no completion for this op, e.g. gloo's "
        "reduce_scatter_tensor), so a duration includes whatever the caller did before waiting")
    assert mixed["bandwidth_withheld"] is None and mixed["algbw_gbps"] == pytest.approx(16384 / (9 * US), rel=1e-3)
    assert any(n.startswith("Bandwidth withheld for grads: their ends are the waits' returns") for n in doc["notes"])
