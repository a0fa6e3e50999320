"""bench/layout_cases.py on CPU: every case is timed beside its twin and judged by commscope's rule."""
from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
from paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_layout_cases_cpu(tmp_path, capsys):
    lc = importlib.import_module("layout_cases")
    r = lc.main(["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--repeats", "1"])
    rows = {x["case"].split(" (")[0]: x for x in r["rows"]}
    # the rule on the strides a trace records: stride-order differences flag, broadcasts do not
    assert {k: v["flagged"] for k, v in rows.items()} == {
        "innermost swap": True, "outer permutation": True, "channels_last vs contiguous": True,
        "broadcast row vector": False, "expanded row view": False, "expanded column view": False}
    assert rows["outer permutation"]["src_strides"] == [128, 2048, 1]
    for x in r["rows"]:
        assert x["ms"] > 0 and x["twin_ms"] > 0 and x["slowdown"] == pytest.approx(x["ms"] / x["twin_ms"])
        assert x["missed"] == (x["slowdown"] >= 1.3 and not x["flagged"]) and x["kernel"] is None
    assert json.loads((tmp_path / "layout_cases.json").read_text()) == r
    out = capsys.readouterr().out
    assert out.startswith("## Layout cases") and out.count("\n| ") == 1 + len(r["rows"])
