"""The summary names the labels a collective queued behind (the cause of its wait), and the page's
bullets and the terminal's top-exposed table say it in plain words."""
import pytest

from rich.console import Console

from commscope.analyze.report_overview import _behind, highlights
from reports.report_terminal import print_report_summary, queued_behind_line
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS


@pytest.fixture(scope="module")
def doc():
    return summarize(load_path(str(TESTS / "data" / "cpurun-hooks-gloo2")), with_hta=False)


def test_queued_time_is_attributed_to_the_labels_at_the_head_of_the_queue(doc):
    labels = doc["labels"]
    behind = {lab: v["queued_behind_ms"] for lab, v in labels.items() if v["queued_behind_ms"]}
    assert behind == {"scalars": {"attn": pytest.approx(139.2286)}, "smear_gate": {"ve0": pytest.approx(43.6428)},
                      "lm_head": {"ve2": pytest.approx(10.3976)}}
    for lab, v in labels.items():  # the split adds up to the label's queueing, nothing lost or doubled
        assert sum(v["queued_behind_ms"].values()) == pytest.approx(v["queued_ms"], abs=1e-3)
    # every label is on both ranks here, so one per-rank mean: what a label is charged is what others
    # queued behind it
    for lab, v in labels.items():
        charged_to = sum(b.get(lab, 0.0) for b in behind.values())
        assert charged_to == pytest.approx(v["queue_charged_ms"], abs=1e-3)


def test_bullet_names_the_culprit_and_no_module(doc):
    found = {f.name: f.why for f in highlights(doc).labels}
    line = next(w for w in found["scalars"] if "queueing" in w)
    assert line == ("139.229 ms of it (100%) is queueing behind earlier collectives of its process group "
                    "(behind attn: 139.229 ms); its own transfer is exposed 0.000 ms")
    assert not any("analyze." in w for why in found.values() for w in why)


def test_several_culprits_most_first_the_rest_summed():
    assert _behind({"ve1": 0.9543, "ve0": 3.601, "ve2": 2.7154}) == (
        " (behind ve0: 3.601 ms, ve2: 2.715 ms, ve1: 0.954 ms)")
    assert _behind({"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}) == (
        " (behind a: 5.000 ms, b: 4.000 ms, c: 3.000 ms, 2 more label(s): 3.000 ms)")
    assert _behind({}) == "" and _behind(None) == "" and _behind({"a": 0.0}) == ""


def test_terminal_names_what_the_queued_share_waits_behind(doc):
    con = Console(record=True, width=200)
    print_report_summary(doc, con)
    text = con.export_text()
    assert ("queued behind (ms per rank): scalars behind attn 139.229; smear_gate behind ve0 43.643; "
            "lm_head behind ve2 10.398\n") in text
    assert text.index("Top exposed collectives") < text.index("queued behind (ms per rank)")


def test_terminal_line_names_three_labels_and_counts_the_rest():
    rows = [("x", {"queued_behind_ms": {"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}}),
            ("y", {"queued_behind_ms": {}}), ("z", {"queued_behind_ms": {"a": 0.25}}), ("w", {})]
    assert queued_behind_line(rows) == ("queued behind (ms per rank): x behind a 5.000, b 4.000, c 3.000, "
                                        "2 more labels 3.000; z behind a 0.250")
    assert queued_behind_line([("y", {"queued_behind_ms": {}}), ("w", {})]) is None
