"""commscope.load.one_job: the rank folders of a run directory were recorded by one job, by meta.json's
clock.job, else (recordings without it) by started_ns at an aligned clock."""
from __future__ import annotations

import pytest

from commscope.errors import UserError
from commscope.load.one_job import START_SPREAD_NS, check_one_job

T = 1_796_214_200_000_000_000


def _meta(started=T, job=None, rounds=5) -> dict:
    clock = {"offset_ns": 0, "error_ns": 0, "method": "barrier-allgather", "rounds": rounds}
    return {"started_ns": started, "clock": {**clock, **({"job": job} if job else {})}}


def test_one_jobs_folders_pass():
    check_one_job("run", {0: _meta(job="a1"), 1: _meta(T + 5_000_000, job="a1")})
    check_one_job("run", {0: _meta(), 1: _meta(T + START_SPREAD_NS - 1)})  # no job: within the spread
    check_one_job("run", {0: _meta(rounds=0), 1: _meta(T + 10 * START_SPREAD_NS, rounds=0)})  # never aligned


def test_folders_naming_different_jobs_are_refused():
    with pytest.raises(UserError) as e:
        check_one_job("run", {0: _meta(job="a1"), 1: _meta(job="b2"), 2: _meta(job="a1")})
    assert str(e.value) == ("run: its rank folders were recorded by 2 different jobs (meta.json clock.job: rank(s) "
                            "0, 2 job a1; rank(s) 1 job b2): a rank folder copied from another run? Give each run "
                            "a directory of its own")


def test_an_aligned_folder_without_a_job_beside_folders_with_one_is_refused():
    with pytest.raises(UserError, match=r"rank\(s\) 1 name no job in meta.json clock.job, while rank\(s\) 0 do"):
        check_one_job("run", {0: _meta(job="a1"), 1: _meta()})
    check_one_job("run", {0: _meta(job="a1"), 1: _meta(rounds=0)})  # a folder never aligned names none


def test_recordings_without_jobs_started_far_apart_are_refused():
    with pytest.raises(UserError) as e:
        check_one_job("run", {0: _meta(), 1: _meta(T + 30 * 60 * 10**9), 2: _meta(T + 1_000_000)})
    assert str(e.value) == ("run: its rank folders started recording far apart (rank(s) 0, 2 first; rank(s) 1 30.0 "
                            "min later; meta.json started_ns), where one job's ranks start together, at the clock "
                            "alignment: a rank folder copied from another run? Give each run a directory of its own")
    with pytest.raises(UserError, match=r"\(rank\(s\) 1 first; rank\(s\) 0 4.9 days later;"):
        check_one_job("run", {0: _meta(), 1: _meta(T - int(4.9 * 86400e9))})
