"""commscope.load.step_lineup: ranks whose Kineto windows cannot be lined up with the others' (by the steps
each window holds) are left unpaired. Frames built by hand (the contract's columns line_up reads), then
real traces: a trace of another job among a job's traces, or a window a step late, is no desync."""
from __future__ import annotations

import shutil

import pandas as pd

from commscope.load import load_path
from commscope.load.frames import UNPAIRED_MARK
from commscope.load.step_lineup import line_up
from commscope.pipeline import diagnose_path
from paths import TESTS

OPS = ("reduce_scatter", "all_gather", "all_reduce")  # each step's collectives, in launch order


def _frames(windows: dict[int, range], groups=("0",)) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each rank profiles the steps of `windows`, its collectives numbered from its window's first, as
    kineto_comms numbers them."""
    steps, coll = [], []
    for r, window in windows.items():
        seq = dict.fromkeys(groups, 0)
        for s in window:
            steps.append(dict(rank=r, step=s))
            for g in groups:
                for op in OPS:
                    coll.append(dict(rank=r, step=s, group=g, seq=seq[g], op=op))
                    seq[g] += 1
    return pd.DataFrame(coll), pd.DataFrame(steps)


def _key(c: pd.DataFrame) -> dict:
    """(group, seq) -> the (step, op) of each rank there."""
    return {k: sorted(set(zip(g["step"], g["op"]))) for k, g in c.groupby(["group", "seq"])}


def test_windows_that_start_at_one_step_keep_their_numbers():
    coll, steps = _frames({0: range(10, 13), 1: range(10, 13)})
    problems = []
    assert line_up(coll, steps, problems) is coll and problems == []


def test_a_window_that_starts_at_another_step_than_most_is_left_unpaired():
    coll, steps = _frames({0: range(10, 13), 1: range(11, 14), 2: range(11, 13)}, groups=("0", "1"))
    before = coll.copy()
    problems = []
    out = line_up(coll, steps, problems)
    pd.testing.assert_frame_equal(coll, before)  # the caller's frame is left as it was
    assert set(out.loc[out["rank"] == 0, "group"]) == {f"0{UNPAIRED_MARK}0)", f"1{UNPAIRED_MARK}0)"}
    assert set(out.loc[out["rank"] != 0, "group"]) == {"0", "1"} and (out["seq"] == coll["seq"]).all()
    assert problems == ["rank(s) 0 (rank 0: steps 10-12) start their profiling window at another step than rank(s) "
                        "1-2 (step 11): their collectives' sequence numbers cannot be lined up with the others' and "
                        "are left unpaired"]


def test_a_rank_without_the_step_the_others_share_is_left_unpaired():
    coll, steps = _frames({0: range(10, 14), 1: range(10, 14), 2: range(10, 14), 3: range(1009, 1010)})
    problems = []
    out = line_up(coll, steps, problems)
    assert set(out.loc[out["rank"] == 3, "group"]) == {f"0{UNPAIRED_MARK}3)"}
    assert set(out.loc[out["rank"] != 3, "group"]) == {"0"}
    assert (out["seq"] == coll["seq"]).all()
    assert problems == ["rank(s) 3 (rank 3: step 1009) do not hold step 10, which the windows of rank(s) 0-2 share: "
                        "their collectives cannot be lined up with the others' and are left unpaired (traces of "
                        "another job, or profiled at other steps)"]


def test_ranks_without_step_annotations_give_nothing_to_line_up_by():
    coll, steps = _frames({0: range(10, 13), 1: range(11, 14)})
    problems = []
    assert line_up(coll, steps[steps["rank"] == 0], problems) is coll and problems == []
    assert line_up(coll, steps.iloc[:0], problems) is coll


def _with_stray(tmp_path, job: str, ranks: list[str]):
    """The traces of `job` named in `ranks`, and HTA's distributed_info_not_found trace (another job,
    recorded years earlier, naming no rank) beside them."""
    tmp_path.mkdir()
    for name in ranks:
        shutil.copy(TESTS / "data" / job / name, tmp_path / name)
    shutil.copy(TESTS / "data" / "hta-testdata" / "distributed_info_unavailable" / "distributed_info_not_found.json.gz",
                tmp_path)
    return tmp_path


def test_another_jobs_trace_among_a_jobs_traces_is_no_desync(tmp_path):
    mixed = _with_stray(tmp_path / "h100", "modded-nanogpt-8xh100", [f"rank{r}.json.gz" for r in range(7)])
    d = diagnose_path(str(mixed))
    assert d.verdict == "insufficient" and not d.culprit_ranks, d.summary
    assert any("rank(s) 7 (rank 7: step 1009) do not hold step 10" in p for p in d.problems)
    trace = load_path(str(mixed))
    c = trace.collectives
    assert (c.loc[c["rank"] == 7, "group"].astype(str).str.contains("unpaired, rank 7", regex=False)).all()
    assert set(c.loc[c["rank"] < 7, "group"].astype(str)) == {"0"}

    two = _with_stray(tmp_path / "nccl", "hta-testdata/nccl_parser_config", ["nccl_data.json.gz"])
    d = diagnose_path(str(two))
    assert d.verdict != "desync", d.summary


def test_one_jobs_traces_are_left_as_they_were(tmp_path):
    trace = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    assert not any("profiling windows" in p or "lined up" in p for p in trace.problems)
    assert set(trace.collectives["group"].astype(str)) == {"0"}


def test_a_trace_naming_no_rank_beside_every_rank_of_a_job_is_refused_for_what_it_is(tmp_path):
    from commscope.errors import UserError

    full = _with_stray(tmp_path / "all8", "modded-nanogpt-8xh100", [f"rank{r}.json.gz" for r in range(8)])
    try:
        load_path(str(full))
    except UserError as e:
        said = str(e)
    else:
        raise AssertionError("loaded a ninth trace into an 8-rank job")
    assert said == (f"distributed_info_not_found.json.gz in {full} names no rank (no distributedInfo, none in the "
                    "file name), and every rank of the job the other traces declare (world_size 8) already has a "
                    "trace: a trace of another job? Give each job's traces a folder of their own")


def test_a_rank_whose_window_starts_a_step_later_is_no_desync(tmp_path):
    """The 8xH100 traces with rank 3's ProfilerStep numbers one higher (its window a step later, as a rank
    whose profiler started late would have it): numbered from its own window's first launch, its
    collectives meet the others' a few places off (a desync, read naively); they are left unpaired."""
    import gzip
    import json
    import re

    tmp_path.mkdir(exist_ok=True)
    for r in range(8):
        src = TESTS / "data" / "modded-nanogpt-8xh100" / f"rank{r}.json.gz"
        if r != 3:
            shutil.copy(src, tmp_path / src.name)
            continue
        doc = json.loads(gzip.decompress(src.read_bytes()))
        for e in doc["traceEvents"]:
            if isinstance(e.get("name"), str):
                e["name"] = re.sub(r"^ProfilerStep#(\d+)$", lambda m: f"ProfilerStep#{int(m.group(1)) + 1}", e["name"])
        (tmp_path / src.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    d = diagnose_path(str(tmp_path))
    assert d.verdict != "desync", d.summary
    assert any(p.startswith("rank(s) 3 (rank 3: steps 11-12) start their profiling window at another step than "
                            "rank(s) 0-2, 4-7 (step 10)") for p in d.problems), d.problems
