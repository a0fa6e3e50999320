"""The HTML report on a hand-built trace with known numbers: interval helpers, page validity and
self-containment, section list, and that the per-label table shows exactly summarize()'s numbers."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest

from commscope.analyze.exposure import collective_table, compute_sets
from commscope.util.outputs import check_output
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
            self._row.append([a.get("data-value") or a.get("data-key"), ""])
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


def value(c) -> float | str:
    """A parsed cell's exact value: its data-value, else its text (which then reads back exactly)."""
    if c[0] is not None:
        return float(c[0])
    try:
        return float(c[1].replace(",", ""))
    except ValueError:
        return c[1]


def parse(page: str) -> PageParser:
    p = PageParser()
    p.feed(page)
    p.close()
    return p


SUMMARY = {
    "ranks": 2,
    "duration_basis": "device kernel (trace)",
    "hta_comm_overlap_pct_by_rank": {"0": 61.25, "1": 60.0},
    "device_comm_overlap_pct_by_rank": {"0": 48.5, "1": 60.04},
    "labels": {
        "attn": {"op": "reduce_scatter", "count": 4, "bytes": 32_000_000, "mean_ms": 0.2, "exposed_ms": 0.1,
                 "hidden_pct": 50.0, "busbw_gbps": 20.0},
        "mlp": {"op": "all_gather", "count": 4, "bytes": 16_000_000, "mean_ms": 0.08, "exposed_ms": 0.08,
                "hidden_pct": 0.0, "busbw_gbps": 25.0},
    },
    "stragglers": [{"rank": 1, "last_arrivals": 6, "wait_caused_ms": 0.06}],
    "steps": [{"rank": 0, "step": 0, "compute_ms": 0.75, "exposed_comm_ms": 0.18, "idle_ms": 0.07}],
    "hta": {"status": "skipped", "reason": "no GPU trace", "hta_comm_overlap_pct_by_rank": {"0": 61.0}},
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


def test_select_window_around_the_step_a_verdict_names():
    tr = make_trace(steps=tuple(range(10)))
    assert select_window(tr, None, focus=5) == (4, 7)
    assert select_window(tr, None, focus=0) == (0, 3)
    assert select_window(tr, None, focus=9) == (7, 10)
    assert select_window(tr, None, focus=12) == (7, 13)  # a step no rank finished: drawn up to it
    assert select_window(tr, (2, 4), focus=9) == (2, 4)  # an explicit window wins


def test_timeline_rows_and_lanes():
    from reports.timeline import BAR, comm_row_span

    fig = timeline_figure(timeline_bars(make_trace(), window=(1, 2)))
    # one compute row per stream, one comm row per rank: lanes live inside the comm row
    assert list(fig.layout.yaxis.ticktext) == ["r0 compute s7", "r0 comm", "r1 compute s7", "r1 comm"]
    names = [t.name for t in fig.data if t.showlegend is not False]
    # hooks share their label's legend entry
    assert names == ["compute", "attn", "mlp", "scalars", "exposed (hatched)", "one call across ranks"]
    hook = next(t for t in fig.data if t.name == "hook attn")
    assert hook.legendgroup == "attn" and hook.marker.color == next(t for t in fig.data if t.name == "attn").marker.color
    attn = next(t for t in fig.data if t.name == "attn")
    # window = step 1 only: one bar per rank, in ms since window start (T + 1 ms), 0.2 ms long, hover anywhere
    assert list(attn.base) == pytest.approx([0.3, 0.3]) and list(attn.x) == pytest.approx([0.2, 0.2])
    assert attn.type == "bar" and attn.orientation == "h" and "%{customdata[5]:.3f}" in attn.hovertemplate
    # customdata: rank, step, seq, bytes, running, exposed; rank 0 launched 10 µs before the start
    cd = np.asarray(attn.customdata)
    assert cd[:, 0].tolist() == [0, 1] and cd[:, 5] == pytest.approx([0.05, 0.05])
    assert [t.split("<br>")[1] for t in attn.hovertext] == ["launch to start 0.010 ms", "launch to start 0.000 ms"]
    # scalars overlaps mlp: the comm row splits into two lanes, each half the row's bar thickness
    mlp, scalars = (next(t for t in fig.data if t.name == n) for n in ("mlp", "scalars"))
    assert set(np.asarray(mlp.width).round(4)) == {round(BAR * comm_row_span(2) / 2 * 0.9, 4)}
    assert np.all(np.asarray(mlp.y) != np.asarray(scalars.y))
    # the exposed overlay: hatched, no outline (it would blacken short bars), hover passes through to the bar below
    ex = next(t for t in fig.data if t.name == "exposed (hatched)")
    assert ex.marker.pattern.shape == "x" and ex.marker.line.width == 0 and ex.hoverinfo == "skip"
    # attn's gap and mlp whole; scalars runs inside mlp's span, whose stall it is (counted once, exposure.unshared_starts)
    assert sum(ex.x) == pytest.approx(2 * (0.05 + 0.08), abs=1e-6)
    comp = next(t for t in fig.data if t.name == "compute")
    assert any("forward ×1" in t for t in comp.text) and any("backward ×1" in t for t in comp.text)
    flows = next(t for t in fig.data if t.name == "one call across ranks")
    assert flows.visible == "legendonly" and int(np.isnan(np.asarray(flows.x)).sum()) == 3  # 3 calls linked


def test_page_is_self_contained_with_sections_and_exact_label_numbers():
    import base64
    import gzip

    from reports.page import PLOTLY_JS

    tr = make_trace()
    page = render_html(report_context(tr, SUMMARY))
    p = parse(page)
    assert p.external == []
    # plotly.js embedded once: the basic bundle, gzip + base64, well under the full bundle's 4.8 MB
    bundles = [s for s in p.scripts if len(s) > 100_000]
    assert len(bundles) == 1 and len(bundles[0]) < 600_000
    assert gzip.decompress(base64.b64decode(bundles[0])) == PLOTLY_JS.read_bytes()
    assert len(page) < 700_000
    assert p.h2[:3] == ["Summary", "Exposed communication by rank and step", "Timeline"]
    assert p.h2[3:] == ["Diagnosis (commscope doctor)", "Collectives by label", "Skew and stragglers", "Step breakdown",
                        "HTA side by side", "Run facts and communication overlap by rank", "Run configuration"]
    assert page.count("<details") == 7  # everything after the timeline is collapsed
    header, *rows = p.tables["labels-table"]
    assert [c[0] for c in header][:8] == ["label", "op", "count", "bytes", "mean_ms", "exposed_ms", "hidden_pct",
                                          "busbw_gbps"]
    assert [c[1] for c in header][:6] == ["Label", "Op", "Calls (all ranks)", "Bytes per call", "Mean duration (ms)",
                                          "Exposed per rank (ms)"]
    cols = [c[0] for c in header]
    got = {r[0][1]: {cols[i]: value(r[i]) for i in range(1, len(cols))} for r in rows}
    assert got == SUMMARY["labels"]
    strag = p.tables["stragglers-table"]
    assert value(strag[1][2]) == 0.06
    assert "no GPU trace" in page and "scatter_order" in page
    assert "mean duration: device kernel (trace)" in page  # the duration's basis, read from the summary
    header, *rows = p.tables["overlap-by-rank"]  # HTA's rule beside the device-only number, one row per rank
    assert [c[0] for c in header] == ["rank", "hta_comm_overlap_pct", "device_comm_overlap_pct"]
    assert [c[1] for c in header][1:] == ["Comm overlap, HTA's rule (%)", "Comm overlap, device only (%)"]
    assert [[value(c) for c in r[1:]] for r in rows] == [[61.25, 48.5], [60.0, 60.04]]


def test_plotly_bundle_matches_plotly_py():
    """The inlined bundle reads the figure JSON plotly.py writes: same plotly.js version."""
    from plotly.offline import get_plotlyjs_version

    from reports.page import PLOTLY_JS

    head = PLOTLY_JS.read_text(encoding="utf-8")[:200]
    assert f"plotly.js (basic - minified) v{get_plotlyjs_version()}" in head


def test_summary_and_heatmap_on_the_first_screen(tmp_path):
    from commscope.analyze.summary import summarize
    from commscope.load import load_path
    from report_trace import write_run_dir

    write_run_dir(make_trace(style="run"), tmp_path / "run")
    tr = load_path(tmp_path / "run")
    doc = summarize(tr, with_hta=False)
    ctx = report_context(tr, doc)
    page = render_html(ctx)
    # the most exposed label first, with its why; then the ranks × steps heatmap
    assert page.index('id="summary"') < page.index('id="heatmap"') < page.index('id="timeline"')
    top = page[page.index('id="top-labels"'):]
    assert top.index("attn") < top.index("mlp") and "compute hides" in top
    hm = ctx.heatmap
    assert hm.ranks == [0, 1] and hm.columns == [(0, 0), (1, 1)]
    want = {(s["rank"], s["step"]): s["exposed_comm_ms"] for s in doc["steps"]}
    assert hm.exposed_ms.tolist() == [[want[(r, s)] for s in (0, 1)] for r in (0, 1)]
    # each cell opens its rank's step on the timeline axis (ms since the window start)
    assert hm.window_ms[1][1] == pytest.approx((1.0, 2.0))
    assert page.count('class="cell"') == 4 and 'data-x0="1.0000" data-x1="2.0000"' in page
    cells = re.findall(r'data-value="([^"]+)" data-step-ms="([^"]+)"', page)
    assert [float(v) for v, _ in cells] == [want[(r, s)] for r in (0, 1) for s in (0, 1)]  # plain numbers for JS


def test_heatmap_bins_long_runs_and_marks_steps_outside_the_timeline():
    from commscope.analyze.report_overview import heatmap

    steps = [{"rank": r, "step": s, "exposed_comm_ms": float(s), "step_ms": 10.0} for r in (0, 1) for s in range(10)]
    tr = make_trace(steps=tuple(range(10)))
    bars = timeline_bars(tr, window=(4, 7))
    hm = heatmap({"steps": steps}, tr, bars, max_cols=4)
    assert hm.columns == [(0, 2), (3, 5), (6, 8), (9, 9)]
    assert hm.exposed_ms[0].tolist() == [1.0, 4.0, 7.0, 9.0]  # mean per step of each bin
    assert all(w is None for w in hm.window_ms[0])  # no bin lies wholly inside steps 4..6
    hm = heatmap({"steps": steps}, tr, bars)
    assert [w is not None for w in hm.window_ms[0]] == [s in (4, 5, 6) for s in range(10)]


def test_number_formats_and_headers():
    from reports.tables import fmt, humanize

    assert fmt(11751, "pid") == "11751" and fmt(11751.0, "pid") == "11751" and fmt(11751, "bytes") == "11.8 kB"  # byte sizes: tables.byte_size
    assert fmt(1.07e-06) == "<0.001" and fmt(0.001) == "0.001" and fmt(15.0) == "15.000" and fmt(15) == "15"
    assert fmt(1765622428292846145, "start_ns") == "1765622428292846145"
    assert humanize("gap_median_ms") == "Gap median (ms)" and humanize("hidden_pct") == "Hidden by compute (%)"
    assert humanize("sum (us)") == "Sum (µs)" and humanize("host_pct") == "Host time (% of wall)"


def test_palette_tells_13_labels_apart():
    from reports.timeline import COMPUTE_COLOR, EXPOSED_COLOR, label_colors

    labels = [f"l{i}" for i in range(13)]
    colors = label_colors(labels)
    assert len(set(colors.values())) == 13 and not {COMPUTE_COLOR, EXPOSED_COLOR} & set(colors.values())

    def rgb(c):
        return np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)

    vals = [rgb(c) for c in colors.values()]
    closest = min(np.linalg.norm(a - b) for i, a in enumerate(vals) for b in vals[i + 1:])
    assert closest > 40  # no two near-identical hues (lm_head/ve1/ve2 were three magentas)


def test_failing_section_is_reported_in_place(monkeypatch):
    def boom(ctx):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr("reports.page.SECTIONS", SECTIONS + [Section("bad", "Broken", 60, boom)])
    failed = []
    page = render_html(report_context(make_trace(), SUMMARY), failed)
    assert "Broken failed: RuntimeError: analysis exploded" in page
    assert "Run configuration" in page
    assert "Broken: RuntimeError: analysis exploded" in failed


def test_a_failing_section_is_said_on_stderr_too(monkeypatch, tmp_path):
    """The page shows the error in the section's place, exit code 0; the terminal's reader is told."""
    import shutil

    from bad_inputs import invoke
    from paths import TESTS

    def boom(ctx):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr("reports.page.SECTIONS", SECTIONS + [Section("bad", "Broken", 60, boom)])
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    code, _, err = invoke(["report", str(run), "-o", str(tmp_path / "p.html"), "--no-hta"])
    assert code == 0
    assert ("commscope: warning: a section of the page failed, Broken: RuntimeError: analysis exploded (the "
            "rest of the page is whole; please report this with the input)") in err


def test_resolve_steps_closes_open_ends_and_refuses_empty():
    tr = make_trace(steps=(3, 4, 5))
    assert resolve_steps(tr, (None, None)) == (3, 6) and resolve_steps(tr, (4, None)) == (4, 6)
    assert resolve_steps(tr, None) is None
    with pytest.raises(UserError, match="selects none"):
        resolve_steps(tr, (7, 9))


def test_parse_steps_and_output_checks(tmp_path):
    assert parse_steps("3:5") == (3, 5) and parse_steps("4") == (4, 5)
    assert parse_steps(":5") == (None, 5) and parse_steps("2:") == (2, None) and parse_steps(None) is None
    assert parse_steps(":") is None and parse_steps(" : ") is None  # both ends open: no range at all
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
    assert "hidden %" in text and "mean ms: device kernel (trace)" in text
    assert "Communication overlap by rank" in text and "HTA's rule %" in text and "device only %" in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in text.splitlines() if line.count("│") > 2}
    # HTA's rule beside the device-only number, one decimal, even when it is .0
    assert rows["0"] == ["61.2", "48.5"] and rows["1"] == ["60.0", "60.0"]
    # the labels table has no outer edge (so it fits 100 columns): its cells are the whole line's
    labels = {c[0]: c[1:] for c in ([x.strip() for x in line.split("│")] for line in text.splitlines()
                                    if line.count("│") == 7)}
    assert labels["attn"][-2:] == ["50.0", "20.0"] and labels["mlp"][-2:] == ["0.0", "25.0"]  # hidden %, busbw (3 digits)
    assert "host-side launch ops" in text


def test_terminal_summary_says_what_applies_without_device_kernels():
    """A CPU run has neither HTA's rule nor the device-only number: the terminal shows the recorded spans'
    overlap and says why the other two are absent."""
    from rich.console import Console

    from reports.report_terminal import print_report_summary

    cpu = {k: v for k, v in SUMMARY.items() if not k.endswith("comm_overlap_pct_by_rank")}
    cpu.update(duration_basis="launch to completion (run directory)",
               recorded_comm_overlap_pct_by_rank={"0": 29.22, "1": 25.77})
    con = Console(record=True, width=160)
    print_report_summary(cpu, con)
    text = con.export_text()
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in text.splitlines() if line.count("│") > 2}
    assert rows["0"] == ["29.2"] and rows["1"] == ["25.8"] and "recorded spans %" in text
    assert "HTA's rule %" not in text and "HTA's rule and the device-only overlap do not apply" in text
    assert "mean ms: launch to completion (run directory)" in text


def test_dense_compute_is_decimated_per_rank():
    tr = make_trace(steps=(0,))
    many = tr.compute.iloc[[0] * 20_000].copy()
    many["start_ns"] = T + np.arange(20_000) * 50  # 20k kernels of 20 ns, 30 ns apart
    many["end_ns"] = many["start_ns"] + 20
    tr.compute = many
    fig = timeline_figure(timeline_bars(tr, max_compute_per_rank=100))
    comp = next(t for t in fig.data if t.name == "compute")
    n_blocks = len(comp.base)
    assert 0 < n_blocks <= 2 * 100  # two ranks, at most 100 blocks each
    assert sum(int(t.split(" kernel(s)")[0].split(": ")[-1]) for t in comp.text) == 20_000  # none lost (all on rank 0)


def test_step_selector_zooms_to_each_step():
    fig = timeline_figure(timeline_bars(make_trace(steps=(0, 1, 2))))
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["all steps (0–2)", "step 0", "step 1", "step 2"]
    lo, hi = buttons[2].args[0]["xaxis.range"]  # step 1 = [1, 2) ms after the first step start, 2 % padding
    assert (lo, hi) == pytest.approx((0.98, 2.02))


def test_undefined_overlap_is_explained_not_left_blank():
    from commscope.analyze.summary import undefined_overlap_note

    assert undefined_overlap_note({"hta_comm_overlap_pct_by_rank": {"0": 12.5, "1": 3.0},
                                   "device_comm_overlap_pct_by_rank": {"0": 10.0, "1": 3.0}}) is None
    nccl1 = undefined_overlap_note({"hta_comm_overlap_pct_by_rank": {"0": None},
                                    "device_comm_overlap_pct_by_rank": {"0": None}, "world_size": 1, "backend": "nccl"})
    assert "rank(s) 0:" in nccl1 and "NCCL at world size 1" in nccl1 and "(HTA's rule and device only)" in nccl1
    gloo = undefined_overlap_note({"recorded_comm_overlap_pct_by_rank": {"0": 1.0, "3": None}, "world_size": 4,
                                   "backend": "gloo"})
    assert "rank(s) 3:" in gloo and "NCCL" not in gloo and "(recorded spans)" in gloo
    # HTA's rule leaves out the last step: a rank can have device-only overlap and none by HTA's rule
    last_only = undefined_overlap_note({"hta_comm_overlap_pct_by_rank": {"0": 5.0, "1": None},
                                        "device_comm_overlap_pct_by_rank": {"0": 5.0, "1": 7.5}})
    assert last_only.startswith("HTA's rule is undefined for rank(s) 1 where the device-only overlap is not")
    assert "leaves out the last profiled step" in last_only and "no communication time" not in last_only


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


def test_a_page_over_its_budget_says_why_and_how_to_draw_less(monkeypatch, tmp_path):
    import shutil

    import reports.page
    from bad_inputs import invoke
    from paths import TESTS

    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    code, _, err = invoke(["report", str(run), "-o", str(tmp_path / "a.html"), "--no-hta"])
    assert code == 0 and "note: the page weighs" not in err  # 0.65 MB: within the budget
    monkeypatch.setattr(reports.page, "PAGE_BUDGET_BYTES", 100_000)
    code, _, err = invoke(["report", str(run), "-o", str(tmp_path / "b.html"), "--no-hta", "--steps", "1:3"])
    size = (tmp_path / "b.html").stat().st_size
    note = " ".join(err.split())
    assert code == 0 and note.startswith(f"commscope: note: the page weighs {size / 1e6:.2f} MB, over the 0.10 MB "
                                         "a page is kept to (heaviest: "), err
    assert note.endswith("); a narrower --steps A:B draws and lists fewer steps"), err
    # the heaviest section, as measured on the page (the rest is plotly's bundle, the same on every page)
    assert re.search(r"\(heaviest: timeline 0\.\d\d MB, steps 1–2 of 2 rank\(s\)\)", note), note


def test_the_weight_note_names_the_step_breakdown_when_it_is_the_weight():
    """A long run of a few ranks lists every rank's step in the step breakdown: 200 steps × 16 ranks weigh
    more than the timeline of 3 steps, and the note says so rather than blame the timeline."""
    from types import SimpleNamespace

    from reports.page import weight_note

    ctx = SimpleNamespace(window=(69, 72), drawn=None, trace=SimpleNamespace(ranks=list(range(16))),
                          listed_ranks=None, summary={"steps": [{"rank": r, "step": s} for r in range(16)
                                                               for s in range(200)]})
    note = weight_note(ctx, 2_700_000, {"steps": 1_490_000, "timeline": 420_000, "summary": 30_000})
    assert note == ("the page weighs 2.70 MB, over the 1.50 MB a page is kept to (heaviest: step breakdown "
                    "1.49 MB, 3,200 rows of a rank's step; timeline 0.42 MB, steps 69–71 of 16 rank(s)); a "
                    "narrower --steps A:B draws and lists fewer steps")
    # HTA's tables do not depend on the steps drawn: the note says what leaves them out
    assert weight_note(ctx, 1_600_000, {"hta": 500_000, "timeline": 100_000}).endswith(
        "(heaviest: hta side by side 0.50 MB); --no-hta leaves HTA's tables out")
    assert weight_note(ctx, 1_600_000, {"hta-views": 500_000, "steps": 400_000}).endswith(
        "; a narrower --steps A:B draws and lists fewer steps and --no-hta leaves HTA's tables out")
    assert weight_note(ctx, 1_400_000, {"steps": 1_000_000}) is None


def test_run_configuration_says_none_for_an_empty_list_and_keys_per_rank_entries_by_rank():
    from reports.tables import nested

    page = nested({"watchdog_ranks": [], "status": {"0": {"status": "completed"}, "1": {"status": "failed"}}})
    assert '<td data-key="watchdog_ranks">Watchdog ranks</td><td>none</td>' in page
    assert '<th data-key="rank">Rank</th><th data-key="status">Status</th>' in page
    assert '<th data-key="key">Key</th>' in nested({"pg": {"a": {"size": 2}}})  # other keys stay keys


def test_the_step_table_of_a_trace_leaves_out_host_columns_it_cannot_fill():
    from commscope.analyze.report_context import report_context as context
    from commscope.analyze.summary import summarize
    from commscope.load import load_path
    from paths import TESTS
    from reports.sections import render_steps

    tr = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    page = render_steps(context(tr, summarize(tr, with_hta=False), with_layout=False))
    table = page[page.index('id="steps-table"'):]
    # device windows: the gap before a step is its device's idle, known; no start delay
    assert 'data-key="gap_before_ms"' in table and 'data-key="start_delay_ms"' not in table
    assert "No delay to a step&#x27;s first compute" in page or "No delay to a step's first compute" in page
    tr = load_path(str(TESTS / "data" / "cpurun-hooks-gloo2"))
    page = render_steps(context(tr, summarize(tr, with_hta=False), with_layout=False))
    assert 'data-key="gap_before_ms"' in page[page.index('id="steps-table"'):]


def test_a_reader_without_javascript_is_told_and_print_opens_every_section(tmp_path):
    """With JavaScript off the figures stay blank: a <noscript> line says what still reads; printing opens
    the collapsed sections and keeps the heatmap's and swatches' colours (background graphics are off by
    default in print)."""
    from commscope.analyze.summary import summarize
    from commscope.load import load_path
    from report_trace import write_run_dir

    write_run_dir(make_trace(style="run"), tmp_path / "run")
    tr = load_path(tmp_path / "run")
    page = render_html(report_context(tr, summarize(tr, with_hta=False)))
    body = page[page.index("<body>"):]
    assert body.count("<noscript>") == 1 and "JavaScript is off: the timeline, the heatmap and the rank " \
                                               "selector are drawn by it and stay blank" in body
    assert "@media print{" in page and "print-color-adjust:exact" in page
    assert 'window.addEventListener("beforeprint"' in page and "d.open = true" in page
