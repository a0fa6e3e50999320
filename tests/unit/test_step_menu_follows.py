"""The timeline's step menu names what the figure shows (report.js csFollowMenu, run here in node): after a
drag zoom or a pan it names no step, after a double-click reset the whole figure again, and a relayout
that set the menu itself (a click on an entry, a heatmap cell) is left as it is. The menu's entries are
timeline.py's, from a real figure."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from commscope.analyze.timeline_bars import timeline_bars
from paths import ROOT
from report_trace import make_trace
from reports.timeline import timeline_figure

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="no node to run report.js's csFollowMenu")


def follow(buttons: list, active: int, xaxis: dict, ev: dict) -> list:
    """The relayout updates csFollowMenu makes for a figure whose menu is `buttons` at `active`."""
    src = (ROOT / "reports" / "static" / "report.js").read_text(encoding="utf-8")
    start = src.index("function csFollowMenu")
    fn = src[start:src.index("\n}\n", start) + 3]
    gd = {"layout": {"updatemenus": [{"buttons": buttons, "active": active}], "xaxis": xaxis}}
    code = (f"var calls = [];\nvar Plotly = {{relayout: function (gd, u) {{ calls.push(u); }}}};\n{fn}\n"
            f"csFollowMenu({json.dumps(gd)}, {json.dumps(ev)});\nconsole.log(JSON.stringify(calls));")
    out = subprocess.run(["node", "-e", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def menu():
    fig = timeline_figure(timeline_bars(make_trace(steps=(0, 1, 2))))
    return [b.to_plotly_json() for b in fig.layout.updatemenus[0].buttons]


def test_a_drag_zoom_names_no_step_and_a_reset_names_the_whole_figure(menu):
    assert [b["label"] for b in menu] == ["all steps (0–2)", "step 0", "step 1", "step 2"]
    step1 = menu[2]["args"][0]["xaxis.range"]
    dragged = [step1[0] + 0.1, step1[1] - 0.1]
    assert follow(menu, 2, {"range": dragged, "autorange": False},
                  {"xaxis.range[0]": dragged[0], "xaxis.range[1]": dragged[1]}) == [{"updatemenus[0].active": -1}]
    # a double-click: plotly autoranges the axis, the first entry's view
    assert follow(menu, 2, {"range": [0, 9], "autorange": True}, {"xaxis.autorange": True}) == [
        {"updatemenus[0].active": 0}]
    # a zoom that lands on a step's own range names it
    assert follow(menu, -1, {"range": step1, "autorange": False},
                  {"xaxis.range[0]": step1[0], "xaxis.range[1]": step1[1]}) == [{"updatemenus[0].active": 2}]


def test_a_relayout_that_set_the_menu_is_left_alone(menu):
    step1 = menu[2]["args"][0]["xaxis.range"]
    # a click on "step 1": plotly sets the menu, then relayouts with the entry's args
    assert follow(menu, 2, {"range": step1, "autorange": False}, menu[2]["args"][0]) == []
    assert follow(menu, 1, {"range": [0, 1], "autorange": False},
                  {"xaxis.range": [0, 1], "updatemenus[0].active": 1}) == []


def test_a_relayout_that_leaves_the_x_axis_alone_keeps_the_entry_a_zoom_chose(menu):
    """A heatmap cell zooms to one rank's window of step 1 and names "step 1"; choosing a rank in the
    selector then changes only the figure's height: the menu keeps naming step 1 (it went blank)."""
    step1 = menu[2]["args"][0]["xaxis.range"]
    rank_window = [step1[0], step1[1] + 0.003 * (step1[1] - step1[0]) + 1]  # not the entry's own range
    assert follow(menu, 2, {"range": rank_window, "autorange": False}, {"height": 900}) == []
    # a pan afterwards does move off the step: the menu then names none
    assert follow(menu, 2, {"range": rank_window, "autorange": False},
                  {"xaxis.range[0]": rank_window[0], "xaxis.range[1]": rank_window[1]}) == [
        {"updatemenus[0].active": -1}]
