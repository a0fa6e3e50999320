"""commscope plan --cost measured RUN: per-matrix times calibrated from a run's update:<label> regions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from commscope.errors import UserError
from commscope.commands.plan import measured_calibration as calibrate
from rundirs import write_run

MS = 1_000_000


def make_run(path: Path, update_ms: dict[int, dict[str, list[float]]], preset="tiny") -> Path:
    """Run dir whose rank r spends update_ms[r][label][step] ms in update:<label> each step."""
    events = {}
    for rank, labels in update_ms.items():
        lines, t = [], 10**15
        n_steps = len(next(iter(labels.values())))
        for s in range(n_steps):
            start = t
            for label, per_step in labels.items():
                lines.append({"kind": "region", "rank": rank, "step": s, "name": f"update:{label}", "micro_step": None,
                              "start_ns": t, "end_ns": t + int(per_step[s] * MS), "timing": "wall"})
                t += int(per_step[s] * MS) + 1000
            lines.append({"kind": "step", "rank": rank, "step": s, "loss": 1.0, "start_ns": start, "end_ns": t,
                          "tokens": 1})
            t += 1000
        events[rank] = lines
    return write_run(path, events, summary={"status": "completed", "preset": preset},
                     config={"args": {"preset": preset}})


@pytest.fixture
def run(tmp_path):
    # tiny at 2 ranks: attn 24 (64, 64) matrices → 12 per rank; mlp 16 (256, 64) → 8 per rank.
    # step 0 is warm-up (dropped); rank 1 is slower on attn.
    return make_run(tmp_path / "run", {
        0: {"attn": [99, 12, 12, 12], "mlp": [99, 16, 16, 16]},
        1: {"attn": [99, 13, 13, 13], "mlp": [99, 16, 16, 16]},
    })


def test_calibrate(run):
    c = calibrate(str(run))
    # median over (rank, step) of attn: {12, 13} ×3 → 12.5 ms / 12 matrices; mlp 16 / 8
    assert c["ms_per_matrix"][(64, 64)] == pytest.approx(12.5 / 12, rel=1e-6)
    assert c["ms_per_matrix"][(256, 64)] == pytest.approx(2.0, rel=1e-6)
    assert c["measured_makespan_ms"] == pytest.approx(29.0, rel=1e-6) and c["steps"] == 3


def test_cli_measured(run):
    res = CliRunner().invoke(app, ["plan", str(run), "--preset", "tiny", "--world-size", "2", "--cost", "measured",
                                   "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["measured"]["measured_makespan_ms"] == pytest.approx(29.0, rel=1e-6)
    assert data["measured"]["predicted_bank_makespan_ms"] == pytest.approx(12.5 + 16.0, rel=1e-6)
    assert data["time_model"]["kind"] == "measured"
    # a plan for another preset needs shapes this run never timed: refused, not extrapolated
    res = CliRunner().invoke(app, ["plan", str(run), "--preset", "speedrun", "--cost", "measured"])
    assert isinstance(res.exception, UserError) and "plan the run's own preset" in str(res.exception)


def test_cli_measured_plans_the_runs_own_preset_when_none_is_named():
    """The README demo's run records preset tiny in config.json: `plan RUN --cost measured` plans it."""
    from paths import TESTS

    res = CliRunner().invoke(app, ["plan", str(TESTS / "data" / "cpurun-hooks-gloo2"), "--world-size", "2",
                                   "--cost", "measured", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["preset"] == "tiny"


def test_cli_measured_plans_the_runs_own_world_size_when_none_is_named():
    from paths import TESTS

    run = str(TESTS / "data" / "cpurun-hooks-gloo2")  # 2 ranks
    res = CliRunner().invoke(app, ["plan", run, "--cost", "measured", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["world_size"] == doc["measured"]["run_world_size"] == 2
    res = CliRunner().invoke(app, ["plan", run, "--cost", "measured", "--world-size", "4", "--json"])
    assert json.loads(res.output)["world_size"] == 4  # a named world size still wins
    assert json.loads(CliRunner().invoke(app, ["plan", "--preset", "tiny", "--json"]).output)["world_size"] == 8


def test_no_update_regions_is_a_user_error(tmp_path):
    r = make_run(tmp_path / "r", {0: {"other": [1.0]}})
    with pytest.raises(UserError, match="no update"):
        calibrate(str(r))


def test_profiler_traces_are_no_run_directory_for_measured_costs():
    from paths import TESTS

    with pytest.raises(UserError, match=r"holds profiler traces: --cost measured needs a run directory of "):
        calibrate(str(TESTS / "data" / "modded-nanogpt-8xh100"))
