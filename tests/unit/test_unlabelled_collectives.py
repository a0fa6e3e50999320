"""Collectives without a label (a run directory's `"label": null`, as any training script that records
a collective without naming it writes) are counted by every per-label figure, under labels.NO_LABEL: the
report's labels, its placement rows and compare's per-label samples. Dropping them (pandas' groupby
leaves out missing keys) would make their exposed time vanish from the tables without a word."""
from __future__ import annotations

import shutil

import pytest

from commscope.analyze import exposure
from commscope.analyze.labels import NO_LABEL
from commscope.analyze.summary import summarize
from commscope.load.rundir import load
from paths import TESTS

SRC = TESTS / "data" / "cpurun-hooks-gloo2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("nolabel") / "run"
    shutil.copytree(SRC, d)
    for rank in (0, 1):
        f = d / f"rank{rank}" / "events.jsonl"
        f.write_text(f.read_text().replace('"label":"scalars"', '"label":null'))
    return summarize(load(str(SRC)), with_hta=False), summarize(load(str(d)), with_hta=False), d


def test_the_unlabelled_collectives_are_one_label_with_the_figures_they_had_when_named(runs):
    named, unnamed, _ = runs
    assert "scalars" not in unnamed["labels"] and set(unnamed["labels"]) == set(named["labels"]) - {"scalars"} | {NO_LABEL}
    got, want = unnamed["labels"][NO_LABEL], named["labels"]["scalars"]
    for key in ("op", "count", "bytes", "mean_ms", "exposed_ms", "exposed_ms_by_rank", "queued_ms", "hidden_pct"):
        assert got[key] == want[key], key
    assert got["count"] == 6  # 3 steps × 2 ranks
    assert sum(p["label"] == NO_LABEL for p in unnamed["placement"]) == \
        sum(p["label"] == "scalars" for p in named["placement"]) > 0


def test_collective_table_names_them_and_leaves_named_labels_alone(runs):
    *_, d = runs
    trace = load(str(d))
    assert trace.collectives["label"].isna().sum() == 6  # the loaded frame keeps the record as it is
    table = exposure.collective_table(trace)
    assert (table["label"] == NO_LABEL).sum() == 6 and table["label"].notna().all()
    assert (table["label"] == "attn").sum() == (trace.collectives["label"] == "attn").sum()


def test_a_label_of_two_sizes_reports_a_size_one_of_its_calls_moved(runs, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(runs[2], d)
    # the unlabelled all_reduces move 36 bytes (3 a rank); rank 0's move 12: the two middle sizes differ
    f = d / "rank0" / "events.jsonl"
    f.write_text("".join(x.replace('"bytes":36', '"bytes":12') + "\n" if '"label":null' in x else x + "\n"
                         for x in f.read_text().splitlines()))
    # a median taken as the mean of the middle two (24) is a size no call moved
    assert summarize(load(str(d)), with_hta=False)["labels"][NO_LABEL]["bytes"] == 12


def test_the_page_draws_them_under_the_name_the_tables_use(runs):
    from commscope.analyze.report_context import report_context
    from commscope.analyze.timeline_bars import timeline_bars
    from reports.page import render_html
    from reports.timeline import label_colors

    *_, d = runs
    trace = load(str(d))
    bars = timeline_bars(trace)
    # one name per label: the colour map sorts them, so a missing label (NaN) among strings would not sort
    assert NO_LABEL in bars.labels and all(isinstance(x, str) for x in bars.labels)
    assert "nan" not in bars.labels and "None" not in bars.labels
    # the 6 unlabelled collectives and the hook firings of the parameter whose label the copy removed
    assert sum(x == NO_LABEL for x in bars.labels) == 6 + trace.hooks["label"].isna().sum() > 6
    assert set(label_colors(bars.labels)) == set(summarize(trace, with_hta=False)["labels"]) | \
        set(trace.hooks["label"].dropna()) | {NO_LABEL}
    failed: list[str] = []
    page = render_html(report_context(trace, summarize(trace, with_hta=False), with_layout=False), failed)
    assert failed == []
    assert f'"name":"{NO_LABEL}"' in page.replace(": ", ":")
