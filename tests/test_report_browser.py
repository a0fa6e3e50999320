"""The report page in a real browser: headless Chromium, offline (every host name resolves to nothing),
must run the embedded plotly.js and draw the timeline without a script error.

The other report tests parse the HTML; only a browser shows that the inlined JS actually executes and needs
nothing from the network. Skipped where no Chromium is installed (Debian package `chromium`)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from report_trace import make_trace, write_run_dir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# No network at all: a page that needed a CDN would render without plotly and fail the checks below.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")
def test_report_renders_offline_in_headless_chromium(tmp_path):
    run = tmp_path / "run"
    write_run_dir(make_trace(style="run"), run)
    page = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(run), "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # plotly.js adds these only when it has drawn the figure: proof that the inlined library ran.
    assert "js-plotly-plot" in dom and "main-svg" in dom
    assert re.search(r'class="[^"]*legendtext[^"]*"', dom)
    errors = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and re.search(r"Uncaught|Error", ln)
              and "WebGL" not in ln]
    assert errors == []
