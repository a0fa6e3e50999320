"""Control characters in the user's data never reach the terminal raw (reports.console, commscope.util.text):
a label holding an ESC sequence (clear screen, set the window title) or a newline is printed with them
written as escapes, in the hooks table, the report's terminal summary and the warnings on stderr."""
import json
import shutil

import pytest

from commscope.util.text import escape_controls
from paths import TESTS
from test_cli import run_main

EVIL = "\x1b[2J\x1b]0;pwned\x07attn"
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07attn"


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", d)
    for events in d.glob("rank*/events.jsonl"):
        events.write_text(events.read_text().replace('"label":"attn"', '"label":' + json.dumps(EVIL)))
    return d


def test_escape_controls():
    assert escape_controls(EVIL) == SHOWN
    assert escape_controls("a\nb\u2028c\x7f") == "a\\nb\\u2028c\\x7f"
    assert escape_controls("a\nb\tc", keep_newlines=True) == "a\nb\\tc"
    assert escape_controls("plain é ✓") == "plain é ✓"


@pytest.mark.parametrize("argv", [["hooks"], ["report", "--no-hta"]])
def test_a_label_with_an_escape_sequence_prints_escaped(run, tmp_path, capsys, argv):
    extra = ["-o", str(tmp_path / "page.html")] if argv[0] == "report" else []
    code, out, err = run_main(capsys, *argv, str(run), *extra)
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b[2J" in out


def test_a_label_map_warning_stays_one_line(tmp_path, capsys):
    """A --label-map whose label holds a newline and an ESC: the warning naming it is one escaped line."""
    m = tmp_path / "map.json"
    m.write_text(json.dumps({"x\ny\x1b[2J": 4000, "other": 4000}))  # two labels of one size: a warning
    code, out, err = run_main(capsys, "report", str(TESTS / "data" / "gloo2"), "--json", "--no-hta",
                              "--label-map", str(m))
    assert code == 0, err
    lines = [line for line in err.splitlines() if "x\\ny" in line]
    assert lines and "\x1b" not in err


def test_a_newline_inside_a_label_stays_inside_its_table_row(tmp_path, capsys):
    """A newline in a recorded label would break the hooks table's and the labels table's rows: the loader
    writes it as `\\n`, as it writes a label map's."""
    from commscope.load import load_path

    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    for events in run.glob("rank*/events.jsonl"):
        events.write_text(events.read_text().replace('"label":"attn"', '"label":' + json.dumps("at\ntn")))
    trace = load_path(str(run))
    assert "at\\ntn" in set(trace.collectives["label"]) and "at\\ntn" in set(trace.hooks["label"])
    assert not any("\n" in str(v) for v in trace.collectives["label"])
    code, out, err = run_main(capsys, "hooks", str(run))
    assert code == 0, err
    assert "at\\ntn" in out and "at\ntn" not in out
    m = tmp_path / "map.json"
    m.write_text(json.dumps({"x\ny": 4000}))
    from commscope.load.label_map import read_label_map

    assert read_label_map(m) == {"x\\ny": [4000]}
