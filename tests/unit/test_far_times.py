"""A run directory's record whose time is more than a year from the rank's other records (1970's call_ns 0,
2262's 2^63-1, beside a 2026 run) is no measurement: it is left out with a problem line, as a negative
duration is, and the rank's other records stand. Run directories with small test times (0-based) are read
as they are: the rule is relative to the rank's own steps."""
from __future__ import annotations

import json

from commscope.load.events import FAR_NS, EventColumns, read_rank

T = 1_764_670_000_000_000_000  # 2025-12-02, on the recorder's epoch axis


def _events(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def _coll(seq, call, end):
    return {"kind": "collective", "step": 0, "label": "attn", "phase": "reduce", "op": "all_reduce", "bytes": 64,
            "group": "0", "group_size": 2, "seq": seq, "call_ns": call, "return_ns": call + 10,
            "start_ns": call + 20, "end_ns": end}


def test_a_record_a_year_away_is_left_out_and_said(tmp_path):
    steps = [{"kind": "step", "step": s, "start_ns": T + s * 10 ** 9, "end_ns": T + s * 10 ** 9 + 5 * 10 ** 8}
             for s in range(3)]
    recs = steps + [_coll(0, T + 100, T + 1000), _coll(1, 0, T + 2000), _coll(2, T + 300, 2 ** 63 - 1),
                    _coll(3, T + FAR_NS - 10 ** 9, T + FAR_NS - 10 ** 9 + 50)]  # within a year: kept
    part = read_rank(_events(tmp_path / "events.jsonl", recs), 0, "events.jsonl")
    assert list(part["cols"]["collective"]["seq"]) == [0, 3]
    assert part["kept"] == 5 and part["read"] == 7 and len(part["cols"]["step"]["step"]) == 3
    assert part["problems"] == ["rank 0: events.jsonl: ignored 2 collective records: a time more than a year "
                                "from the rank's other records (e.g. call_ns=0)"]
    assert part["lost"]["ignored"] == 2


def test_small_times_of_a_hand_written_run_are_kept(tmp_path):
    recs = [{"kind": "step", "step": 0, "start_ns": 10, "end_ns": 50}, _coll(0, 11, 45)]
    ev = EventColumns()
    ev.read_rank(_events(tmp_path / "events.jsonl", recs), 0, "events.jsonl")
    assert ev.problems == [] and len(ev.frame("collective")) == 1 and len(ev.frame("step")) == 1
