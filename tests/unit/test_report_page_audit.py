"""The page's privacy, words and column meanings: no figure offers plotly's upload to Plotly Cloud, step −1
is said as what it means, the layout device on a GPU trace without its model's name, configuration values
with their digits and units, every column of "Collectives by label" defined, the timeline hover's
launch-to-start time named apart from the table's Queued, and captions that stay true."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from report_trace import make_trace, write_run_dir
from reports.layout_section import CONTENTION_NOTE, contention_row, device_text
from reports.page import PLOTLY_JS, render_html
from reports.sections import drawn_steps, render_config, render_collectives_by_label
from reports.tables import COLUMN_HELP, humanize, step_words
from reports.timeline import COLL_HOVER

DATA = TESTS / "data"


def run_page(tmp_path, trace=None) -> tuple[object, str]:
    """The loaded hand-built run (report_trace) and its page."""
    write_run_dir(trace if trace is not None else make_trace(style="run"), tmp_path / "run")
    tr = load_path(str(tmp_path / "run"))
    return tr, render_html(report_context(tr, summarize(tr, with_hta=False), with_layout=False))


def figure_configs(page: str) -> dict[str, dict]:
    """Each csPlot call's figure id and config (its last argument) in the written page."""
    out = {}
    for m in re.finditer(r'csPlot\("([^"]+)", ', page):
        end = page.index(");</script>", m.end())
        config = page[page.rindex("}, {", m.end(), end) + 3:end] if "}, {" in page[m.end():end] else "{}"
        out[m.group(1)] = json.loads(config)
    return out


def test_no_figure_offers_the_upload_to_plotly_cloud(tmp_path):
    _, page = run_page(tmp_path)
    configs = figure_configs(page)
    assert "timeline-plot" in configs
    for div, config in configs.items():
        assert config["showSendToCloud"] is False, div
        assert "sendChartToCloud" in config["modeBarButtonsToRemove"], div
        assert config["displaylogo"] is False
    # the names are plotly.js 4.x's, as the embedded bundle spells them: a newer bundle renaming them
    # would leave the button on
    bundle = PLOTLY_JS.read_text(encoding="utf-8")
    assert "showSendToCloud:{valType:\"boolean\",dflt:!0}" in bundle
    assert "showSendToCloud&&G.push(\"sendChartToCloud\")" in bundle
    assert re.search(r'\.sendChartToCloud=\{name:"sendChartToCloud"', bundle)


def test_step_minus_one_is_said_in_words():
    assert step_words("rank 0: no ProfilerStep annotations (events get step −1)") == \
        "rank 0: no ProfilerStep annotations (events are outside every step)"
    assert step_words("step -10 and step 1") == "step -10 and step 1"
    base = dict(rank=1, label="g", op="all_reduce", bytes=1024, duration_us=400.0, alone_us=200.0, inflation=2.0,
                overlap_us=300.0, kernel="k", kernel_blocks=5000, capacity_blocks=2112)
    outside = contention_row(pd.Series(dict(base, step=-1, attributable_us=np.nan, separable=False,
                                            evidence="not separable: 1 of 2 ranks in the trace")), str)
    assert outside["step"] == "outside every step" and outside["attributable_us"] == "not separable"
    assert outside["evidence"] == "1 of 2 ranks in the trace"
    inside = contention_row(pd.Series(dict(base, step=11, attributable_us=191.55, separable=True,
                                           evidence="same rank alone")), str)
    assert inside["step"] == 11 and inside["attributable_us"] == 191.55
    assert "“outside every step”" in CONTENTION_NOTE.replace("&ldquo;", "“").replace("&rdquo;", "”")
    assert "&ldquo;not separable&rdquo;" in CONTENTION_NOTE and "Inflation".lower() in CONTENTION_NOTE


def test_the_gloo_page_quotes_the_loader_without_step_minus_one():
    tr = load_path(str(DATA / "gloo2"))
    assert any("step −1" in str(p) for p in tr.problems)
    page = render_html(report_context(tr, summarize(tr, with_hta=False), with_layout=False))
    assert "step −1" not in page and "(events are outside every step)" in page


def test_a_gpu_trace_without_its_model_is_a_gpu():
    tr = load_path(str(DATA / "hta-testdata" / "trace_filter"))
    assert tr.device == "cuda" and len(tr.kernels)
    assert device_text(None, tr) == "GPU (model unknown)"
    assert device_text("NVIDIA H100 80GB HBM3", tr) == "NVIDIA H100 80GB HBM3"
    assert device_text(None, SimpleNamespace(device="cpu", kernels=pd.DataFrame())) == "CPU"
    page = render_html(report_context(tr, summarize(tr, with_hta=False)))
    assert "Device: GPU (model unknown)." in page and "CPU / unknown" not in page


def test_configuration_values_keep_their_digits_and_units():
    ctx = SimpleNamespace(at_scale=False, trace=SimpleNamespace(config={
        "args": {"adam_eps": 1e-08, "lr": 0.0036, "hang_timeout": 300.0}, "tokens_per_s": 6330.04}))
    html = render_config(ctx)
    assert ">1e-08<" in html and ">0.0036<" in html and "&lt;0.001" not in html
    assert ">Hang timeout (s)<" in html and ">300.000<" in html
    assert ">Tokens per second<" in html and "Tokens per (s)" not in html
    assert humanize("tokens_per_s") == "Tokens per second"


def test_every_label_column_is_defined_and_the_hover_names_launch_to_start_apart():
    tr = load_path(str(DATA / "cpurun-hooks-gloo2"))
    ctx = report_context(tr, summarize(tr, with_hta=False), with_layout=False)
    html = render_collectives_by_label(ctx)
    table = html[html.index('id="labels-table"'):html.index("</thead>", html.index('id="labels-table"'))]
    heads = re.findall(r'<th data-key="([^"]+)"( title="[^"]+")?>', table)
    assert len(heads) >= 15 and [k for k, t in heads if not t] == []
    assert {"queued_ms", "queue_charged_ms", "wake_delay_ms", "attributed_exposed_ms",
            "queued_behind_ms"} <= {k for k, _ in heads} <= set(COLUMN_HELP)
    for words in ("queued is the part of the exposed time spent behind earlier collectives",
                  "attributed exposed = own exposed + queue charged", "wake delay", "queued behind, by label",
                  "Calls per rank: the mean of each rank's calls"):
        assert words in html.replace("&#x27;", "'"), words
    # two shares of communication hidden on one page: the header says why the label's can be the higher
    hidden = dict(heads)["hidden_pct"]
    assert "memcpy and memset included" in hidden and "Comm overlap, device only counts compute kernels" in hidden
    # the hover's launch → start time is another quantity than the table's Queued
    assert "queued" not in COLL_HOVER.lower() and "<br>%{hovertext}<extra>" in COLL_HOVER


def test_the_hover_says_launch_to_start_is_not_recorded_where_the_execution_start_is_unknown(tmp_path):
    """A run directory timed on the CPU records launches and ends, no execution start: its bars start at
    the launch, and "launch to start 0.000 ms" would state an unknown as a zero. Both renderings (the page's
    figure and the compact rows report.js draws at scale) say so; a Kineto trace's kernels say the time."""
    from reports.timeline import L2S_UNKNOWN, launch_to_start, timeline_figure
    from reports.timeline_ranks import rank_rows

    assert launch_to_start(2.5e6) == "launch to start 2.500 ms" and launch_to_start(np.nan) == L2S_UNKNOWN
    for path, known in ((DATA / "cpurun-hooks-gloo2", False), (DATA / "modded-nanogpt-8xh100", True)):
        tr = load_path(str(path))
        bars = report_context(tr, summarize(tr, with_hta=False), with_layout=False).timeline
        texts = [t for tr_ in timeline_figure(bars).data if tr_.hovertemplate and "running" in tr_.hovertemplate
                 for t in tr_.hovertext]
        assert len(texts) > 20 and all(t.count("<br>") == 1 for t in texts)
        q = rank_rows(bars)["coll"]["q"]
        # unknown exactly where the launch or the execution start is missing (Kineto: kernels whose launch
        # the trace does not hold, 189 of the fixture's 413)
        unknown = sum(int((np.isnan(rb.launch) | np.isnan(rb.measured_start))[rb.drawn].sum()) for rb in bars.ranks)
        for rb in bars.ranks:  # the analysis's queueing time: start − launch, never negative, NaN where unknown
            with np.errstate(invalid="ignore"):
                want = np.maximum(rb.measured_start - rb.launch, 0.0)
            assert np.array_equal(rb.queued, want, equal_nan=True) and not (rb.queued < 0).any()
        assert len(q) == len(texts) and sum(v is None for v in q) == sum(L2S_UNKNOWN in t for t in texts) == unknown
        if known:
            assert 0 < unknown < len(q) / 2
            assert max(float(t.split("launch to start ")[1].split(" ms")[0]) for t in texts if L2S_UNKNOWN not in t) > 0.01
        else:
            assert all(t.endswith(L2S_UNKNOWN) for t in texts) and set(q) == {None}


def test_timeline_caption_names_the_drawn_steps_and_never_all_steps_alone(tmp_path):
    marks = lambda steps: SimpleNamespace(step_marks=pd.DataFrame({"step": steps}))  # noqa: E731
    assert drawn_steps(marks([0, 1, 2]), None) == (
        "The figure draws every step of the input (steps 0–2); the step menu or a heatmap cell zooms to one of them.")
    assert drawn_steps(marks([5, 6]), (5, 7)).startswith("The figure draws steps 5–6;")
    assert drawn_steps(marks([5]), (5, 6)) == "The figure draws step 5."
    assert drawn_steps(marks([]), None) == "The input marks no steps: the figure draws all of its time."
    _, page = run_page(tmp_path)
    assert '<p class="note" id="timeline-caption">The figure draws every step of the input (steps 0–1)' in page
    assert "all steps." not in page


def test_headline_without_collectives_and_the_legend_stays_with_its_ramp(tmp_path):
    quiet = make_trace(style="run")
    quiet.collectives = quiet.collectives.iloc[0:0]
    _, page = run_page(tmp_path / "quiet", quiet)
    headline = re.search(r'<p class="headline">(.*?)</p>', page).group(1)
    assert "no collectives in this input" in headline and "% of step time" not in headline
    _, page = run_page(tmp_path / "busy")
    assert re.search(r'<span class="legend" id="heatmap-legend"><span class="ramp"[^>]*></span> 0 … [0-9.]+ ms\.</span>',
                     page)
    assert ".legend{white-space:nowrap" in page


def test_a_collectives_hover_says_its_step_in_words():
    from reports.timeline import COLL_HOVER, step_text

    assert (step_text(5), step_text(-1), step_text(None)) == ("step 5", "outside every step", "outside every step")
    assert "customdata[1]" not in COLL_HOVER  # the step is in the text, never the raw number
    js = (Path(__file__).resolve().parents[2] / "reports" / "static" / "report.js").read_text()
    assert '"outside every step" : "step " + o.step[j]' in js  # ranks drawn on demand say it alike


def test_the_timeline_caption_explains_only_what_the_figure_draws():
    """Hook diamonds, step-gap bands and "a run timed on the CPU" are said where the figure has them: the
    8×H100 traces have kernels, gaps between steps and no hooks; the CPU run directory has all three."""
    from reports.sections import render_timeline

    def caption(path):
        tr = load_path(str(path))
        ctx = report_context(tr, summarize(tr, with_hta=False))
        return re.search(r'<p class="note" id="timeline-caption">(.*?)</p>', render_timeline(ctx), re.S).group(1), ctx

    gpu, ctx = caption(TESTS / "data" / "modded-nanogpt-8xh100")
    assert not any(len(rb.hooks) for rb in ctx.timeline.ranks) and not len(ctx.trace.hooks)
    assert "Diamonds" not in gpu and "timed on the CPU" not in gpu
    assert ("Yellow bands" in gpu) == any(g is not None for g in ctx.timeline.gap_before)
    assert "one grey row per compute stream (hover: its kernels)" in gpu
    cpu, ctx = caption(TESTS / "data" / "cpurun-hooks-gloo2")
    assert any(len(rb.hooks) for rb in ctx.timeline.ranks) and any(g is not None for g in ctx.timeline.gap_before)
    assert "Diamonds: gradient-hook firings." in cpu and "Yellow bands: time between two steps." in cpu
    assert "(a run timed on the CPU: its bars start at the launch)" in cpu
    assert "one grey row per compute thread (hover: its ops)" in cpu
