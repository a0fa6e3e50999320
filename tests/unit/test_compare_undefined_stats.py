"""`commscope compare` prints an undefined statistic (σ of one run, the baseline's own Time p, p of one run)
as "–" in the terminal table and the markdown table; --json keeps null."""
from __future__ import annotations

import json
import shutil

import pytest

from bad_inputs import invoke
from paths import TESTS

LOGS = TESTS / "data" / "modded-nanogpt-logs"


@pytest.fixture
def groups(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(LOGS / "premul-o" / "NorMuon_Fixes_and_PreMul-O_-_06113.txt", one)
    return [str(LOGS / "baseline"), str(one)]


def test_markdown_undefined_is_a_dash(groups):
    code, out, err = invoke(["compare", *groups, "--markdown"])
    assert code == 0, err
    rows = out.splitlines()
    assert rows[2] == "| baseline | 4 | 132.7217 | 0.1176 | 0.0000 | – | 3.2792 | 0.0008 | 0.0000 | 0.0632 |"
    assert rows[3] == "| one | 1 | 131.1570 | – | -1.5647 | – | 3.2757 | – | -0.0035 | – |"
    assert "NaN" not in out


def test_terminal_undefined_is_a_dash(groups, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = invoke(["compare", *groups])
    assert code == 0, err
    one = next(x for x in out.splitlines() if x.startswith("│ one"))
    assert [c.strip() for c in one.strip("│ ").split("│")] == ["one", "1", "131.1570", "–", "-1.5647", "–",
                                                              "3.2757", "–", "-0.0035", "–"]
    assert "NaN" not in out


def test_json_keeps_null(groups):
    code, out, err = invoke(["compare", *groups, "--json"])
    assert code == 0, err
    base, one = json.loads(out)["groups"]
    assert base["time_p"] is None and one["time_std"] is None and one["loss_p"] is None
    assert one["time_mean"] == pytest.approx(131.157)
