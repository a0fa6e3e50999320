"""Counts in the right number, thousands separators, an unknown heatmap said in words, and the doctor's
verdict pointed at (not repeated) under its label."""
from types import SimpleNamespace

from commscope.analyze.report_context import report_context
from commscope.analyze.report_overview import highlights
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from reports.overview_section import render_heatmap, render_summary
from reports.tables import counted

HOST_ONLY = TESTS / "data" / "hta-testdata" / "distributed_info_unavailable"


def test_counted_puts_the_noun_in_the_right_number():
    assert [counted(1, "rank"), counted(2, "rank"), counted(0, "step"), counted(None, "label")] == [
        "1 rank", "2 ranks", "0 steps", "? labels"]


def test_a_one_rank_host_only_page_counts_in_the_singular_and_says_the_heatmap_has_no_known_cell():
    tr = load_path(str(HOST_ONLY))
    ctx = report_context(tr, summarize(tr, with_hta=False), with_layout=False)
    assert '<p class="headline">1 rank · 1 step · ' in render_summary(ctx)
    heatmap = render_heatmap(ctx)
    assert "No cell has a known exposed time." in heatmap and "0 … 0.000 ms" not in heatmap


def test_bullets_use_thousands_separators_and_point_at_the_verdict():
    summary = {"ranks": 2, "steps": [], "stragglers": [{"rank": 1, "times_last": 5, "wait_caused_ms": 4177.149,
                                                       "score": 0.9}],
               "labels": {"attn": {"op": "all_reduce", "count": 8, "exposed_ms": 3210.131,
                                   "exposed_ms_by_rank": {"0": 3580.315, "1": 2825.265}}}}
    diagnosis = SimpleNamespace(verdict="straggler", summary="straggler: rank 1 made the others wait " * 5,
                                label="attn")
    h = highlights(summary, diagnosis)
    why = h.labels[0].why
    assert "most exposed on rank 0 (3,580.315 ms; least 2,825.265 ms)" in why
    assert "the doctor's verdict (straggler) names this label" in why
    assert not any("made the others wait" in w for w in why)  # the verdict's text heads the page once
    assert "the other ranks wait 4,177.149 ms for it in total (90% of all such waiting)" in h.ranks[0].why


def test_one_file_per_rank_is_listed_once_in_the_run_configuration():
    """`files` names each rank's trace; `rank_files` appears only where a rank has several (profiling cycles)."""
    tr = load_path(str(TESTS / "data" / "hta-testdata" / "trace_filter"))
    assert set(tr.config["files"]) == {0, 1} and "rank_files" not in tr.config


def test_an_unknown_queued_share_is_the_dash_every_unknown_cell_shows():
    from reports.report_terminal import queued_pct
    from reports.tables import fmt

    assert queued_pct({"queued_ms": None, "exposed_ms": 1.0}) == fmt(None) == "–"
    assert queued_pct({"queued_ms": 0.0, "exposed_ms": 0.0}) == "–" and queued_pct({}) == "–"
    assert queued_pct({"queued_ms": 0.5, "exposed_ms": 2.0}) == "25.0"


def test_a_straggler_verdict_points_at_the_label_of_most_waiting_and_at_its_longest_wait():
    """The doctor's label/step/sequence are its culprit's longest wait; most of the waiting may lie on another
    label (many shorter waits): the first screen names each where it belongs, and the culprit line both."""
    from commscope.analyze.diagnosis import Diagnosis

    summary = {"ranks": 2, "steps": [], "stragglers": [{"rank": 1, "times_last": 6, "wait_caused_ms": 88.9,
                                                       "score": 0.7}],
               "labels": {"ag": {"op": "all_gather", "count": 8, "exposed_ms": 12.1},
                          "rs": {"op": "reduce_scatter", "count": 8, "exposed_ms": 6.0}}}
    d = Diagnosis("straggler", [1], label="rs", step=11, sequence=8,
                  details={"waiting_by_label_ms": {"ag": 52.62, "rs": 36.28}}, summary="straggler: rank 1")
    h = highlights(summary, d)
    why = {f.name: f.why for f in h.labels}
    assert "the doctor's straggler culprit caused most of its waiting here (52.6 of 88.9 ms)" in why["ag"]
    assert "the longest wait the doctor's straggler culprit caused is here (step 11, seq 8)" in why["rs"]
    assert not any("longest" in w for w in why["ag"]) and not any("most of its" in w for w in why["rs"])
    assert h.ranks[0].name == "rank 1"
    assert h.ranks[0].why[0] == ("the doctor's straggler culprit (most of its waiting at ag; the longest at rs, "
                                 "step 11)")
    # one label holding both: one line each, the culprit line as before
    d = Diagnosis("straggler", [1], label="ag", step=11, sequence=8,
                  details={"waiting_by_label_ms": {"ag": 80.0, "rs": 8.9}}, summary="straggler: rank 1")
    h = highlights(summary, d)
    assert h.ranks[0].why[0] == "the doctor's straggler culprit (ag, step 11)"


def test_ranks_ranked_by_waiting_are_marked_unjudged_beside_an_insufficient_verdict():
    """A trace without steps: the table ranks who made whom wait, the doctor cannot judge a straggler; the
    first screen must not read as naming one."""
    from commscope.analyze.diagnosis import Diagnosis

    summary = {"ranks": 2, "steps": [], "stragglers": [{"rank": 1, "times_last": 6, "wait_caused_ms": 226.1,
                                                       "score": 0.84}], "labels": {}}
    d = Diagnosis("insufficient", [], summary="insufficient: … stragglers cannot be judged: no step left to judge.")
    [rank1] = highlights(summary, d).ranks
    assert rank1.why[-1] == ("measured, not judged: the doctor could not judge stragglers (its verdict above says "
                             "why)")
    ok = Diagnosis("ok", [], summary="ok")
    assert not any("not judged" in w for w in highlights(summary, ok).ranks[0].why)
