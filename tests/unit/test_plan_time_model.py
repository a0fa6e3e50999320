"""`commscope plan`'s header names its time model in words, not as a Python dict."""
from __future__ import annotations

from bad_inputs import invoke
from test_plan_measured import make_run


def _header(argv: list[str]) -> str:
    code, out, err = invoke(["plan", *argv])
    assert code == 0, err
    return out.splitlines()[0]


def test_flops_time_model_in_words():
    assert _header(["--world-size", "4"]).endswith("; time model: FLOPs at 300 TFLOP/s")
    assert _header(["--world-size", "4", "--tflops", "989.5"]).endswith("; time model: FLOPs at 989.5 TFLOP/s")


def test_measured_time_model_lists_each_shape(tmp_path, monkeypatch):
    # tiny at 2 ranks: 12 (64, 64) attn matrices per rank in 12.5 ms (median), 8 (256, 64) mlp ones in 16 ms
    run = make_run(tmp_path / "run", {0: {"attn": [99, 12, 12, 12], "mlp": [99, 16, 16, 16]},
                                      1: {"attn": [99, 13, 13, 13], "mlp": [99, 16, 16, 16]}})
    monkeypatch.setenv("COLUMNS", "300")
    header = _header([str(run), "--preset", "tiny", "--world-size", "2", "--cost", "measured"])
    assert header.endswith("; time model: measured per matrix: 64x64 1.04 ms, 256x64 2 ms")
    assert "{" not in header and "kind" not in header
