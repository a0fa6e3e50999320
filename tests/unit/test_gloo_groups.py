"""gloo Kineto traces whose collectives run on several process groups: gloo's `c10d::` ops name no group,
so nothing may be concluded from one group's queue about another's (tests/data/gloo2: `grad` on the
default group, `w` on a second one, both ~183 ms on rank 1 at the first call because rank 0 arrived late)."""
import json
import os

import numpy as np
import pytest

from commscope.analyze import exposure
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS

GLOO = os.path.join(TESTS, "data", "gloo2")
UNKNOWN = "gloo collectives name no process group and pg_config lists 2 groups (0, 1)"


@pytest.fixture(scope="module")
def gloo():
    return load_path(GLOO)


@pytest.fixture(scope="module")
def doc(gloo):
    return summarize(gloo, with_hta=False)


def test_the_two_groups_ran_at_once_on_rank_1(gloo):
    # the premise of the tests below, read from the trace: w's execution overlaps grad's almost wholly
    c = gloo.collectives
    r1 = c[c["rank"] == 1].sort_values("seq")
    grad, w = r1.iloc[0], r1.iloc[1]
    assert (grad["label"], w["label"]) == ("grad", "w")
    assert w["start_ns"] < grad["end_ns"] and grad["end_ns"] - grad["start_ns"] > 180e6
    assert w["end_ns"] - w["start_ns"] > 180e6


def test_worker_threads_do_not_name_the_group(gloo):
    # each group has a pool of worker threads and a group's collectives alternate between them: a thread is
    # not a group, and nothing in the trace ties the pools to pg_config's groups
    c = gloo.collectives
    assert c.loc[(c["rank"] == 1) & (c["label"] == "grad"), "stream"].nunique() == 2
    assert c.loc[(c["rank"] == 0) & (c["label"] == "w"), "stream"].nunique() == 2


def test_one_stand_in_group_and_a_problem_line_says_the_group_is_unknown(gloo):
    assert set(gloo.collectives["group"]) == {"gloo"}
    lines = [p for p in gloo.problems if UNKNOWN in p]
    assert len(lines) == 1  # one line for the trace, not one per rank
    assert lines[0].startswith("rank(s) 0, 1: ") and "may mix groups" in lines[0]
    assert "queued" in lines[0]


def test_no_queueing_blamed_across_groups(gloo, doc):
    t = exposure.collective_table(gloo)
    w = t[t["label"] == "w"]
    # w ran beside grad on rank 1: the ~183 ms stall is counted once, charged to grad, which started first
    # (exposure.unshared_starts), not once per collective in flight
    first = t[(t["rank"] == 1) & (t["seq"] == t.loc[t["rank"] == 1, "seq"].min())].iloc[0]
    assert first["label"] == "grad" and first["exposed_ns"] > 180e6
    assert w["exposed_ns"].sum() < 5e6
    assert (w["queued_ns"] == 0).all()  # and what w keeps is its own, not queueing behind grad
    assert (w["own_exposed_ns"] == w["exposed_ns"]).all()
    assert (t["queue_charged_ns"] == 0).all()
    lab = doc["labels"]
    assert lab["w"]["queued_ms"] == 0 and lab["w"]["queued_behind_ms"] == {}
    assert lab["grad"]["queue_charged_ms"] == 0
    assert lab["grad"]["attributed_exposed_ms"] == pytest.approx(lab["grad"]["exposed_ms"])


def test_the_183_ms_show_as_rank_0_arriving_late(gloo, doc):
    # pairing by launch order is right here (both ranks launch grad, w, all_gather per step, both groups
    # hold both ranks): every (group, seq) pairs the same op on both ranks, and rank 0 arrives last
    c = gloo.collectives
    g = c.groupby(["group", "seq"]).agg(n=("rank", "size"), ops=("op", "nunique"), labels=("label", "nunique"))
    assert (g["n"] == 2).all() and (g["ops"] == 1).all() and (g["labels"] == 1).all()
    top = doc["stragglers"][0]
    assert top["rank"] == 0 and top["times_last"] == 9 and top["wait_caused_ms"] > 180
    assert doc["skew"]["max_ms"] > 180


# --- hand-built traces ----------------------------------------------------------------------------------

def _trace(rank: int, groups: list[str]) -> dict:
    """Two all_reduces launched 10 µs apart on the caller thread (tid 1) and executed at the same time on
    two worker threads (tids 2, 3), each 1 ms, while the caller computes nothing."""
    shapes = {"Input Dims": [[1024]], "Input type": ["float"]}
    pg = [{"pg_name": g, "pg_desc": "", "backend_config": "cpu:gloo", "pg_size": 2, "ranks": [0, 1]} for g in groups]
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000.0,
           "dur": 3000.0}]
    for i, label in enumerate(("a", "b")):
        t0 = 1100.0 + 10.0 * i
        ev += [{"ph": "X", "cat": "user_annotation", "name": f"commscope:{label}:x", "pid": 1, "tid": 1, "ts": t0,
                "dur": 5.0},
               {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 2.0,
                "args": shapes},
               {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2 + i,
                "ts": 1120.0 + i, "dur": 1000.0, "args": shapes}]
    di = {"backend": "gloo", "rank": rank, "world_size": 2, "pg_count": len(groups), "pg_config": pg}
    return {"schemaVersion": 1, "distributedInfo": di, "traceEvents": ev}


def _write(tmp_path, groups):
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text(json.dumps(_trace(r, groups)))
    return load_path(str(tmp_path))


def test_one_group_in_pg_config_names_it_and_says_nothing(tmp_path):
    tr = _write(tmp_path, ["0"])
    assert set(tr.collectives["group"]) == {"0"}
    assert not [p for p in tr.problems if "name no process group" in p]


def test_several_groups_say_the_group_is_unknown(tmp_path):
    tr = _write(tmp_path, ["0", "1"])
    assert set(tr.collectives["group"]) == {"gloo"}
    assert [p for p in tr.problems if UNKNOWN in p]


@pytest.mark.parametrize("groups", [["0"], ["0", "1"]])
def test_collectives_that_executed_at_once_did_not_queue(tmp_path, groups):
    # b's execution [1121, 2121) µs runs beside a's [1120, 2120) (another worker thread): the caller was
    # stalled once, 1001 µs; a, which started first, is charged the 1000 µs they shared and b the 1 µs after
    # a's end, in either group layout; neither is queued behind the other
    tr = _write(tmp_path, groups)
    t = exposure.collective_table(tr)
    assert t["exposed_ns"].to_numpy() == pytest.approx([1e6, 1e3, 1e6, 1e3])
    assert (t["queued_ns"] == 0).all() and (t["queue_charged_ns"] == 0).all()
    assert (t["own_exposed_ns"] == t["exposed_ns"]).all()
    # nothing computed meanwhile: nothing hidden, though b's exposed time is a thousandth of its duration
    assert (t["hidden_ns"] == 0).all()
    assert [summarize(tr, with_hta=False)["labels"][x]["hidden_pct"] for x in "ab"] == [0.0, 0.0]
    # the timeline's hatched spans are the same charge
    comp = exposure.compute_sets(tr)
    spans = exposure.exposed_spans(tr.collectives[tr.collectives["rank"] == 0], comp[0], 0)
    assert [sum(e - s for s, e in row) for row in spans] == pytest.approx([1e6, 1e3])


def _subgroups(tmp_path, sizes: dict[int, int], members: dict[int, list]) -> str:
    """4 ranks: each launches one all_reduce of `sizes[rank]` float elements on a group of `members[rank]`
    (its pg_config lists the world group and that one), then one on the world group."""
    for r in range(4):
        doc = _trace(r, ["0"])
        doc["distributedInfo"].update(world_size=4, pg_count=2, pg_config=[
            {"pg_name": "0", "pg_size": 4, "ranks": [0, 1, 2, 3]},
            {"pg_name": str(1 + r // 2), "pg_size": len(members[r]), "ranks": members[r]}])
        shapes = [{"Input Dims": [[sizes[r]]], "Input type": ["float"]}, {"Input Dims": [[8]], "Input type": ["float"]}]
        ops = [e for e in doc["traceEvents"] if e["name"] in ("c10d::allreduce_", "gloo:all_reduce")]
        for e in ops:  # the first call: launched at 1101 µs on the caller thread, executed on worker thread 2
            first = e["tid"] == 2 or (e["tid"] == 1 and e["ts"] < 1110)
            e["args"] = shapes[0 if first else 1]
            e["ts"] += 200 * r  # rank 3 launches 600 µs after rank 0
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    return str(tmp_path)


def test_groups_of_different_members_are_left_out_of_desync_and_straggler_rules(tmp_path):
    """Ranks 0-1 all_reduce 400 B on their pair's group, ranks 2-3 600 B on theirs: in a gloo trace both are
    the stand-in group's first call, and so is the waiting of one pair for the other. Neither is a desync
    nor a straggler; the doctor says what it left out and the mismatch it saw there."""
    from commscope.analyze.doctor import diagnose

    tr = load_path(_subgroups(tmp_path, {0: 100, 1: 100, 2: 150, 3: 150}, {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}))
    assert tr.config["mixed_groups"] == ["gloo"]
    d = diagnose(tr)
    assert d.verdict not in ("desync", "straggler"), d.summary
    (line,) = [p for p in d.problems if "left out of the desync and straggler rules" in p]
    assert "group(s) gloo" in line and "rank(s) 0-1 launched all_reduce of 400 bytes" in line
    assert "rank(s) 2-3 launched all_reduce of 600 bytes" in line


def test_groups_of_the_same_members_are_judged(tmp_path):
    """Every group holds every rank (tests/data/gloo2's layout): pairing by launch order is right, so a size
    that differs is a desync."""
    from commscope.analyze.doctor import diagnose

    tr = load_path(_subgroups(tmp_path, {0: 100, 1: 100, 2: 100, 3: 150}, {r: [0, 1, 2, 3] for r in range(4)}))
    assert tr.config["mixed_groups"] == []
    d = diagnose(tr)
    assert d.verdict == "desync" and d.culprit_ranks == [3] and not any("left out" in p for p in d.problems)
