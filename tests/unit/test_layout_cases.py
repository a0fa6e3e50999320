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
    # the rule on what a CPU trace records: stride-order differences flag; broadcast reads need the generic
    # CUDA kernel's name as evidence, which a CPU op has not
    assert {k: v["kind"] for k, v in rows.items()} == {
        "innermost swap": "stride order", "outer permutation": "stride order",
        "channels_last vs contiguous": "stride order", "broadcast row vector": None, "expanded row view": None,
        "expanded column view": None, "0-dim tensor": None}
    assert all(v["flagged"] == (v["kind"] is not None) for v in rows.values())
    assert rows["outer permutation"]["src_strides"] == [128, 2048, 1]
    for x in r["rows"]:
        assert x["ms"] > 0 and x["twin_ms"] > 0 and x["slowdown"] == pytest.approx(x["ms"] / x["twin_ms"])
        assert x["missed"] == (x["slowdown"] >= 1.3 and not x["flagged"]) and x["kernel"] is None
    assert json.loads((tmp_path / "layout_cases.json").read_text()) == r
    out = capsys.readouterr().out
    assert out.startswith("## Layout cases") and out.count("\n| ") == 1 + len(r["rows"])
