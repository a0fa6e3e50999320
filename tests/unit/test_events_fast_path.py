"""commscope.load.events reads a line by msgspec's typed decoding (fast path) or, where that refuses it, by
the field-by-field check (slow path): both must keep the same records with the same values and report the
same problems. Checked by forcing every line through the slow path and comparing, on hand-picked edge
cases and on generated records."""
from __future__ import annotations

import json
import math

import orjson
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commscope.load import events
from commscope.load.events import EventColumns

EDGES = [
    {"kind": "step", "step": 0, "start_ns": 10, "end_ns": 20, "loss": 2.5},
    {"kind": "step", "step": 1, "start_ns": 20, "end_ns": 30},                    # no loss
    {"kind": "step", "step": 1, "start_ns": 40, "end_ns": 50},                    # the same step again
    {"kind": "step", "step": 2, "start_ns": 60, "end_ns": 55},                    # negative duration
    {"kind": "step", "step": 3, "start_ns": 1.0e3, "end_ns": 2000},               # an integral float
    {"kind": "step", "step": 4, "start_ns": True, "end_ns": 2000},                # a bool is no time
    {"kind": "step", "step": -2, "start_ns": 1, "end_ns": 2},                     # below -1
    {"kind": "step", "step": 5, "start_ns": 2 ** 63, "end_ns": 2 ** 63 + 1},      # beyond int64
    {"kind": "collective", "step": 0, "label": "attn", "op": "all_reduce", "bytes": 64, "group": 0, "seq": 0,
     "call_ns": 11, "return_ns": 12, "start_ns": 12, "end_ns": 19, "stream": 7, "timing": "wall"},
    {"kind": "collective", "label": "mlp", "op": "all_reduce", "bytes": 64, "group": "0", "seq": 0,
     "call_ns": 13},                                                              # (group, seq) again
    {"kind": "collective", "label": "mlp", "op": "all_gather", "bytes": -1, "group": "0", "seq": 1,
     "call_ns": 13},                                                              # negative size
    {"kind": "collective", "label": "x", "group": "1", "seq": 2, "call_ns": 30, "wait_ns": 40, "wait_end_ns": 35},
    {"kind": "collective", "label": "y", "group": "1", "seq": 3, "call_ns": 30, "stream": "s", "rank": 0},
    {"kind": "collective", "label": "z", "group": "1", "seq": 4, "call_ns": 30, "rank": 1},  # not this rank
    {"kind": "collective", "label": "w", "group": "1", "seq": 5, "call_ns": 30, "rank": None},
    {"kind": "region", "name": "forward", "start_ns": 5, "end_ns": 9, "micro_step": 0},
    {"kind": "region", "name": 3, "start_ns": 5, "end_ns": 9},                    # a name is a string
    {"kind": "hook", "step": 0, "label": "attn", "position": 0, "t_ns": 15},
    {"kind": "hook", "step": 0, "label": "attn", "position": -1, "t_ns": 15},
    {"kind": "other", "x": 1},                                                    # a kind not ours
    {"kind": "step", "step": 6, "start_ns": 1, "end_ns": 2, "loss": 1e308, "extra": [1, 2]},
]


def _read(path, slow: bool, monkeypatch) -> EventColumns:
    with monkeypatch.context() as m:
        if slow:
            m.setattr(events, "_decode", orjson.loads)  # no Struct: every line judged field by field
        ev = EventColumns()
        ev.read_rank(str(path), 0, "events.jsonl")
    return ev


def _assert_same(path, monkeypatch) -> EventColumns:
    fast, slow = _read(path, False, monkeypatch), _read(path, True, monkeypatch)
    assert fast.problems == slow.problems
    assert fast.read == slow.read
    for kind in ("step", "collective", "region", "hook"):
        pd.testing.assert_frame_equal(fast.frame(kind), slow.frame(kind))
    return fast


def test_edge_cases_read_the_same_on_both_paths(tmp_path, monkeypatch):
    p = tmp_path / "events.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in EDGES * 2))  # the second copy: duplicate lines
    ev = _assert_same(p, monkeypatch)
    steps = ev.frame("step")
    assert steps["step"].tolist() == [0, 1, 3, 6] and steps["start_ns"].tolist() == [10, 20, 1000, 1]
    assert math.isnan(steps["loss"].iloc[1]) and steps["loss"].iloc[0] == 2.5
    c = ev.frame("collective")
    assert c["label"].tolist() == ["attn", "y"] and c["group"].tolist() == ["0", "1"]
    assert c["stream"].tolist() == [7, "s"]
    assert any("negative duration (wait_end_ns < wait_ns)" in q for q in ev.problems)
    assert any("ignored 21 lines: a copy of an earlier line" in q for q in ev.problems)
    assert any("a second collective with the same (group, seq)" in q for q in ev.problems)
    assert any("its rank is not the folder's" in q and "2 collective records" in q for q in ev.problems)


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=4), st.lists(st.integers(), max_size=2))
_FIELDS = ["step", "start_ns", "end_ns", "loss", "t_ns", "label", "seq", "group", "call_ns", "return_ns", "bytes",
           "name", "micro_step", "position", "rank", "stream", "wait_ns", "wait_end_ns", "op", "group_size"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["step", "collective", "region", "hook", "other"]),
                          st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=9)), max_size=15))
def test_generated_records_read_the_same_on_both_paths(tmp_path, monkeypatch, recs):
    p = tmp_path / "events.jsonl"
    p.write_text("".join(json.dumps({"kind": k, **f}) + "\n" for k, f in recs))
    _assert_same(p, monkeypatch)


def test_records_made_columns_in_chunks_read_as_one(tmp_path, monkeypatch):
    """A rank's records become columns every _CHUNK records (bounded memory on a huge file); the frames
    are the same as when they are made at once, across chunk boundaries and problems alike."""
    p = tmp_path / "events.jsonl"
    recs = [{"kind": "hook", "step": i // 10, "label": f"l{i % 7}", "position": i % 10, "t_ns": i} for i in range(2500)]
    recs[1234]["t_ns"] = "late"  # one rejected record in the middle
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    whole = EventColumns()
    whole.read_rank(str(p), 0, "events.jsonl")
    monkeypatch.setattr(events, "_CHUNK", 100)
    chunked = EventColumns()
    chunked.read_rank(str(p), 0, "events.jsonl")
    pd.testing.assert_frame_equal(whole.frame("hook"), chunked.frame("hook"))
    assert len(chunked.frame("hook")) == 2499 and chunked.problems == whole.problems
