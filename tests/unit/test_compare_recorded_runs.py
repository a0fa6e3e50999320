"""`commscope compare` reads run directories a training script wrote through commscope.record (no
summary.json): a run when every rank's status says it ended, its time and loss from rank 0's step
records; any other ending is skipped with the reason."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from commscope.errors import UserError
from commscope.load.run_groups import load_group
from paths import TESTS

SRC = TESTS / "data" / "cpurun-hooks-gloo2"


def recorded(tmp_path, name="r1"):
    d = tmp_path / name
    shutil.copytree(SRC, d)
    (d / "summary.json").unlink()  # what commscope.record leaves: no launcher, no summary
    # each its own run: a step that ended some ns later (identical measurements are copies, counted once)
    ev = d / "rank0" / "events.jsonl"
    rows = [json.loads(x) for x in ev.read_text().splitlines()]
    last = max(i for i, x in enumerate(rows) if x["kind"] == "step")
    rows[last]["end_ns"] += sum(map(ord, name))
    ev.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in rows))
    return d


def test_a_recorded_run_is_timed_by_rank_0s_step_records(tmp_path):
    d = recorded(tmp_path)
    steps = [json.loads(x) for x in (d / "rank0" / "events.jsonl").read_text().splitlines() if '"kind":"step"' in x]
    g = load_group(d)
    (run,) = g.runs
    assert run.steps == 3 and run.loss == steps[-1]["loss"] == json.loads((SRC / "summary.json").read_text())["losses"][-1]
    assert run.time_s == pytest.approx(math.fsum((s["end_ns"] - s["start_ns"]) / 1e6 for s in steps) / 1000, rel=1e-12)
    assert run.work["world_size"] == 2 and run.work["preset"] == "tiny"  # meta.json's size, config.json's args


def test_a_folder_of_recorded_runs_is_a_group_and_unfinished_ones_are_skipped_with_why(tmp_path):
    group = tmp_path / "g"
    group.mkdir()
    recorded(group, "ok")
    recorded(group, "exited")
    for r in (0, 1):
        (group / "exited" / f"rank{r}" / "status.json").write_text(json.dumps(
            {"status": "exited", "error": "process exited without Recorder.close()", "last_step": 2}))
    failed = recorded(group, "failed")
    (failed / "rank1" / "status.json").write_text(json.dumps({"status": "failed", "error": "x", "last_step": 1}))
    (recorded(group, "running") / "rank0" / "status.json").unlink()
    g = load_group(group)
    assert sorted(r.path.name for r in g.runs) == ["exited", "ok"]
    assert {p.name: why for p, why in g.skipped} == {
        "failed": "incomplete: rank 1 status 'failed'",
        "running": "incomplete: rank 0 has no status.json (still running, or killed)"}
    # rank 1 killed outright (no status), rank 0 failed after it: the silent rank is named first
    killed = recorded(group, "killed")
    (killed / "rank1" / "status.json").unlink()
    (killed / "rank0" / "status.json").write_text(json.dumps({"status": "failed", "error": "peer", "last_step": 1}))
    assert dict(load_group(group).skipped)[killed] == ("incomplete: rank 1 has no status.json (still running, or "
                                                       "killed); rank 0 status 'failed'")


def test_a_recorded_run_without_losses_says_what_to_record(tmp_path):
    d = recorded(tmp_path)
    for r in (0, 1):
        f = d / f"rank{r}" / "events.jsonl"
        f.write_text("".join(x.replace('"loss":', '"was_loss":') + "\n" for x in f.read_text().splitlines()))
    with pytest.raises(UserError, match=r"rank 0's last step has no loss \(set st.loss in rec.step\)"):
        load_group(d)


def test_a_recorded_run_whose_loss_diverged_says_so(tmp_path):
    """A NaN loss is written as null beside loss_nonfinite (JSON has no NaN): compare tells a run that
    diverged from one that recorded no loss, and the steps frame holds the NaN the loop saw."""
    from commscope.load import load_path
    from commscope.recording import Recorder

    d = tmp_path / "nan"
    rec = Recorder(d, rank=0, world_size=1)
    for s, loss in enumerate((2.5, float("inf"), float("nan"))):
        with rec.step(s) as st:
            st.loss = torch.tensor(loss) if s == 2 else loss
    rec.close()
    steps = [json.loads(x) for x in (d / "rank0" / "events.jsonl").read_text().splitlines()]
    assert [(r["loss"], r.get("loss_nonfinite")) for r in steps] == [(2.5, None), (None, "inf"), (None, "nan")]
    loss = load_path(str(d)).steps["loss"].tolist()
    assert loss[0] == 2.5 and loss[1] == math.inf and math.isnan(loss[2])
    with pytest.raises(UserError, match=r"diverged: rank 0's last step's loss is nan"):
        load_group(d)


@pytest.mark.parametrize("content, why", [
    ("{not json", "unreadable: rank 1 status.json (Expecting property name"),
    ('{"status": 3, "error": null, "last_step": 1}', "unreadable: rank 1 status.json (status.json: status is 3, "
                                                      'expected one of "completed", "failed", "interrupted", '
                                                      '"exited")'),
    ('{"status": "banana", "error": null, "last_step": 1}', "unreadable: rank 1 status.json (status.json: status "
                                                            "is 'banana', expected one of \"completed\", "
                                                            '"failed", "interrupted", "exited")'),
    ('["completed"]', "unreadable: rank 1 status.json (status.json is not a JSON object)"),
    ('{"error": null, "last_step": 1}', "unreadable: rank 1 status.json (status.json has no status)"),
])
def test_a_broken_status_is_one_reason_naming_the_rank_never_a_traceback(tmp_path, content, why):
    group = tmp_path / "g"
    group.mkdir()
    recorded(group, "ok")
    (recorded(group, "broken") / "rank1" / "status.json").write_text(content)
    g = load_group(group)
    assert [r.path.name for r in g.runs] == ["ok"]
    ((path, reason),) = g.skipped
    assert path.name == "broken" and reason.startswith(why), reason


def test_a_status_that_is_not_a_file_is_skipped_without_reading_it(tmp_path):
    import os

    d = recorded(tmp_path)
    (d / "rank0" / "status.json").unlink()
    os.mkfifo(d / "rank0" / "status.json")  # opening it would block
    with pytest.raises(UserError, match=r"no usable runs \(r1: unreadable: rank 0 status.json is not a regular file\)"):
        load_group(d)


def test_a_folder_of_log_folders_points_one_level_down():
    """Given the parent of the groups, compare says where the runs are, as report does for traces."""
    with pytest.raises(UserError, match=r"baseline: not a run: no summary.json and no rank folders; runs or logs "
                                        r"one level down in it: give that folder"):
        load_group(TESTS / "data" / "modded-nanogpt-logs")
