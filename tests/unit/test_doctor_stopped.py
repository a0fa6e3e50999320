"""The doctor on a job whose every rank a signal ended and no summary.json says which ended first
(analyze.doctor_stopped): status.json's ended_ns tells a job stopped whole (the hang stands, or the job
was stopped while it ran) from one rank killed first (a crash), and says insufficient where it cannot.

The run: 4 ranks, steps 0 and 1 finished (1 ms each); in step 2 ranks 0, 2 and 3 launched 'attn' (group 0,
seq 6) and wait in it (inflight.json), rank 1 never launched it (unless `all_launched`)."""
from __future__ import annotations

import os

import pytest

from commscope.analyze.doctor_stopped import STALL_MIN_NS
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


def _ended(path, ns: dict[int, int | None], last_step: int = 1):
    for r, v in ns.items():
        write_json(path / f"rank{r}" / "status.json", {"status": "failed", "error": SIGTERM, "last_step": last_step,
                                                        **({} if v is None else {"ended_ns": v})})


def test_a_job_stopped_whole_while_a_rank_was_stuck_is_the_hang(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 5_000 * MS + r * 100_000 for r in range(4)})  # within 0.3 ms
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.sequence, d.label) == ("hang", [1], 6, "attn")
    # waits are measured to the first end (rank 0's): rank 3, launching 30 µs after rank 0, waited less
    assert d.summary.endswith("; rank 0 had waited 5.0 s in 'attn' (5,000 median steps) when the job was stopped whole "
                              "from outside: SIGTERM reached all 4 ranks within 0.3 ms (status.json ended_ns).")
    assert d.details["waited_ms"] == 5_000.0 and d.details["spread_ms"] == 0.3


def test_a_job_stopped_whole_while_it_ran_is_interrupted(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 3 * MS for r in range(4)})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("interrupted", [], 1)
    assert d.summary == (
        "interrupted: the job was stopped whole from outside while it ran: SIGTERM reached all 4 ranks within 0.1 ms "
        "(status.json ended_ns); the longest wait on a collective then (rank 0 on 'attn', which rank(s) 1 had not "
        "launched) was 3.0 ms, under the 1,000 ms a stuck rank would show (5 median steps of 1.0 ms, at least 1 s): "
        "too short to call a hang; every rank finished step 1. What the ranks did while being stopped is a "
        "consequence, not a fault.")
    assert [(e["rank"], e["last_finished_step"]) for e in d.evidence] == [(r, 1) for r in range(4)]
    assert d.details["stall_bar_ms"] == STALL_MIN_NS / 1e6 and d.sources == ["events.jsonl + watchdog/inflight reports", "status.json"]


def test_the_rank_whose_end_began_clearly_first_was_killed_from_outside(tmp_path):
    run = _run(tmp_path)
    end = CALL + 5 * MS
    _ended(run, {0: end + 500 * MS, 1: end, 2: end + 501 * MS, 3: end + 502 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1])
    assert d.summary.startswith("crash: rank(s) 1 ended by SIGTERM from outside the job, 500 ms before any other "
                                "rank (status.json ended_ns), which were torn down after; rank(s) 0,2-3 launched")


def test_a_stuck_rank_stays_the_hang_whoever_was_ended_first(tmp_path):
    """Rank 0, waiting 5 s for rank 1, is killed from outside first; the teardown of the others follows."""
    run = _run(tmp_path)
    end = CALL + 5_000 * MS
    _ended(run, {0: end, 1: end + 900 * MS, 2: end + 901 * MS, 3: end + 900 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [1])
    assert d.summary.endswith("; rank 0 had waited 5.0 s in 'attn' (5,000 median steps) when rank(s) 0 were ended first, "
                              "by SIGTERM from outside the job, 900 ms before the others (status.json ended_ns).")


@pytest.mark.parametrize("rank1", [200 * MS, None])
def test_ends_neither_together_nor_the_culprit_first_without_a_stall_are_insufficient(tmp_path, rank1):
    run = _run(tmp_path)
    end = CALL + 3 * MS
    _ended(run, {0: end, 1: None if rank1 is None else end + rank1, 2: end + 400 * MS, 3: end})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    if rank1 is None:
        assert "rank(s) 1 wrote no ended_ns in status.json" in d.summary
    else:
        assert d.summary.startswith("insufficient: rank(s) 0,3 were ended first, by SIGTERM from outside the job, "
                                    "200 ms before the others (status.json ended_ns), not rank(s) 1, and no rank had "
                                    "been stuck by then (the longest wait on a collective then (rank 0 on 'attn'")


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


def test_a_rank_ended_first_with_no_collective_missing_is_the_crash(tmp_path):
    run = _run(tmp_path, all_launched=True)
    end = CALL + 3 * MS
    _ended(run, {0: end + 931 * MS, 1: end, 2: end + 931 * MS, 3: end + 932 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [1], 1)
    assert d.summary == ("crash: rank(s) 1 ended first, by SIGTERM from outside the job, 931 ms before any other rank "
                         "(status.json ended_ns); the others were torn down after it (the launchers signal ranks only "
                         "after a failure, and no rank timed out); last finished step 1.")
    assert [e["rank"] for e in d.evidence] == [1, 0, 2, 3] and d.evidence[1]["role"] == "affected"


def test_a_job_stopped_before_any_step_finished(tmp_path):
    """No step to measure a stall by: no wait, or a short one, is interrupted; a long one is said, not judged."""
    run = _run(tmp_path)
    for r in range(4):  # no step record at all
        ev = run / f"rank{r}" / "events.jsonl"
        ev.write_text("".join(x + "\n" for x in ev.read_text().splitlines() if '"kind": "step"' not in x))
    _ended(run, {r: CALL - 1 * MS for r in range(4)}, -1)  # before anyone launched 'attn'
    d = diagnose_path(str(run))
    assert d.verdict == "interrupted" and "no rank was waiting in a collective; no rank finished a step." in d.summary
    _ended(run, {r: CALL + 500 * MS for r in range(4)}, -1)
    assert diagnose_path(str(run)).verdict == "interrupted"
    _ended(run, {r: CALL + 3_000 * MS for r in range(4)}, -1)
    d = diagnose_path(str(run))
    assert d.verdict == "insufficient" and d.summary.endswith(
        "before any step finished: with no step time to measure it by, a stuck rank cannot be told from a slow "
        "first step (compilation, warm-up).")
    assert "rank 0 had waited 3.0 s in 'attn', which rank(s) 1 had not launched" in d.summary


def test_ctrl_c_on_a_stuck_job_is_the_hang_and_on_a_running_one_interrupted(tmp_path):
    run = _run(tmp_path)
    for r in range(4):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                      "last_step": 1, "ended_ns": CALL + 4_000 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [1])
    assert d.summary.endswith("; rank 0 had waited 4.0 s in 'attn' (4,000 median steps) when the run was stopped by "
                              "the user.")
    for r in range(4):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                      "last_step": 1, "ended_ns": CALL + 4 * MS})
    d = diagnose_path(str(run))
    assert d.verdict == "interrupted" and d.sources == ["status.json"]  # no summary.json to name


def test_a_rank_that_timed_out_leaves_the_hang_to_the_timeout_rules(tmp_path):
    run = _run(tmp_path)
    _ended(run, {r: CALL + 3 * MS for r in range(4)})
    write_json(run / "rank0" / "status.json", {"status": "failed", "error": "RuntimeError: [gloo] Application "
                                               "timeout caused pair closure", "last_step": 1, "ended_ns": CALL})
    assert (diagnose_path(str(run)).verdict, diagnose_path(str(run)).culprit_ranks) == ("hang", [1])


def test_no_rank_left_a_status_says_how_a_script_gets_one(tmp_path):
    """A script without rec.handle_signals(), its job stopped by SIGTERM: no rank writes its status."""
    run = _run(tmp_path)
    for r in range(4):
        os.remove(run / f"rank{r}" / "status.json")
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("insufficient", [])
    assert d.summary == ("insufficient: no rank has finished or reported (no status.json, no summary.json): the run "
                         "is still going, or the whole job was killed at once (a script's ranks that a signal ends "
                         "leave their status only when it calls rec.handle_signals(): docs/recording.md)")


def test_no_status_while_the_launcher_runs_on_this_host_is_a_run_in_progress(tmp_path):
    """The run marker names its launcher (pid, host): while that process runs here, a run without statuses
    or a summary is going, not killed. A pid that runs another program, or a marker of another host, says
    nothing, and the verdict stays the hedged one."""
    import socket
    import subprocess
    import sys

    run = _run(tmp_path)
    for r in range(4):
        os.remove(run / f"rank{r}" / "status.json")
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "commscope", "run"])
    # another program, whose command line names commscope only in a path
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "/tmp/commscope-x/bin/run"])
    try:
        for pid, host, running in ((launcher.pid, socket.gethostname(), True), (other.pid, socket.gethostname(), False),
                                   (launcher.pid, "another-host", False)):
            write_json(run / "commscope-run.json", {"run_id": "r1", "launcher_pid": pid, "host": host})
            d = diagnose_path(str(run))
            assert d.verdict == "insufficient"
            if running:
                assert d.summary == (f"insufficient: the run is still going (its `commscope run` launcher, pid {pid}, "
                                     "runs on this host): no rank has ended yet (no status.json), so how the run "
                                     "ends is unknown; diagnose it once it ends")
                assert d.details == {"launcher_running": pid}
                # the report's notes say the same of its figures
                from commscope.analyze.summary import summarize
                from commscope.load import load_path

                notes = summarize(load_path(str(run)), with_hta=False)["notes"]
                assert notes[0] == (f"In progress: the run's `commscope run` launcher (pid {pid}) still runs on this "
                                    "host, so every figure here is of the steps written so far.")
            else:
                assert d.summary.startswith("insufficient: no rank has finished or reported")
    finally:
        for p in (launcher, other):
            p.kill()
            p.wait()


def test_statuses_without_ended_ns_are_named_with_no_collective_missing_too(tmp_path):
    run = _run(tmp_path, all_launched=True)
    _ended(run, {r: None for r in range(4)})
    d = diagnose_path(str(run))
    assert (d.verdict, d.details["ended_ns_missing"]) == ("insufficient", [0, 1, 2, 3])
    assert "rank(s) 0-3 wrote no ended_ns in status.json" in d.summary


def test_a_wait_that_returned_only_during_the_teardown_was_still_a_wait(tmp_path):
    """Rank 1 stopped (SIGSTOP) inside 'attn', which every rank had launched; 3 s later the job is stopped
    whole and the collective completes 11 ms into the teardown: written as finished, its wait returned
    after the first end, so rank 0 had been waiting 3 s."""
    import json

    run = _run(tmp_path, all_launched=True)
    for r in range(4):
        os.remove(run / f"rank{r}" / "inflight.json")
        call = CALL + 10 * US * r
        row = {"kind": "collective", "rank": r, "step": 2, "label": "attn", "phase": "reduce", "op": "reduce_scatter",
               "bytes": 8_000_000, "dtype": "bf16", "group": "0", "group_size": 4, "seq": 6, "call_ns": call,
               "return_ns": call + 5 * US, "wait_ns": call + 6 * US, "wait_end_ns": CALL + 3_011 * MS,
               "start_ns": None, "end_ns": CALL + 3_011 * MS, "timing": "wall"}
        with open(run / f"rank{r}" / "events.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    _ended(run, {r: CALL + 3_000 * MS for r in range(4)})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label) == ("hang", [], "attn")
    assert d.summary.startswith("hang: rank 0 had waited 3.0 s in 'attn', which every member had launched")
    _ended(run, {r: CALL + 3_020 * MS for r in range(4)})  # ends after the wait returned: no wait then
    assert diagnose_path(str(run)).verdict == "interrupted"


def _silent_run(tmp_path, steps=(0, 1), in_step=True, long_first_ns=0):
    """2 ranks, `steps` finished (1 ms each; the first `long_first_ns` longer, its start moved earlier), then
    nothing: no collective launched, none in flight; `in_step`: each rank entered region 'data' of the next
    step 10 µs after the last step's end, and its end (at the unwinding) came after the stop."""
    import json

    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1), steps=steps, style="run"), path)
    os.remove(path / "summary.json")
    last_end = T + (steps[-1] + 1) * 1_000 * US
    for r in (0, 1):
        ev = path / f"rank{r}" / "events.jsonl"
        rows = [json.loads(x) for x in ev.read_text().splitlines()]
        for row in rows:
            if row["kind"] == "step" and row["step"] == steps[0] and long_first_ns:
                row["start_ns"] -= long_first_ns
        if in_step:
            rows.append({"kind": "region", "rank": r, "step": steps[-1] + 1, "micro_step": 0, "name": "data",
                         # ended at the unwinding, just after the latest stop these tests make (7 s)
                         "start_ns": last_end + 10 * US, "end_ns": last_end + 7_001 * MS})
        ev.write_text("".join(json.dumps(x) + "\n" for x in rows))
    return path, last_end


def test_every_rank_silent_mid_step_when_stopped_is_a_hang_outside_communication(tmp_path):
    """Both ranks stuck in their own code inside step 2 (a data loader, a lock) and the job stopped 5 s later:
    no rank is missing from a collective, none waits, but none recorded anything for 5,000 median steps: a
    hang without culprit, not "stopped while it ran"; 3 ms of silence stays interrupted."""
    run, last = _silent_run(tmp_path)
    _ended(run, {0: last + 5_000 * MS, 1: last + 5_000 * MS + 50_000})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step) == ("hang", [], None, 1)
    assert d.summary.startswith("hang: no rank had recorded anything for 5.0 s (5,000 median steps), longer than "
                                "any step the job finished, when the job was stopped whole from outside: SIGTERM "
                                "reached both ranks within 0.1 ms")
    assert ("every rank inside a step and none waiting in a recorded collective: every rank was stuck outside "
            "communication (the training loop itself: a data loader, I/O, a lock, a long op). Rank 0 was in "
            "region data (step 2) when its end came") in d.summary
    assert d.details["silent_ms"] == 5_000.0 - 0.01 and [e["rank"] for e in d.evidence] == [0, 1]
    _ended(run, {0: last + 3 * MS, 1: last + 3 * MS})
    assert diagnose_path(str(run)).verdict == "interrupted"


def test_silence_between_steps_is_no_hang(tmp_path):
    """Stopped 5 s after step 1 ended, no rank in a step: a checkpoint, an eval loop or the profiler's export
    runs between steps and no record says so, so the job was stopped while it ran."""
    run, last = _silent_run(tmp_path, in_step=False)
    _ended(run, {0: last + 5_000 * MS, 1: last + 5_000 * MS})
    assert diagnose_path(str(run)).verdict == "interrupted"


def test_silence_no_longer_than_a_finished_step_is_no_hang(tmp_path):
    """Step 0 took 6 s (a slow first step, a hiccup the job recovered from): 5 s of silence in step 3 is no
    longer than a step the job finished, so no hang; 7 s is."""
    run, last = _silent_run(tmp_path, steps=(0, 1, 2), long_first_ns=6_000 * MS)
    _ended(run, {0: last + 5_000 * MS, 1: last + 5_000 * MS})
    assert diagnose_path(str(run)).verdict == "interrupted"
    _ended(run, {0: last + 7_000 * MS, 1: last + 7_000 * MS})
    assert diagnose_path(str(run)).verdict == "hang"


def test_one_rank_still_recording_is_no_silence_of_the_job(tmp_path):
    """Rank 1 recorded a region 1 ms before the stop: the job was not silent as a whole (rank 0 alone may
    just be slow), so interrupted stands."""
    import json

    run, last = _silent_run(tmp_path)
    end = last + 5_000 * MS
    with open(run / "rank1" / "events.jsonl", "a") as f:
        f.write(json.dumps({"kind": "region", "rank": 1, "step": 2, "micro_step": 0, "name": "forward",
                            "start_ns": end - 2 * MS, "end_ns": end - MS}) + "\n")
    _ended(run, {0: end, 1: end})
    assert diagnose_path(str(run)).verdict == "interrupted"


def _interrupted(run, ended_ns: int, last_step: int = 1):
    write_json(run / "summary.json", {"status": "interrupted", "world_size": 2, "ranks": {"0": "interrupted",
               "1": "interrupted"}, "exit_code": 130, "message": "interrupted by SIGINT after 2/40 steps"})
    for r in (0, 1):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                       "last_step": last_step, "ended_ns": ended_ns})


def test_ctrl_c_on_a_job_silent_mid_step_is_the_hang_outside_communication(tmp_path):
    """`commscope run` stopped by Ctrl-C (summary.json interrupted, KeyboardInterrupt statuses): the same
    silence of every rank reads as the hang, "when the run was stopped by the user"; a short one stays
    interrupted."""
    run, last = _silent_run(tmp_path)
    _interrupted(run, last + 3 * MS)
    assert diagnose_path(str(run)).verdict == "interrupted"
    _interrupted(run, last + 5_000 * MS)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [])
    assert d.summary.startswith("hang: no rank had recorded anything for 5.0 s (5,000 median steps), longer than "
                                "any step the job finished, when the run was stopped by the user (interrupted by "
                                "SIGINT after 2/40 steps), every rank inside a step")
    assert d.step == 1 and [e["status"] for e in d.evidence] == ["interrupted", "interrupted"]


def test_ctrl_c_while_every_member_waits_in_one_collective_is_the_hang_inside_it(tmp_path):
    """After Ctrl-C, ranks waiting in a collective every member launched are stuck inside it, not outside
    communication (their launch is in inflight.json, not among the recorded collectives)."""
    run = _run(tmp_path, all_launched=True)
    write_json(run / "summary.json", {"status": "interrupted", "world_size": 4, "ranks": {str(r): "interrupted"
               for r in range(4)}, "exit_code": 130, "message": "interrupted by SIGINT after 2/40 steps"})
    for r in range(4):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                       "last_step": 1, "ended_ns": CALL + 8_000 * MS})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label) == ("hang", [], "attn")
    assert d.summary.endswith("when the run was stopped by the user (interrupted by SIGINT after 2/40 steps). No "
                              "rank is missing from it: stuck inside the collective (the backend or the network).")


def test_ranks_ended_by_their_waits_error_after_the_signal_read_as_signalled(tmp_path):
    """DDP: the waiting ranks sit in the comm hook's wait when SIGTERM reaches the job; the stuck rank
    exits at once, and their wait raises gloo's "Connection closed by peer" before their own handler runs.
    Their status.json says which signal had begun their end (`signal`): the job was still stopped whole
    while rank 1 was stuck, the hang; without that field the ranks' ends cannot be read as one stop and
    rank 1 reads as killed from outside, but after the others had waited 6 s for it: stuck, the hang all
    the same."""
    run = _run(tmp_path)
    end = CALL + 6_000 * MS
    peer = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    for r in range(4):
        doc = {"status": "failed", "error": SIGTERM if r == 1 else peer, "last_step": 1, "ended_ns": end + r * 20_000}
        write_json(run / f"rank{r}" / "status.json", {**doc, **({} if r == 1 else {"signal": "SIGTERM"})})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label) == ("hang", [1], "attn")
    assert "rank 0 had waited 6.0 s in 'attn'" in d.summary and "SIGTERM reached all 4 ranks within" in d.summary
    for r in (0, 2, 3):
        doc.pop("signal", None)
        write_json(run / f"rank{r}" / "status.json", {**doc, "error": peer, "ended_ns": end + r * 20_000})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [1]), d.summary
    assert "rank 0 had waited 6.0 s in 'attn'" in d.summary
    assert d.summary.endswith("when rank(s) 1 were ended by SIGTERM from outside the job.")


def test_ctrl_c_on_a_job_whose_stopped_culprit_left_no_end_time_is_the_hang(tmp_path):
    """A rank stopped (SIGSTOP) and then the launcher Ctrl-C'd: the launcher kills the stopped rank and writes
    its status without an end time. The others had waited 4 s in 'attn' by their own ends: the hang stands
    (it read as interrupted). Waiting under the bar by then: interrupted, as before."""
    run = _run(tmp_path)
    for r in (0, 2, 3):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                      "last_step": 1, "ended_ns": CALL + 4_000 * MS})
    write_json(run / "rank1" / "status.json", {"status": "failed", "last_step": 1, "error": (
        "hung: stopped (SIGSTOP) for 6.1 s and never resumed (--hang-timeout 300 s)")})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", [1])
    assert "rank 0 had waited 4.0 s in 'attn'" in d.summary
    for r in (0, 2, 3):
        write_json(run / f"rank{r}" / "status.json", {"status": "interrupted", "error": "KeyboardInterrupt",
                                                      "last_step": 1, "ended_ns": CALL + 4 * MS})
    assert diagnose_path(str(run)).verdict == "interrupted"
