"""The HTML report on a hand-built trace with known numbers: interval helpers, page validity and
self-containment, section list, and that the per-label table shows exactly summarize()'s numbers."""
from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pytest

from commscope.analyze.exposure import collective_table, compute_sets
from commscope.util.atomic import check_output
from commscope.commands._shared import parse_steps, resolve_steps
from commscope.errors import UserError
from commscope.analyze.intervals import assign_lanes
from report_trace import T, US, make_trace
from reports.page import render_html
from commscope.analyze.report_context import report_context
from commscope.analyze.timeline_bars import exposed_intervals, merge_intervals, select_window, timeline_bars
from reports.sections import SECTIONS, Section
from reports.timeline import timeline_figure


class PageParser(HTMLParser):
    """Collects what the tests check: external references, scripts, headings, table cells by table id."""

    def __init__(self):
        super().__init__()
        self.external, self.scripts, self.h2, self.tables = [], [], [], {}
        self._stack, self._table, self._row, self._text, self._in_script = [], None, None, None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append((tag, a[key]))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
        if tag == "h2":
            self._text = ""
        if tag == "table":
            self._table = a.get("id")
            self.tables.setdefault(self._table, [])
        if tag == "tr" and self._table is not None:
            self._row = []
        if tag in ("td", "th") and self._row is not None:
            self._row.append([a.get("data-value"), ""])
        self._stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False
        if tag == "h2":
            self.h2.append(self._text)
            self._text = None
        if tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        if tag == "table":
            self._table = None
        if self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        if self._text is not None:
            self._text += data
        if self._row:
            self._row[-1][1] += data


def parse(page: str) -> PageParser:
    p = PageParser()
    p.feed(page)
    p.close()
    return p


SUMMARY = {
    "ranks": 2,
    "overlap_pct_by_rank": {"0": 61.25, "1": 60.0},
    "labels": {
        "attn": {"op": "reduce_scatter", "count": 4, "bytes": 32_000_000, "mean_ms": 0.2, "exposed_ms": 0.1,
                 "overlap_pct": 50.0, "busbw_gbps": 20.0},
        "mlp": {"op": "all_gather", "count": 4, "bytes": 16_000_000, "mean_ms": 0.08, "exposed_ms": 0.08,
                "overlap_pct": 0.0, "busbw_gbps": 25.0},
    },
    "stragglers": [{"rank": 1, "last_arrivals": 6, "wait_caused_ms": 0.06}],
    "steps": [{"rank": 0, "step": 0, "compute_ms": 0.75, "exposed_comm_ms": 0.18, "idle_ms": 0.07}],
    "hta": {"status": "skipped", "reason": "no GPU trace", "overlap_pct_by_rank": {"0": 61.0}},
}


def test_merge_intervals_merges_overlaps_and_small_gaps():
    s = np.array([0.0, 5, 20, 21, 100])
    e = np.array([10.0, 8, 21, 30, 110])
    ms, me, n = merge_intervals(s, e, max_blocks=100)  # no gap merging: only overlap/touching
    assert ms.tolist() == [0, 20, 100] and me.tolist() == [10, 30, 110] and n.tolist() == [2, 2, 1]
    ms, me, n = merge_intervals(s, e, max_blocks=2)  # gap = 110/2 = 55: the 10→20 gap merges, 30→100 doesn't
    assert ms.tolist() == [0, 100] and me.tolist() == [30, 110] and n.tolist() == [4, 1]


def test_assign_lanes_is_minimal_and_non_overlapping():
    s = [0, 1, 2, 10, 10, 3]
    e = [5, 3, 4, 12, 11, 10]
    lanes = assign_lanes(s, e)
    assert lanes.max() + 1 == 3  # max depth: [0,5) [1,3) [2,4) overlap pairwise
    for k in set(lanes.tolist()):
        iv = sorted((s[i], e[i]) for i in range(len(s)) if lanes[i] == k)
        assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:]))


def test_exposed_intervals_device_and_wait():
    tr = make_trace()
    c0 = tr.collectives[(tr.collectives["rank"] == 0) & (tr.collectives["step"] == 0)]
    ex = exposed_intervals(c0, compute_sets(tr)[0], T)
    # within 256 ns: the resolution of epoch ns held in float64 (its ulp there is 256 ns)
    assert len(ex[0]) == 1 and ex[0][0] == pytest.approx((400 * US, 450 * US), abs=256)  # gap fwd→bwd only
    assert len(ex[1]) == 1 and ex[1][0] == pytest.approx((820 * US, 900 * US), abs=256)  # fully exposed
    run = make_trace(style="run")
    c0 = run.collectives[(run.collectives["rank"] == 0) & (run.collectives["step"] == 0)]
    ex = exposed_intervals(c0, compute_sets(run)[0], T)
    assert [len(x) for x in ex] == [1, 1, 0]  # waits; scalars was never waited on
    assert ex[0][0] == pytest.approx((480 * US, 500 * US), abs=256)
    assert ex[1][0] == pytest.approx((880 * US, 900 * US), abs=256)


@pytest.mark.parametrize("style", ["kineto", "run"])
def test_drawn_exposure_equals_analyzer_exposure(style):
    tr = make_trace(style=style)
    table = collective_table(tr)
    drawn = []
    for rank in tr.ranks:
        sel = (tr.collectives["rank"] == rank).to_numpy()
        drawn += [sum(b - a for a, b in x) for x in exposed_intervals(tr.collectives[sel], compute_sets(tr)[rank])]
    order = np.argsort(tr.collectives["rank"].to_numpy(), kind="stable")
    assert np.allclose(np.array(drawn), table["exposed_ns"].to_numpy()[order], atol=1e3)


def test_select_window_default_middle_and_explicit():
    tr = make_trace(steps=tuple(range(10)))
    assert select_window(tr, None) == (4, 7)
    assert select_window(tr, (2, 10)) == (2, 10)
    assert select_window(make_trace(), None) is None


def test_timeline_rows_and_lanes():
    fig = timeline_figure(timeline_bars(make_trace(), window=(1, 2)))
    rows = list(fig.layout.yaxis.categoryarray)
    # scalars overlaps mlp on rank 0 and 1 → a second comm lane per rank; hooks row per rank
    assert rows == list(reversed(["r0 compute", "r0 comm", "r0 comm 2", "r0 hooks",
                                  "r1 compute", "r1 comm", "r1 comm 2", "r1 hooks"]))
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert names == ["compute", "attn", "mlp", "scalars", "exposed", "hook attn"]
    attn = next(t for t in fig.data if t.name == "attn")
    # window = step 1 only: one running bar per rank, in ms since window start (T + 1 ms); rank 0 launched
    # 10 µs before the start → a thin queued line, rank 1 launched right at the start → none
    assert [x for x in attn.x if not np.isnan(x)] == pytest.approx([0.3, 0.5, 0.3, 0.5])
    queued = [t for t in fig.data if t.legendgroup == "attn" and t.mode == "lines" and t.showlegend is False]
    assert len(queued) == 1 and [x for x in queued[0].x if not np.isnan(x)] == pytest.approx([0.29, 0.3])


def test_page_is_self_contained_with_sections_and_exact_label_numbers():
    tr = make_trace()
    page = render_html(report_context(tr, SUMMARY))
    p = parse(page)
    assert p.external == []
    assert any("Plotly" in s and len(s) > 1_000_000 for s in p.scripts)  # plotly.js embedded once
    assert sum(len(s) > 1_000_000 for s in p.scripts) == 1
    assert p.h2 == ["Diagnosis (commscope doctor)", "Overview", "Timeline", "Collectives by label", "Skew and stragglers", "Step breakdown",
                    "HTA side by side", "Run configuration"]
    header, *rows = p.tables["labels"]
    assert [c[1] for c in header][:8] == ["label", "op", "count", "bytes", "mean_ms", "exposed_ms", "overlap_pct",
                                          "busbw_gbps"]
    cols = [c[1] for c in header]
    got = {r[0][1]: {cols[i]: (float(r[i][0]) if r[i][0] is not None else r[i][1]) for i in range(1, len(cols))}
           for r in rows}
    assert got == SUMMARY["labels"]
    strag = p.tables["stragglers"]
    assert float(strag[1][2][0]) == 0.06
    assert "no GPU trace" in page and "scatter_order" in page


def test_failing_section_is_reported_in_place(monkeypatch):
    def boom(ctx):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr("reports.page.SECTIONS", SECTIONS + [Section("bad", "Broken", 60, boom)])
    page = render_html(report_context(make_trace(), SUMMARY))
    assert "Broken failed: RuntimeError: analysis exploded" in page
    assert "Run configuration" in page


def test_resolve_steps_closes_open_ends_and_refuses_empty():
    tr = make_trace(steps=(3, 4, 5))
    assert resolve_steps(tr, (None, None)) == (3, 6) and resolve_steps(tr, (4, None)) == (4, 6)
    assert resolve_steps(tr, None) is None
    with pytest.raises(UserError, match="selects none"):
        resolve_steps(tr, (7, 9))


def test_parse_steps_and_output_checks(tmp_path):
    assert parse_steps("3:5") == (3, 5) and parse_steps("4") == (4, 5)
    assert parse_steps(":5") == (None, 5) and parse_steps("2:") == (2, None) and parse_steps(None) is None
    for bad in ("a:b", "5:3", "3:3", "1:2:3"):
        with pytest.raises(UserError):
            parse_steps(bad)
    with pytest.raises(UserError, match="inside the input directory"):
        check_output(tmp_path / "r.html", tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        check_output(tmp_path / "nope" / "r.html", tmp_path / "x")


def test_terminal_summary_orders_labels_by_exposed_time():
    from rich.console import Console

    from reports.report_terminal import print_report_summary

    con = Console(record=True, width=120)
    print_report_summary(SUMMARY, con)
    text = con.export_text()
    assert text.index("attn") < text.index("mlp")  # 0.1 ms exposed before 0.08 ms
    assert "Overlap by rank" in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in text.splitlines() if line.count("│") > 2}
    assert rows["0"] == ["61.2"] and rows["1"] == ["60.0"]  # one decimal, even when it is .0
    assert rows["attn"][-2:] == ["50.0", "20"] and rows["mlp"][-2:] == ["0.0", "25"]  # overlap %, busbw


def test_dense_compute_is_decimated_per_rank():
    tr = make_trace(steps=(0,))
    many = tr.compute.iloc[[0] * 20_000].copy()
    many["start_ns"] = T + np.arange(20_000) * 50  # 20k kernels of 20 ns, 30 ns apart
    many["end_ns"] = many["start_ns"] + 20
    tr.compute = many
    fig = timeline_figure(timeline_bars(tr, max_compute_per_rank=100))
    comp = next(t for t in fig.data if t.name == "compute")
    n_blocks = int(np.isnan(comp.x).sum())
    assert 0 < n_blocks <= 2 * 100  # two ranks, at most 100 blocks each


def test_step_selector_zooms_to_each_step():
    fig = timeline_figure(timeline_bars(make_trace(steps=(0, 1, 2))))
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["all steps", "step 0", "step 1", "step 2"]
    lo, hi = buttons[2].args[0]["xaxis.range"]  # step 1 = [1, 2) ms after the first step start, 2 % padding
    assert (lo, hi) == pytest.approx((0.98, 2.02))


def test_undefined_overlap_is_explained_not_left_blank():
    from commscope.analyze.summary import undefined_overlap_note

    assert undefined_overlap_note({"overlap_pct_by_rank": {"0": 12.5, "1": 3.0}}) is None
    nccl1 = undefined_overlap_note({"overlap_pct_by_rank": {"0": None}, "world_size": 1, "backend": "nccl"})
    assert "rank(s) 0" in nccl1 and "NCCL at world size 1" in nccl1
    gloo = undefined_overlap_note({"overlap_pct_by_rank": {"0": 1.0, "3": None}, "world_size": 4, "backend": "gloo"})
    assert "rank(s) 3" in gloo and "NCCL" not in gloo


def test_timeline_bands_the_time_between_steps():
    """A yellow band spans each gap between two steps of the first rank, and only gaps (contiguous steps:
    none)."""
    from reports.timeline import GAP_COLOR

    def bands(fig):
        return [(sh.x0, sh.x1) for sh in fig.layout.shapes if sh.type == "rect" and sh.fillcolor == GAP_COLOR]

    assert bands(timeline_figure(timeline_bars(make_trace()))) == []
    tr = make_trace(steps=(0, 1, 2))
    late = tr.steps["step"] == 1
    tr.steps.loc[late, "start_ns"] += 200 * US  # step 1 starts 0.2 ms after step 0 ended
    assert bands(timeline_figure(timeline_bars(tr))) == [pytest.approx((1.0, 1.2))]
