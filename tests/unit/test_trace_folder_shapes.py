"""Trace folders as users keep them: a config.json beside the profiler output, traces one folder down."""
from __future__ import annotations

import shutil

import pytest
from paths import TESTS

from commscope.errors import UserError
from commscope.load import load_path

TRACES = TESTS / "data" / "modded-nanogpt-8xh100"


def _copy_traces(dst):
    dst.mkdir(parents=True)
    for f in TRACES.iterdir():
        if f.name.endswith((".json", ".json.gz")):
            shutil.copy(f, dst / f.name)


def test_a_config_json_beside_kineto_traces_does_not_make_a_run_directory(tmp_path):
    _copy_traces(tmp_path / "mixed")
    (tmp_path / "mixed" / "config.json").write_text('{"lr": 0.1}')
    plain = load_path(str(TRACES))
    mixed = load_path(str(tmp_path / "mixed"))
    assert mixed.source == "kineto" and mixed.ranks == plain.ranks
    assert len(mixed.collectives) == len(plain.collectives) and len(mixed.kernels) == len(plain.kernels)
    assert [p for p in mixed.problems if p.startswith("config.json beside the traces")] == [
        "config.json beside the traces is not a commscope run's (no rank*/ folders, no run marker): the folder "
        "is read as Kineto traces, config.json left out"]


@pytest.mark.parametrize("names", [["summary.json"], ["config.json", "summary.json"]])
def test_a_summary_json_beside_kineto_traces_does_not_make_a_run_directory_either(tmp_path, names):
    """A metrics summary.json is at least as common beside profiler output as a config.json."""
    _copy_traces(tmp_path / "mixed")
    for n in names:
        (tmp_path / "mixed" / n).write_text('{"accuracy": 0.9}')
    mixed = load_path(str(tmp_path / "mixed"))
    assert mixed.source == "kineto" and mixed.ranks == load_path(str(TRACES)).ranks
    said = " and ".join(names)
    assert [p for p in mixed.problems if "beside the traces" in p] == [
        f"{said} beside the traces {'is' if len(names) == 1 else 'are'} not a commscope run's (no rank*/ folders, "
        f"no run marker): the folder is read as Kineto traces, {said} left out"]
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "summary.json").write_text('{"accuracy": 0.9}')
    with pytest.raises(UserError, match="is a run directory without rank"):  # no traces beside it: an empty run directory
        load_path(str(tmp_path / "alone"))


def test_a_config_json_alone_is_still_an_empty_run_directory(tmp_path):
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    with pytest.raises(UserError, match="is a run directory without rank"):
        load_path(str(tmp_path))


def test_traces_one_folder_down_are_pointed_at(tmp_path):
    _copy_traces(tmp_path / "tb" / "worker1")
    with pytest.raises(UserError) as e:
        load_path(str(tmp_path / "tb"))
    assert str(e.value).endswith("; traces one level down in worker1/: give that folder")


def test_per_rank_folders_of_profiler_output_are_read_as_traces(tmp_path):
    """rank<N>/trace.json.gz with nothing of a commscope run (a natural layout for per-rank profiler output)
    is a folder of traces, not a run directory whose ranks wrote no events.jsonl; a rank folder holding a
    recorder's file keeps the folder a run directory."""
    plain = load_path(str(TRACES))
    for r in plain.ranks:
        (tmp_path / "job" / f"rank{r}").mkdir(parents=True)
        shutil.copy(TRACES / f"rank{r}.json.gz", tmp_path / "job" / f"rank{r}" / "trace.json.gz")
    tr = load_path(str(tmp_path / "job"))
    assert tr.source == "kineto" and tr.ranks == plain.ranks and len(tr.collectives) == len(plain.collectives)
    (tmp_path / "job" / "rank0" / "events.jsonl").write_text("")
    assert load_path(str(tmp_path / "job")).source == "run"
