"""The timeline says which steps it draws (step menu, heatmap) and names a CPU thread's compute row as one,
not as a stream; the headline says which ranks and steps its mean step is over."""
import json
import re

import pytest

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from report_trace import make_trace, write_run_dir
from reports.overview_section import render_heatmap
from reports.sections import render_timeline
from reports.timeline import timeline_figure
from reports.timeline_ranks import style


def context(path):
    tr = load_path(str(path))
    return report_context(tr, summarize(tr, with_hta=False), with_layout=False)


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs") / "ten-steps"
    write_run_dir(make_trace(style="run", steps=tuple(range(10))), d)
    return context(d)


def test_step_menu_names_the_drawn_window(ten_steps):
    assert ten_steps.window == (4, 7)  # 10 steps: three around the middle are drawn
    fig = timeline_figure(ten_steps.timeline)
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["drawn steps (4–6)", "step 4", "step 5", "step 6"]


def test_heatmap_says_which_columns_open_in_the_timeline(ten_steps):
    page = render_heatmap(ten_steps)
    heads = re.findall(r"<th(?: class=\"(\w+)\")?>(\d+)</th>", page)
    assert [int(s) for c, s in heads if c == "drawn"] == [4, 5, 6]
    assert [int(s) for _, s in heads] == list(range(10))
    assert ("the timeline draws steps 4–6 (the shaded column headers): click a cell there to open it in the "
            "timeline; <code>--steps A:B</code> draws other steps.") in page
    assert "click it to open its steps in the timeline" not in page
    # the cells of drawn columns carry their window, the others none
    cells = re.findall(r'<td class="cell"[^>]*>', page)
    assert {int(re.search(r'data-s="(\d+):', c).group(1)) for c in cells if "data-x0" in c} == {4, 5, 6}


def test_a_binned_heatmap_says_the_timeline_draws_steps_a_column_holds_only_in_part():
    """A column holds two steps past 60 steps: with steps 49–51 drawn, the column 48–49 is drawn only in part.
    The caption says the steps the timeline draws, and which columns hold only them."""
    from reports.overview_section import _click_note

    columns = [(s, s + 1) for s in range(0, 100, 2)]
    drawn = [c == (50, 51) for c in columns]
    assert _click_note(columns, drawn, (49, 52)) == (
        "the timeline draws steps 49–51; the shaded column headers are the columns wholly inside it (steps 50–51): "
        "click a cell there to open it in the timeline, or give <code>#step=N</code> in the address for any step "
        "it draws; <code>--steps A:B</code> draws other steps.")
    assert _click_note(columns, [False] * 50, (49, 50)).startswith(
        "the timeline draws step 49, which no column holds whole: <code>#step=N</code>")
    # an unbinned heatmap's columns are its steps: the shaded headers are the drawn steps
    assert _click_note([(s, s) for s in range(10)], [4 <= s < 7 for s in range(10)], (4, 7)).startswith(
        "the timeline draws steps 4–6 (the shaded column headers)")


def test_every_step_drawn(tmp_path):
    write_run_dir(make_trace(style="run", steps=(0, 1, 2)), tmp_path / "run")
    ctx = context(tmp_path / "run")
    assert ctx.window is None
    assert timeline_figure(ctx.timeline).layout.updatemenus[0].buttons[0].label == "all steps (0–2)"
    page = render_heatmap(ctx)
    assert "click it to open its steps in the timeline." in page and 'class="drawn"' not in page


def _spec(html: str) -> dict:
    return json.loads(re.search(r'csPlot\("timeline-plot", (.*?), \{"displaylogo"', html, flags=re.S).group(1))


def _ticks(html: str) -> list[str]:
    return _spec(html)["layout"]["yaxis"]["ticktext"]


def test_cpu_thread_rows_are_named_as_threads():
    ctx = context(TESTS / "data" / "hta-testdata" / "distributed_info_unavailable")
    html = render_timeline(ctx)
    assert _ticks(html) == ["r0 compute (CPU thread 3113936)", "r0 comm"]
    compute = next(t for t in _spec(html)["data"] if t["name"] == "compute")
    assert all(t.startswith("<b>rank 0 CPU thread 3113936</b>: ") and " op(s) in " in t for t in compute["text"])
    assert "s3113936" not in html
    assert style(ctx.timeline, True)["cpu_threads"] is True


def test_gpu_stream_rows_keep_their_stream():
    ctx = context(TESTS / "data" / "modded-nanogpt-8xh100")
    ticks = _ticks(render_timeline(ctx))
    assert ticks[:2] == ["r0 compute s7", "r0 comm"] and not any("thread" in t for t in ticks)


def test_headline_mean_step_says_what_it_covers(ten_steps):
    from reports.overview_section import render_summary

    head = re.search(r'<p class="headline">(.*?)</p>', render_summary(ten_steps)).group(1)
    steps = ten_steps.summary["steps"]
    mean = sum(r["step_ms"] for r in steps) / len(steps)
    assert f"mean step {mean:,.3f} ms (over 2 ranks, steps 0–9, step 0 included)" in head
    assert head.startswith("2 ranks · 10 steps · ")


def test_headline_mean_step_under_steps_selection(tmp_path):
    from reports.overview_section import render_summary

    write_run_dir(make_trace(style="run", steps=tuple(range(10))), tmp_path / "run")
    tr = load_path(str(tmp_path / "run"))
    ctx = report_context(tr, summarize(tr, steps=(3, 6), with_hta=False), (3, 6), with_layout=False)
    head = re.search(r'<p class="headline">(.*?)</p>', render_summary(ctx)).group(1)
    assert "(over 2 ranks, steps 3–5 selected)" in head and "warm-up" not in head
