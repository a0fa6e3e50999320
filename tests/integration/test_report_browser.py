"""The report page in a real browser: headless Chromium, offline (every host name resolves to nothing),
must inflate and run the embedded plotly.js, draw the timeline and show the summary and heatmap without a
script error.

The other report tests parse the HTML; only a browser shows that the inlined JS actually executes and needs
nothing from the network. Three pages: a demo-like one (a recorded 2-rank CPU run with 13 labels, as
`commscope run` makes), the 8×H100 fixture's (with HTA's views), and a generated 40-rank job's, above the
threshold where the page summarizes the ranks (its rank selector must draw a rank the timeline does not).
Each must stay within its weight budget; a screenshot of each is saved under the test's temporary
directory (its path is printed, `-s` shows it). Skipped where no Chromium is installed (Debian package
`chromium`)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from report_trace import make_trace, write_run_dir
from paths import TESTS
from scale_jobs import scale_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DATA = TESTS / "data"
# No network at all: a page that needed a CDN would render without plotly and fail the checks below.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=20000", "--hide-scrollbars"]
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")


def chromium(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """One fresh headless Chromium (its own profile directory) on the given arguments."""
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / ('profile-' + name)}", *args],
                          capture_output=True, text=True, timeout=180)


def console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln and re.search(r"Uncaught|Error", ln)
            and "WebGL" not in ln]


def make_page(tmp_path: Path, src: Path, name: str, *extra: str) -> Path:
    copy = tmp_path / src.name
    shutil.copytree(src, copy)
    page = tmp_path / f"{name}.html"
    res = CliRunner().invoke(app, ["report", str(copy), "-o", str(page), *extra])
    assert res.exit_code == 0, res.output
    return page


def check_page(tmp_path: Path, page: Path, name: str, ranks: int, steps: int) -> str:
    """Open `page`: no console error, plotly drew the timeline, summary and heatmap in the DOM; save a
    screenshot. Returns the DOM."""
    proc = chromium(tmp_path, name, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert console_errors(proc.stderr) == []
    # plotly.js adds these only once it has drawn the figure: proof that the inflated library ran
    timeline = dom[dom.index('id="timeline-plot"'):]
    assert "js-plotly-plot" in timeline[:300] and "main-svg" in timeline
    assert re.search(r'class="[^"]*legendtext[^"]*"', timeline)
    assert len(re.findall(r'<g class="point"', timeline)) > ranks  # bars drawn, hover anywhere on them
    # the first screen: verdict, the most exposed labels with their why, the ranks × steps heatmap
    assert dom.index('id="summary"') < dom.index('id="heatmap"') < dom.index('id="timeline"')
    assert 'id="verdict"' in dom and re.search(r'<ol id="top-labels"><li>', dom)
    heat = dom[dom.index('id="heatmap-table"'):dom.index("</table>", dom.index('id="heatmap-table"'))]
    assert heat.count('class="cell"') == ranks * steps
    assert dom.count("<details") >= 5 and "<details open" not in dom  # details collapsed
    shot = tmp_path / f"{name}.png"
    proc = chromium(tmp_path, name + "-shot", "--window-size=1400,1200", f"--screenshot={shot}", page.as_uri())
    assert proc.returncode == 0 and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    print(f"\nscreenshot of the {name} page: {shot} ({page.stat().st_size} bytes page)")
    return dom


def test_demo_like_page_in_headless_chromium(tmp_path):
    page = make_page(tmp_path, DATA / "cpurun-hooks-gloo2", "demo", "--no-hta")
    assert page.stat().st_size <= 1_500_000
    dom = check_page(tmp_path, page, "demo", ranks=2, steps=3)
    # 13 labels, each its own legend entry, and hook markers
    timeline = dom[dom.index('id="timeline-plot"'):]
    assert len(set(re.findall(r'class="legendtext"[^>]*>([^<]+)<', timeline))) >= 13


def test_a_heatmap_cell_opens_its_step_and_the_step_dropdown_names_it(tmp_path):
    """#step=N opens step N as a click on its heatmap cell does: the timeline zooms to it and the timeline's
    step dropdown names that step, not the one it showed before."""
    page = make_page(tmp_path, DATA / "cpurun-hooks-gloo2", "steps", "--no-hta")

    def header(dom: str) -> str:
        i = dom.index('class="updatemenu-header-group"')
        return re.search(r'data-unformatted="([^"]*)"', dom[i:]).group(1)

    plain = chromium(tmp_path, "plain", "--dump-dom", page.as_uri())
    assert header(plain.stdout) == "all steps (0–2)"
    for step in (2, 1):
        proc = chromium(tmp_path, f"step{step}", "--dump-dom", f"{page.as_uri()}#step={step}")
        assert proc.returncode == 0 and console_errors(proc.stderr) == []
        assert header(proc.stdout) == f"step {step}"
        assert f"rank 0, step {step}: exposed" in proc.stdout and "shown in the timeline below" in proc.stdout
    # a fragment the page cannot follow says why, as #rank=abc does
    for frag, said in (("step=abc", "#step=abc is not a step: give a whole number (steps 0–2)."),
                       ("step=99", "#step=99: the heatmap has no step 99 (steps 0–2).")):
        proc = chromium(tmp_path, frag, "--dump-dom", f"{page.as_uri()}#{frag}")
        assert console_errors(proc.stderr) == [] and said in proc.stdout, frag


def test_8xh100_page_in_headless_chromium(tmp_path):
    pytest.importorskip("hta")
    page = make_page(tmp_path, DATA / "modded-nanogpt-8xh100", "h100")
    assert page.stat().st_size <= 2_500_000
    dom = check_page(tmp_path, page, "h100", ranks=8, steps=2)
    assert 'id="hta-idle_time"' in dom and 'id="hta-launch_delay"' in dom


def test_hand_built_run_renders_offline(tmp_path):
    run = tmp_path / "run"
    write_run_dir(make_trace(style="run"), run)
    page = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(run), "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    proc = chromium(tmp_path, "hand", "--dump-dom", page.as_uri())
    assert proc.returncode == 0 and console_errors(proc.stderr) == []
    assert "js-plotly-plot" in proc.stdout and "main-svg" in proc.stdout


def test_page_at_scale_shows_a_chosen_rank(tmp_path):
    """40 ranks: the timeline draws the representative ranks; #rank=N (what the selector does) adds rank N's
    rows from the page's compact data, drawn by plotly like the others."""
    from commscope.analyze.summary import summarize
    from commscope.load import load_path

    job = scale_job(tmp_path, ranks=40, straggler=29)["job"]
    reps = [r["rank"] for r in summarize(load_path(job), with_hta=False)["representative_ranks"]]
    chosen = next(r for r in range(40) if r not in reps)
    page = tmp_path / "scale.html"
    res = CliRunner().invoke(app, ["report", job, "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    assert page.stat().st_size <= 1_500_000  # the 2-rank page's budget
    doms = {}
    for name, url in (("plain", page.as_uri()), ("chosen", f"{page.as_uri()}#rank={chosen}")):
        proc = chromium(tmp_path, "scale-" + name, "--dump-dom", url)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert console_errors(proc.stderr) == []
        doms[name] = proc.stdout
    for dom in doms.values():
        for plot in ("timeline-plot", "lateness-plot"):
            drawn = dom[dom.index(f'id="{plot}"'):]
            assert "js-plotly-plot" in drawn[:300] and "main-svg" in drawn
        assert dom.count("<option") == 41  # "(none)" and every rank, filled in by report.js
        # the drawn ranks' options say why they are drawn, the others are plain
        options = dict(re.findall(r'<option value="(\d+)"[^>]*>([^<]*)</option>', dom))
        assert options[str(reps[0])].startswith(f"rank {reps[0]} · drawn: ") and options[str(chosen)] == f"rank {chosen}"
        assert sum("· drawn: " in t for t in options.values()) == len(reps)
        assert re.search(r'<canvas id="heatmap-canvas" width="\d+" height="\d+"', dom)  # painted
    timeline = {k: d[d.index('id="timeline-plot"'):] for k, d in doms.items()}
    rows = {k: re.findall(r'class="ytick"><text[^>]*>(r\d+ \w+)</text>', t) for k, t in timeline.items()}
    assert rows["plain"] == [f"r{r} {row}" for r in reps for row in ("compute", "comm")]
    assert rows["chosen"] == rows["plain"] + [f"r{chosen} compute", f"r{chosen} comm"]
    assert f'data-shown-rank="{chosen}"' in doms["chosen"] and 'data-shown-rank="' not in doms["plain"]
    # its bars: compute blocks and collectives, one plotly point each
    assert timeline["chosen"].count('<g class="point"') > timeline["plain"].count('<g class="point"') + 50
    shot = tmp_path / "scale.png"
    proc = chromium(tmp_path, "scale-shot", "--window-size=1400,2400", f"--screenshot={shot}",
                    f"{page.as_uri()}#rank={chosen}")
    assert proc.returncode == 0 and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    print(f"\nscreenshot of the 40-rank page with rank {chosen} chosen: {shot} ({page.stat().st_size} bytes page)")


def test_a_step_in_a_binned_heatmap_column_opens_itself(tmp_path):
    """8 ranks × 100 steps: a heatmap column holds two steps and the timeline draws steps 49–51, so the
    column 48–49 is drawn only in part. #step=49 and #step=50 open the step itself, from the timeline's
    menu, which then names it."""
    from scale_jobs import gen_job

    truth = gen_job.generate(DATA / "cpurun-hooks-gloo2", tmp_path / "g", 8, steps=100)
    page = tmp_path / "binned.html"
    res = CliRunner().invoke(app, ["report", truth["job"], "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    for step, column in ((49, "48–49"), (50, "50–51")):
        proc = chromium(tmp_path, f"binned-{step}", "--dump-dom", f"{page.as_uri()}#step={step}")
        assert proc.returncode == 0 and console_errors(proc.stderr) == [], proc.stderr[-2000:]
        note = re.search(r'id="heatmap-note"[^>]*>([^<]*)<', proc.stdout).group(1)
        assert note == f"step {step} (in the heatmap's column of steps {column}); shown in the timeline below."
        menu = proc.stdout[proc.stdout.index('class="updatemenu-header-group"'):]
        assert re.search(r'class="updatemenu-item-text"[^>]*>([^<]*)<', menu).group(1) == f"step {step}"
