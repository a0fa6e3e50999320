"""The page at scale in headless Chromium: a rank chosen through the selector (#rank=N) joins the lines
linking its collective calls across ranks, drawn at once. report.js adds a trace of the chosen rank's flow
lines beside the figure's own (off by default), with its own legend entry, and says on the figure how many
calls pass through the chosen rank (`data-shown-flows`): here every call of the chosen rank that a drawn
rank shares, as
TimelineBars.subset(drawn + [rank]) counts them. The numbers of the lines themselves are checked in
tests/unit/test_rank_flows.py. Skipped where no Chromium is installed."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.cli import app
from commscope.load import load_path
from paths import TESTS
from scale_jobs import gen_job, scale_job
from test_report_browser import CHROMIUM, chromium, console_errors

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")


def test_chosen_rank_gets_the_flow_lines(tmp_path):
    job = scale_job(tmp_path, ranks=40, straggler=29)["job"]
    tr = load_path(job)
    ctx = report_context(tr, summarize(tr, with_hta=False))
    drawn = [rb.rank for rb in ctx.drawn.ranks]
    page = tmp_path / "scale.html"
    res = CliRunner().invoke(app, ["report", job, "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    plain = chromium(tmp_path, "plain", "--dump-dom", page.as_uri()).stdout  # no rank chosen

    def lines(dom: str) -> int:
        return dom[dom.index('id="timeline-plot"'):].count('class="js-line"')

    for chosen in (0, next(r for r in range(min(drawn), 40) if r not in drawn)):  # before / among the drawn
        sub = ctx.timeline.subset(drawn + [chosen]).flows
        want = int(sub.loc[sub["rank"] == chosen, "flow"].nunique())
        assert want > 10
        proc = chromium(tmp_path, f"flows-{chosen}", "--dump-dom", f"{page.as_uri()}#rank={chosen}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert console_errors(proc.stderr) == []
        dom = proc.stdout
        tag = dom[dom.index('id="timeline-plot"') - 300:dom.index('id="timeline-plot"') + 300]
        assert f'data-shown-rank="{chosen}"' in tag and f'data-shown-flows="{want}"' in tag
        assert f'the lines "one call across ranks: rank {chosen}" link its {want} calls shared with the drawn ranks' in dom
        legend = re.findall(r'class="legendtext"[^>]*>([^<]+)<', dom[dom.index('id="timeline-plot"'):])
        assert legend.count("one call across ranks") == 1  # the figure's own, still off
        assert legend.count(f"one call across ranks: rank {chosen}") == 1
        # drawn, not only listed: plotly draws one path per call of a visible line trace (none for a legendonly
        # one), and one more for its legend entry's symbol
        assert lines(dom) == lines(plain) + want + 1
    for bad, said in (("abc", "#rank=abc is not a rank"), ("-1", "#rank=-1 is not a rank"),
                      ("999", "the job has no rank 999 (ranks 0–39)")):
        proc = chromium(tmp_path, f"bad-{bad}", "--dump-dom", f"{page.as_uri()}#rank={bad}")
        assert console_errors(proc.stderr) == [] and said in proc.stdout and 'data-shown-rank=""' in proc.stdout
    # #step=N on the canvas heatmap zooms the timeline as a click on that step's column does; what the page
    # cannot follow is said in the heatmap's note
    step = int(ctx.drawn.step_marks["step"].min())
    for frag, said in ((f"step={step}", f"step {step}: shown in the timeline below."),
                       ("step=abc", "#step=abc is not a step: give a whole number"),
                       ("step=999", "#step=999: the heatmap has no step 999")):
        proc = chromium(tmp_path, f"frag-{frag}", "--dump-dom", f"{page.as_uri()}#{frag}")
        assert console_errors(proc.stderr) == [] and said in proc.stdout, frag
    # the representative ranks' labels beside the canvas never draw over each other
    label_y = re.search(r'id="heatmap-canvas"[^>]*data-label-y="([^"]+)"', plain).group(1)
    ys = [float(p.split(":")[1]) for p in label_y.split()]
    assert len(ys) >= 2 and all(b - a >= 12 for a, b in zip(ys, ys[1:]))
    # a link to a collapsed section opens it
    proc = chromium(tmp_path, "open-labels", "--dump-dom", f"{page.as_uri()}#labels")
    assert re.search(r'<details id="labels" open', proc.stdout)


def test_rank_in_the_address_is_chosen_drawn_and_keeps_readable_lanes(tmp_path):
    """#rank=5 chooses rank 5 in the selector (its option carries `selected`), draws its rows last with each
    lane of its comm row at least reports.timeline.LANE_PX px tall as laid out (report.js writes the
    measured px in data-shown-lane-px); #rank=abc chooses none and says why beside the selector."""
    from reports.timeline import LANE_PX

    job = scale_job(tmp_path, ranks=40, straggler=29)["job"]
    tr = load_path(job)
    ctx = report_context(tr, summarize(tr, with_hta=False))
    assert 5 not in [rb.rank for rb in ctx.drawn.ranks]  # else the page has nothing to add
    lanes = next(rb.n_lanes for rb in ctx.timeline.ranks if rb.rank == 5)
    assert lanes >= 10  # the recorded run's 13 labels overlap: a comm row of 22 px would give < 2 px a lane
    page = tmp_path / "scale.html"
    res = CliRunner().invoke(app, ["report", job, "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    proc = chromium(tmp_path, "rank5", "--dump-dom", f"{page.as_uri()}#rank=5")
    assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
    dom = proc.stdout
    assert re.findall(r'<option value="(\d*)" selected', dom) == ["5"]
    tag = re.search(r'<div id="timeline-plot"[^>]*>', dom).group(0)
    assert 'data-shown-rank="5"' in tag
    assert float(re.search(r'data-shown-lane-px="([\d.]+)"', tag).group(1)) >= LANE_PX
    ticks = re.findall(r'class="ytick"><text[^>]*>(r\d+ \w+)</text>', dom[dom.index('id="timeline-plot"'):])
    assert ticks[-1] == "r5 comm" and "rank 5: the last rows of the figure" in dom
    proc = chromium(tmp_path, "rank-abc", "--dump-dom", f"{page.as_uri()}#rank=abc")
    assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
    dom = proc.stdout
    assert re.findall(r'<option value="(\d*)" selected', dom) == [""]
    assert 'data-shown-rank=""' in dom and 'data-shown-lane-px="' not in dom.replace('data-shown-lane-px=""', "")
    said = re.search(r'<span id="rank-shown">([^<]*)</span>', dom).group(1)
    assert said == "#rank=abc is not a rank: give a whole number from 0 to 39 (#rank=0)."


HARNESS = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="PAGE" style="width:1920px;height:900px;border:0"></iframe><pre id="out">pending</pre>
<script>
// Load the page at 1920 px with a rank chosen, then narrow its window to 800 px: the plot must follow.
var f = document.getElementById("f"), narrowed = false;
function sizes(gd) { return {plot: gd._fullLayout.width, box: gd.clientWidth, page: f.contentDocument.documentElement.scrollWidth}; }
function poll() {
  var d = f.contentDocument, gd = d && d.getElementById("timeline-plot");
  if (!gd || !gd._fullLayout || gd.dataset.shownRank !== "RANK") return setTimeout(poll, 100);
  if (narrowed) return;
  narrowed = true;
  var wide = sizes(gd);
  f.style.width = "800px";
  // headless Chromium under a virtual time budget may not deliver the frame's resize event itself
  setTimeout(function () { f.contentWindow.dispatchEvent(new Event("resize")); }, 200);
  setTimeout(function () { document.getElementById("out").textContent = JSON.stringify({wide: wide, narrow: sizes(gd)}); }, 2000);
}
poll();
</script></body></html>"""


def test_the_timeline_keeps_following_the_window_width_after_a_rank_is_chosen(tmp_path):
    """plotly's relayout of a height pins the plot's width (autosize off): the page sets heights on the
    figure's div and lets autosize read both sizes, so a window narrowed after a rank was chosen still
    narrows the plot instead of leaving a 1600 px plot in a 752 px box."""
    import json

    job = scale_job(tmp_path, ranks=40, straggler=29)["job"]
    page = tmp_path / "scale.html"
    res = CliRunner().invoke(app, ["report", job, "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.replace("PAGE", page.as_uri() + "#rank=3").replace("RANK", "3"))
    proc = chromium(tmp_path, "resize", "--allow-file-access-from-files", "--window-size=1940,1000", "--dump-dom",
                    harness.as_uri())
    assert console_errors(proc.stderr) == []
    out = json.loads(re.search(r'<pre id="out">([^<]*)</pre>', proc.stdout).group(1))
    assert out["wide"]["plot"] > 1500 and out["wide"]["plot"] == out["wide"]["box"]
    assert out["narrow"]["box"] < 800 and out["narrow"]["plot"] == out["narrow"]["box"], out
    assert out["narrow"]["page"] <= 800  # nothing wider than the window: no sideways scrolling


def test_the_heatmap_fits_a_narrow_window(tmp_path):
    """At scale the heatmap is a canvas; its columns narrow to the window (down to 6 px), so the
    representative ranks marked on its right stay in view at 800 px instead of 1282 px of canvas."""
    job = scale_job(tmp_path, ranks=40, straggler=29, steps=40)["job"]
    page = tmp_path / "scale.html"
    assert CliRunner().invoke(app, ["report", job, "-o", str(page), "--no-hta"]).exit_code == 0
    widths = {}
    for w in (800, 1920):
        proc = chromium(tmp_path, f"heat-{w}", f"--window-size={w},1000", "--dump-dom", page.as_uri())
        assert console_errors(proc.stderr) == []
        widths[w] = int(re.search(r'<canvas id="heatmap-canvas"[^>]*\bwidth="(\d+)"', proc.stdout).group(1))
    assert widths[800] <= 800 - 40 and widths[1920] > widths[800]


def test_a_chosen_rank_of_a_hung_job_shows_what_it_left_in_flight(tmp_path):
    """A 40-rank job whose rank 17 never launches a collective of step 3: a rank chosen through the selector
    gets its in-flight bar (outlined in red, in the legend once) and the sentence beside the selector counts
    it; the culprit, drawn first, has none."""
    from reports.timeline import INFLIGHT_NAME

    truth = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "h", 40, steps=6, hang=17)
    tr = load_path(truth["job"])
    ctx = report_context(tr, summarize(tr, with_hta=False))
    drawn = [rb.rank for rb in ctx.drawn.ranks]
    assert drawn[0] == 17 and len(ctx.drawn.ranks[0].inflight) == 0
    chosen = next(r for r in range(40) if r not in drawn)
    assert len(next(rb for rb in ctx.timeline.ranks if rb.rank == chosen).inflight) == 1
    page = tmp_path / "hung.html"
    res = CliRunner().invoke(app, ["report", truth["job"], "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    proc = chromium(tmp_path, "hung", "--dump-dom", f"{page.as_uri()}#rank={chosen}")
    assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
    dom = proc.stdout
    said = re.search(r'<span id="rank-shown">([^<]*)</span>', dom).group(1)
    assert said.startswith(f"rank {chosen}: the last rows of the figure; it left 1 collective in flight (outlined in red);")
    legend = re.findall(r'class="legendtext"[^>]*>([^<]+)<', dom[dom.index('id="timeline-plot"'):])
    assert legend.count(INFLIGHT_NAME) == 1
    assert "step 3 · no end recorded" in dom and "Outlined in red, striped" in dom
    # the culprit, drawn first: choosing it says why it is drawn
    proc = chromium(tmp_path, "hung-17", "--dump-dom", f"{page.as_uri()}#rank=17")
    assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
    said = re.search(r'<span id="rank-shown">([^<]*)</span>', proc.stdout).group(1)
    assert said.startswith("rank 17 is one of the drawn ranks (the doctor's hang culprit);"), said
    # the hung step has no heatmap column (no rank ended it), but the timeline draws it: #step=3 opens it
    # there, as its menu entry does, on the canvas heatmap at scale and on the table one below it
    small = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "s", 4, steps=6, hang=2)
    small_page = tmp_path / "hung4.html"
    assert CliRunner().invoke(app, ["report", small["job"], "-o", str(small_page), "--no-hta"]).exit_code == 0
    for name, p in (("canvas", page), ("table", small_page)):
        proc = chromium(tmp_path, f"hung-step3-{name}", "--dump-dom", f"{p.as_uri()}#step=3")
        assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
        note = re.search(r'id="heatmap-note"[^>]*>([^<]*)<', proc.stdout).group(1)
        assert note == "step 3 (no end recorded): no heatmap column (no rank ended it); shown in the timeline below.", (name, note)


def test_step_labels_close_together_move_up_a_line_instead_of_printing_over_each_other(tmp_path):
    """The 8×H100 traces with rank 3 stalled 800 ms in step 11: at 800 px steps 10 and 11 start ~40 px apart,
    less than a label's width, so the second label moves up a line (report.js csSpreadStepLabels); none is
    hidden. At 1920 px they fit side by side."""
    truth = gen_job.generate(TESTS / "data" / "modded-nanogpt-8xh100", tmp_path / "k", 8, straggler=3, delay_ms=800)
    page = tmp_path / "k.html"
    res = CliRunner().invoke(app, ["report", truth["job"], "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output

    def labels(width: int) -> tuple[list[str | None], str]:
        proc = chromium(tmp_path, f"w{width}", f"--window-size={width},1000", "--dump-dom", page.as_uri())
        assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
        dom = proc.stdout[proc.stdout.index('id="timeline-plot"'):]
        tag = re.search(r'data-hidden-step-labels="(\d+)"', proc.stdout).group(1)
        moved = [(re.search(r'transform="([^"]*)"', m.group(0)) or [None, None])[1]
                 for m in re.finditer(r'<g class="annotation"[^>]*>', dom)]
        return moved, tag

    moved, hidden = labels(800)
    assert moved == [None, "translate(0,-13)"] and hidden == "0"
    moved, hidden = labels(1920)
    assert moved == [None, None] and hidden == "0"
