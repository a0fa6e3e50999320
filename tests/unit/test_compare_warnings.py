"""`compare` says when its groups' times measure different work: run directories of different step
counts or of a different preset, batch size, gradient accumulation or world size (between the groups or
among one group's runs), on stderr and in --json's `warnings`; like runs get none."""
import json

from typer.testing import CliRunner

from commscope.analyze.compare import comparability_warnings
from commscope.cli import app
from commscope.load.run_groups import load_group
from rundirs import write_run


def run(path, steps, grad_accum=1, preset="tiny", world_size=2, config=True):
    times = [100.0 + i for i in range(steps)]
    cfg = {"args": {"preset": preset, "batch_size": 16, "grad_accum": grad_accum, "comm_schedule": "explicit"}}
    return write_run(path, {}, world_size=world_size, config=cfg if config else None,
                     summary={"status": "completed", "step_times_ms": times, "losses": [3.0] * steps})


def test_like_runs_give_no_warning(tmp_path):
    run(tmp_path / "a" / "r1", 40), run(tmp_path / "a" / "r2", 40), run(tmp_path / "b" / "r1", 40)
    assert comparability_warnings([load_group(tmp_path / "a"), load_group(tmp_path / "b")]) == []


def test_step_count_and_work_differences_are_named(tmp_path):
    run(tmp_path / "run2", 40)
    run(tmp_path / "run2h", 10, grad_accum=2)
    got = comparability_warnings([load_group(tmp_path / "run2"), load_group(tmp_path / "run2h")])
    assert got == ["the groups differ in step count: run2 40, run2h 10; their Time +/- compares different work "
                   "(Time is the sum of step times).",
                   "the groups differ in grad accum: run2 1, run2h 2; their Time +/- compares different work."]


def test_runs_within_a_group_and_unknown_config(tmp_path):
    run(tmp_path / "a" / "r1", 40), run(tmp_path / "a" / "r2", 20)
    run(tmp_path / "b" / "r1", 40, config=False)  # recorded by another script: no config.json
    got = comparability_warnings([load_group(tmp_path / "a"), load_group(tmp_path / "b")])
    assert got[0] == "the runs of a differ in step count (40, 20): its Time mixes unlike runs."
    assert "the groups differ in preset: a tiny, b unknown; their Time +/- compares different work." in got
    assert len(got) == 4  # step count within a; preset, batch size, grad accum unknown on b


def test_cli_prints_warnings_on_stderr_and_in_json(tmp_path):
    a, b = run(tmp_path / "run2", 40), run(tmp_path / "run2h", 10)
    res = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 0
    assert "warning: the groups differ in step count: run2 40, run2h 10" in res.stderr
    assert "warning: " not in res.stdout
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    doc = json.loads(res.stdout)
    assert doc["warnings"][0].startswith("the groups differ in step count: run2 40, run2h 10")
    assert [g["steps"] for g in doc["groups"]] == [[40], [10]]
