"""The GPU proof of `commscope layout`, on a trace pair recorded on an NVIDIA H200.

tests/data/layout_h200/{standard,transposed}: `commscope run --nproc 1 --device cuda --preset speedrun
--steps 8 --grad-accum 2 --profile 4:6 --head-layout standard|transposed` (bench/gpu_suite.sh, step
run_head_*), rank 0's events and Kineto trace, the trace trimmed to the first profiled step (4) by
tests/data/trim_fixtures.py. Recorded before the Polar Express right-multiply change, so the optimizer's
mlp-bank transposes still show up there; these tests only look at the LM head.
"""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from commscope.analyze.layout_report import layout_report
from commscope.load import load_path
from paths import TESTS

FIXTURES = TESTS / "data" / "layout_h200"
V, D = 50304, 768


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = {}
    for layout in ("standard", "transposed"):
        copy = tmp_path_factory.mktemp(layout) / layout  # never analyze inside the repository's fixture
        shutil.copytree(FIXTURES / layout, copy)
        out[layout] = layout_report(load_path(str(copy)))
    return out


def _raw_head_grad_ops(layout):
    """Read straight from the raw trace (json, not commscope's reader): the cpu ops that copy or add the
    transposed-view (V, D) head gradient into its contiguous buffer."""
    with gzip.open(FIXTURES / layout / "rank0" / "trace.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    return sorted(e["name"] for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::copy_", "aten::add_")
                  and e["args"].get("Input Dims", [])[:2] == [[V, D]] * 2
                  and e["args"].get("Input Strides", [])[:2] == [[D, 1], [1, V]])


def _head_backward(findings):
    rows = findings[findings["where"].str.startswith("backward") & findings["where"].str.contains("lm_head")]
    return [r for _, r in rows.iterrows()]


def test_standard_head_gradient_accumulation_is_a_high_confidence_mismatch(reports):
    found = _head_backward(reports["standard"].findings)
    ops = sorted(f['op'] for f in found)
    # micro-step 0: AccumulateGrad copies the transposed-view gradient; micro-step 1: it adds it (1 profiled step)
    assert ops == _raw_head_grad_ops("standard") == ["aten::add_", "aten::copy_"]
    for f in found:
        assert f["where"] == "backward: lm_head grad accumulation"
        assert f["confidence"] == "high" and not f["deliberate"]
        assert [list(d) for d in f["dims"][:2]] == [[V, D], [V, D]]
        assert [list(s) for s in f["strides"][:2]] == [[D, 1], [1, V]]  # contiguous dst, transposed src
        assert "vectorized" not in f["kernel"] and f["kernel"].startswith("void at::native::elementwise_kernel")
        # 154 MB fp32 per op at well under half the H200's copy bandwidth; aligned would save most of it
        assert 200 < f["duration_us"] < 400 and f["achieved_gbps"] < 0.5 * f["peak_gbps"]
        assert f["est_saving_us"] > 0.5 * f["duration_us"]


def test_transposed_head_has_no_lm_head_finding(reports):
    findings = reports["transposed"].findings
    assert _head_backward(findings) == [] and _raw_head_grad_ops("transposed") == []
    assert not [1 for _, f in findings.iterrows() if [V, D] in [list(d) for d in f["dims"][:2]]]
    assert len(findings)  # the analysis did run: the (pre-fix) mlp-bank transposes are still found
