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


def make_run(path: Path, update_ms: dict[int, dict[str, list[float]]], preset="tiny", shards=None) -> Path:
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
                     config={"args": {"preset": preset}, **({"shards": shards} if shards else {})})


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
    assert data["measured"]["predicted_run_makespan_ms"] == pytest.approx(12.5 + 16.0, rel=1e-6)
    assert data["measured"]["run_partition"] == "bank"
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


def _owned(counts: list[int], pad: int = 0) -> list[int]:
    """Owners in bank order: the first counts[0] matrices rank 0's, the next rank 1's, then `pad` padding."""
    return [r for r, n in enumerate(counts) for _ in range(n)] + [-1] * pad


@pytest.fixture
def owners_run(tmp_path):
    """A run of tiny at 2 ranks whose matrices were assigned per owner, unequally (attn 8 / 16, mlp 4 / 10
    real ones and 2 padding): an attn matrix takes 1 ms on rank 0 and 1.5 ms on rank 1, an mlp one 2 ms."""
    shards = {"attn": {"comms": "sharded", "owners": _owned([8, 16]), "counts": [8, 16]},
              "mlp": {"comms": "sharded", "owners": _owned([4, 10], pad=2), "counts": [4, 10]}}
    return make_run(tmp_path / "owners", {
        0: {"attn": [99, 8, 8, 8], "mlp": [99, 8, 8, 8]},
        1: {"attn": [99, 24, 24, 24], "mlp": [99, 20, 20, 20]},
    }, shards=shards)


def test_calibrate_divides_by_the_matrices_each_rank_owned(owners_run):
    """An alpha-lpt run's ranks updated unequal numbers of matrices (config.json shards.<label>.counts): one
    matrix's time is each rank's update over its own count, not over the bank layout's even split (which
    would give a median of 8/12 and 24/12 ms for attn, 8/8 and 20/8 ms for mlp)."""
    c = calibrate(str(owners_run))
    assert c["ms_per_matrix"][(64, 64)] == pytest.approx(1.25, rel=1e-6)  # median of 1 and 1.5
    assert c["ms_per_matrix"][(256, 64)] == pytest.approx(2.0, rel=1e-6)
    assert c["measured_makespan_ms"] == pytest.approx(44.0, rel=1e-6)


def test_measured_is_set_beside_the_prediction_for_the_runs_own_owners(owners_run):
    res = CliRunner().invoke(app, ["plan", str(owners_run), "--cost", "measured", "--json"])
    assert res.exit_code == 0, res.output
    m = json.loads(res.output)["measured"]
    # rank 1: 16 attn × 1.25 ms + 10 mlp × 2 ms, the recorded owners' slowest rank (the bank layout's
    # ranks have 12 × 1.25 + 8 × 2 = 31 ms each)
    assert m["run_partition"] == "owners" and m["predicted_run_makespan_ms"] == pytest.approx(40.0, rel=1e-6)
    text = CliRunner().invoke(app, ["plan", str(owners_run), "--cost", "measured"]).output
    assert "predicted for the run's recorded matrix owners 40.0000 ms" in text


def test_a_rank_that_owned_none_of_a_label_gives_no_sample(tmp_path):
    shards = {"attn": {"owners": _owned([0, 24]), "counts": [0, 24]},
              "mlp": {"owners": _owned([7, 7], pad=2), "counts": [7, 7]}}
    run = make_run(tmp_path / "r", {0: {"attn": [9, 0.001, 0.001], "mlp": [9, 7, 7]},
                                     1: {"attn": [9, 24, 24], "mlp": [9, 14, 14]}}, shards=shards)
    c = calibrate(str(run))
    assert c["ms_per_matrix"][(64, 64)] == pytest.approx(1.0, rel=1e-6)
    assert c["ms_per_matrix"][(256, 64)] == pytest.approx(1.5, rel=1e-6)  # median of 1 and 2 ms


@pytest.mark.parametrize("args, said", [
    (["--cost", "measured", "--tflops", "5"], "--tflops sets the flops time model; with --cost measured the run's "
                                              "update timings are the model: leave one out"),
    (["--capacity-mb", "64"], "--capacity-mb sizes the tensor-parallel micro-groups: give it with --tp"),
])
def test_an_option_that_would_change_nothing_is_refused(run, args, said):
    argv = ["plan", *([str(run)] if "measured" in args else []), *args]
    res = CliRunner().invoke(app, argv)
    assert isinstance(res.exception, UserError) and str(res.exception) == said


@pytest.mark.parametrize("attn_owners, said", [
    (_owned([8, 8]), "config.json gives 16 matrix owners for attn, whose bank holds 24 matrices"),
    (_owned([8, 15]) + [2], "config.json names owner 2 for a attn matrix, not a rank of 2 (or -1)"),
    (_owned([8, 15]) + ["1"], "config.json names owner '1' for a attn matrix, not a rank of 2 (or -1)"),
])
def test_recorded_owners_that_cannot_be_the_labels_are_refused(tmp_path, attn_owners, said):
    """The counts each rank's update divides by come from the recorded owners alone: owners of another
    length than the bank, or naming no rank, are one line, not a per-matrix time off by a bank's size."""
    shards = {"attn": {"owners": attn_owners}, "mlp": {"owners": _owned([7, 7], pad=2)}}
    run = make_run(tmp_path / "r", {0: {"attn": [9, 8, 8], "mlp": [9, 7, 7]},
                                     1: {"attn": [9, 8, 8], "mlp": [9, 7, 7]}}, shards=shards)
    with pytest.raises(UserError) as e:
        calibrate(str(run))
    assert str(e.value) == f"{run}: {said}"


def test_counts_beside_the_owners_are_not_read(tmp_path):
    """config.json's shards.<label>.counts restate the owners; what a rank updated is read from the owners,
    so counts that disagree with them (a hand-edited or foreign config) change nothing."""
    shards = {"attn": {"owners": _owned([8, 16]), "counts": [12, 12]},
              "mlp": {"owners": _owned([4, 10], pad=2), "counts": [99]}}
    run = make_run(tmp_path / "r", {0: {"attn": [99, 8, 8], "mlp": [99, 8, 8]},
                                     1: {"attn": [99, 24, 24], "mlp": [99, 20, 20]}}, shards=shards)
    c = calibrate(str(run))
    assert c["ms_per_matrix"][(64, 64)] == pytest.approx(1.25, rel=1e-6)  # 8/8 and 24/16; counts: 8/12, 24/12
    assert c["ms_per_matrix"][(256, 64)] == pytest.approx(2.0, rel=1e-6)


def test_a_crashed_runs_partial_last_step_is_left_out_and_the_plan_says_so(tmp_path):
    """Rank 1 died in step 3 before its updates: the step's max over rank 0 alone (12 + 16 = 28 ms) is no
    makespan; the makespan is over steps 1-2 (29 ms), and the terminal names the status and the step."""
    from commscope.commands.plan import measured_calibration
    from rundirs import write_json

    run = make_run(tmp_path / "run", {0: {"attn": [99, 12, 12, 12], "mlp": [99, 16, 16, 16]},
                                      1: {"attn": [99, 13, 13], "mlp": [99, 16, 16]}})
    write_json(run / "summary.json", {"schema_version": 1, "world_size": 2, "status": "crashed",
                                      "preset": "tiny"})
    c = measured_calibration(str(run))
    assert c["partial_steps"] == [3] and c["steps"] == 2 and c["run_status"] == "crashed"
    assert c["measured_makespan_ms"] == pytest.approx(29.0, rel=1e-6)
    res = CliRunner().invoke(app, ["plan", str(run), "--cost", "measured"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "note: the run did not complete (status crashed): its finished steps calibrate the plan" in out
    assert "note: step(s) 3 not recorded by every rank that updates matrices: left out of the measured makespan" in out
    data = json.loads(CliRunner().invoke(app, ["plan", str(run), "--cost", "measured", "--json"]).stdout)
    assert data["measured"]["partial_steps"] == [3] and data["measured"]["run_status"] == "crashed"


def test_a_completed_run_has_no_notes(run):
    res = CliRunner().invoke(app, ["plan", str(run), "--cost", "measured"])
    assert res.exit_code == 0 and "note: " not in res.stdout
    assert calibrate(str(run))["partial_steps"] == [] and calibrate(str(run))["run_status"] == "completed"


def test_a_recorded_runs_status_comes_from_its_ranks(tmp_path):
    """A run a training script recorded has no summary.json: its ranks' status.json say how it ended."""
    from commscope.commands.plan import _run_status

    assert _run_status({"status": {"0": {"status": "completed"}, "1": {"status": "exited"}}}) == "completed"
    assert _run_status({"status": {"0": {"status": "completed"}, "1": {"status": "failed"}}}) == "failed"
    assert _run_status({"summary": {}, "status": {}}) is None
