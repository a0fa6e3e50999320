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
