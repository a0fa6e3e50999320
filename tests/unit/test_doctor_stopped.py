"""The doctor on a job whose every rank a signal ended and no summary.json says which ended first
(analyze.doctor_stopped): status.json's ended_ns tells a job stopped whole (the hang stands, or the job
was stopped while it ran) from one rank killed first (a crash), and says insufficient where it cannot.

The run: 4 ranks, steps 0 and 1 finished (1 ms each); in step 2 ranks 0, 2 and 3 launched 'attn' (group 0,
seq 6) and wait in it (inflight.json), rank 1 never launched it (unless `all_launched`)."""
from __future__ import annotations

import os

import pytest

from commscope.analyze.doctor_stopped import STALL_MIN_NS, TOGETHER_NS
from commscope.pipeline import diagnose_path
from report_trace import T, US, make_trace, write_run_dir
from rundirs import write_json

SIGTERM = "Terminated: terminated by signal 15 (SIGTERM)"
CALL = T + 2_000 * US + 290 * US  # step 2's attn launch (rank r: + 10 µs · r)
MS = 1_000_000


def _run(tmp_path, all_launched=False):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), path)
    os.remove(path / "summary.json")  # a script's own torchrun job: no launcher summary
    for r in range(4):
        ev = path / f"rank{r}" / "events.jsonl"
        # step 2 never finished: no record of it but the in-flight launch below
        ev.write_text("".join(x + "\n" for x in ev.read_text().splitlines() if '"step": 2' not in x))
        if r != 1 or all_launched:
            row = {"kind": "collective", "rank": r, "step": 2, "label": "attn", "phase": "reduce",
                   "op": "reduce_scatter", "bytes": 8_000_000, "dtype": "bf16", "group": "0", "group_size": 4,
                   "seq": 6, "call_ns": CALL + 10 * US * r, "return_ns": CALL + 10 * US * r + 5 * US,
                   "wait_ns": CALL + 10 * US * r + 6 * US, "wait_end_ns": None}
            write_json(path / f"rank{r}" / "inflight.json",
                       {"schema_version": 1, "rank": r, "reason": SIGTERM, "last_step": 1, "inflight": [row]})
    return path


def _ended(path, ns: dict[int, int | None]):
    for r, v in ns.items():
        write_json(path / f"rank{r}" / "status.json", {"status": "failed", "error": SIGTERM, "last_step": 1,
                                                        **({} if v is None else {"ended_ns": v})})


def test_a_job_stopped_whole_while_a_rank_was_stuck_is_the_hang(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 5_000 * MS + r * 100_000 for r in range(4)})  # within 0.3 ms
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.sequence, d.label) == ("hang", [1], 6, "attn")
    assert "rank 3 had waited 5.0 s in it (5,000 median steps) when the job was stopped whole from outside: " \
           "SIGTERM reached all 4 ranks within 0.3 ms (status.json ended_ns)." in d.summary
    assert d.details["waited_ms"] == pytest.approx(5_000.27) and d.details["spread_ms"] == 0.3


def test_a_job_stopped_whole_while_it_ran_is_interrupted(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 3 * MS for r in range(4)})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("interrupted", [])
    assert d.summary.startswith("interrupted: the job was stopped whole from outside while it ran: SIGTERM reached "
                                "all 4 ranks within 0.0 ms")
    assert "(rank 0 on 'attn', which rank(s) 1 had not yet launched) was 3.0 ms, under the 1,000 ms a stuck rank " \
           "would show (5 median steps of 1.0 ms, at least 1 s)" in d.summary
    # the bar is five median steps where they are longer than a second
    assert d.details["stall_bar_ms"] == STALL_MIN_NS / 1e6


def test_the_rank_whose_end_began_clearly_first_was_killed_from_outside(tmp_path):
    run = _run(tmp_path)
    end = CALL + 5_000 * MS
    _ended(run, {0: end + 500 * MS, 1: end, 2: end + 501 * MS, 3: end + 502 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1])
    assert d.summary.startswith("crash: rank(s) 1 ended by SIGTERM from outside the job, 500 ms before any other "
                                "rank (status.json ended_ns), which were torn down after; rank(s) 0,2-3 launched")


@pytest.mark.parametrize("rank1", [200 * MS, None])
def test_ends_neither_together_nor_the_culprit_first_are_insufficient(tmp_path, rank1):
    run = _run(tmp_path)
    end = CALL + 5_000 * MS
    _ended(run, {0: end, 1: None if rank1 is None else end + rank1, 2: end + 400 * MS, 3: end})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    if rank1 is None:
        assert "rank(s) 1 wrote no ended_ns in status.json" in d.summary
    else:
        assert (f"their ends began 400 ms apart (status.json ended_ns): neither within {TOGETHER_NS // MS} ms of "
                "each other") in d.summary


def test_every_member_waiting_in_one_collective_when_stopped_is_a_hang_without_culprit(tmp_path):
    run = _run(tmp_path, all_launched=True)
    _ended(run, {r: CALL + 8_000 * MS for r in range(4)})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label) == ("hang", [], "attn")
    assert d.summary.startswith("hang: rank 0 had waited 8.0 s in 'attn', which every member had launched "
                                "(8,000 median steps) when the job was stopped whole from outside")
    assert d.summary.endswith("No rank is missing from it: stuck inside the collective (the backend or the network).")
    _ended(run, {r: CALL + 2 * MS for r in range(4)})
    assert diagnose_path(str(run)).verdict == "interrupted"


def test_a_rank_that_timed_out_leaves_the_hang_to_the_timeout_rules(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 3 * MS for r in range(4)})
    write_json(run / "rank0" / "status.json", {"status": "failed", "error": "RuntimeError: [gloo] Application "
                                               "timeout caused pair closure", "last_step": 1, "ended_ns": CALL})
    assert (diagnose_path(str(run)).verdict, diagnose_path(str(run)).culprit_ranks) == ("hang", [1])
