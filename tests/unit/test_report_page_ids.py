"""The page's element ids are unique (a table's id never repeats its section's, which the nav links point
at), and report.js opens the collapsed section a link or the page's #id points at."""
import collections
import re

from typer.testing import CliRunner

from commscope.cli import app
from paths import TESTS
from reports.page import STATIC


def test_ids_are_unique_and_nav_links_reach_sections(tmp_path):
    page = tmp_path / "cpu.html"
    res = CliRunner().invoke(app, ["report", str(TESTS / "data" / "cpurun-hooks-gloo2"), "-o", str(page), "--no-hta"])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    ids = collections.Counter(re.findall(r'<\w+[^>]*\sid="([^"]+)"', html))
    assert [i for i, n in ids.items() if n > 1] == []
    for name in ("labels", "stragglers", "steps", "overview"):
        assert re.search(rf'<details id="{name}">', html) and f'<table id="{name}-table">' in html
    nav = re.search(r"<nav>(.*?)</nav>", html).group(1)
    for target in re.findall(r'href="#([^"]+)"', nav):
        assert ids[target] == 1, target


def test_script_opens_the_target_details_and_explains_bad_rank_hashes():
    js = (STATIC / "report.js").read_text()
    assert 'p.tagName === "DETAILS") p.open = true' in js
    assert "is not a rank: give a whole number" in js
    assert 'visible: "legendonly"' not in js  # a chosen rank's lines are drawn at once
