"""A rank whose clock is offset from its peers' is said to be so, not named a straggler: the members of an
all_reduce, all_gather or reduce_scatter end it within microseconds, so a rank whose collectives all end
50 ms after the others' has a clock 50 ms off (analyze.clocks)."""
from __future__ import annotations

import gzip
import shutil

import orjson
import pytest

from commscope.analyze import clocks
from commscope.analyze.summary import summarize
from commscope.load import load_path
from commscope.pipeline import diagnose_path
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    """The 8×H100 fixture with every time of rank 3 moved 50 ms later (its clock, not its work)."""
    out = tmp_path_factory.mktemp("skewed") / "traces"
    shutil.copytree(FIXTURE, out)
    f = out / "rank3.json.gz"
    doc = orjson.loads(gzip.decompress(f.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 50_000  # µs
    f.write_bytes(gzip.compress(orjson.dumps(doc)))
    return out


def test_healthy_ranks_end_their_collectives_together():
    off = clocks.end_offsets(load_path(str(FIXTURE)).collectives)
    assert sorted(off["rank"]) == list(range(8)) and (off["instances"] >= 3).all()
    assert off["median_offset_ms"].abs().max() < 0.01 and clocks.disagreement(load_path(str(FIXTURE)).collectives) is None


def test_an_offset_clock_is_said_and_nobody_is_judged(shifted):
    tr = load_path(str(shifted))
    off = clocks.disagreement(tr.collectives)
    assert list(off) == [3] and off[3] == pytest.approx(50.0, abs=0.01)
    d = diagnose_path(str(shifted))
    assert d.verdict == "insufficient" and d.culprit_ranks == []
    assert "the ranks' clocks disagree" in d.summary and "rank 3's end a median 50.0 ms after its peers'" in d.summary
    doc = summarize(tr, with_hta=False)
    assert doc["stragglers"] is None and "the ranks' clocks disagree" in doc["stragglers_reason"]
    assert doc["skew"]["collectives"] == doc["launch_skew"]["collectives"] == doc["arrival_lateness"]["arrivals"] == 0
    # the healthy fixture is still judged
    whole = summarize(load_path(str(FIXTURE)), with_hta=False)
    assert whole["stragglers"] and whole["skew"]["collectives"] > 0


def _two_ranks(timing: str, gap_ns: int):
    """Five all_reduces of a 2-rank group; rank 1's ends `gap_ns` after rank 0's."""
    import pandas as pd

    rows = [{"rank": r, "group": "0", "seq": q, "group_size": 2, "op": "all_reduce", "timing": timing,
             "end_ns": 10 ** 15 + q * 10 ** 7 + r * gap_ns} for q in range(5) for r in (0, 1)]
    return pd.DataFrame(rows)


def test_in_a_group_of_two_the_offset_is_the_whole_gap_and_cuda_events_are_not_read():
    """Of two ends the median is their mean: each rank's offset is from the other's end, so a 1.5 ms gap
    is flagged (both named: which clock is off cannot be told). A run directory's CUDA-event end is an
    event after the caller's wait, not the collective's end: it is never read as a clock."""
    off = clocks.disagreement(_two_ranks("kernel", 1_500_000))
    assert off == {0: pytest.approx(-1.5), 1: pytest.approx(1.5)}
    assert clocks.disagreement(_two_ranks("kernel", 400_000)) is None
    assert clocks.disagreement(_two_ranks("cuda_event", 50_000_000)) is None
