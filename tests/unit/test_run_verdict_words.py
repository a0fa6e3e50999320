"""`commscope run`'s one-line verdict says in words when a rank ended before finishing any step: a
status.json's last_step is -1 then, a sentinel that must not reach the user as "after step -1"."""
from instrumented_model.run_summary import JobEnd, verdict


def _status(error: str, last_step: int, ending: str, ended_ns: int = 1) -> dict:
    return {"status": "failed", "error": error, "last_step": last_step, "ending": ending, "ended_ns": ended_ns}


def test_an_error_before_any_step_is_said_in_words():
    statuses = {"0": _status("", 3, "completed"), "1": _status("RuntimeError: boom", -1, "error")}
    assert verdict(statuses, JobEnd(torchrun_code=1), 0, 10) == (
        "failed", "failed: rank 1 failed before finishing any step: RuntimeError: boom")


def test_an_error_after_a_step_names_it():
    statuses = {"0": _status("", 3, "completed"), "1": _status("RuntimeError: boom", 2, "error")}
    assert verdict(statuses, JobEnd(torchrun_code=1), 3, 10)[1] == "failed: rank 1 failed after step 2: RuntimeError: boom"


def test_the_first_signalled_rank_before_any_step():
    statuses = {"0": _status("Terminated: terminated by signal 15 (SIGTERM)", -1, "signalled", ended_ns=5),
                "1": _status("Terminated: terminated by signal 15 (SIGTERM)", -1, "signalled", ended_ns=9)}
    assert verdict(statuses, JobEnd(torchrun_code=1), 0, 10)[1] == (
        "failed: rank 0 ended first (Terminated: terminated by signal 15 (SIGTERM)) before finishing any step; "
        "torch.distributed.run then stopped the others")


def test_a_rank_without_a_folder_never_started_recording(tmp_path):
    """Torn down during start-up (or failed before its Recorder made the folder): "not started", not
    "crashed", and the verdict says the rank recorded nothing, unless a signal ended the run."""
    from instrumented_model.run_summary import rank_statuses
    from commscope.rundir.schema import NOT_STARTED

    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "status.json").write_text('{"schema_version": 1, "rank": 0, "status": "completed", '
                                                    '"error": null, "last_step": 2}')
    st = rank_statuses(str(tmp_path), range(2))
    assert st["0"]["status"] == "completed" and st["1"]["status"] == NOT_STARTED == "not started"
    assert st["1"]["ending"] == "no-folder"
    assert verdict(st, JobEnd(torchrun_code=1), 3, 10) == (
        "crashed", "crashed: rank(s) 1 ended before recording anything (no rank folder; their output is in "
                   "the launcher log)")
    assert verdict(st, JobEnd(torchrun_code=1, signal=2), 0, 10) == ("interrupted", "interrupted by SIGINT after 0/10 steps")


def test_torchrun_killed_after_every_rank_completed_says_so():
    statuses = {r: _status("", 9, "completed") for r in ("0", "1")}
    assert verdict(statuses, JobEnd(torchrun_code=-9), 10, 10)[1] == (
        "failed: torch.distributed.run was killed by SIGKILL after 10/10 steps; every rank had completed")
    statuses["1"] = _status("", 3, "no-status")
    assert "ended without a status" in verdict(statuses, JobEnd(torchrun_code=-9), 4, 10)[1]


def test_a_run_stopped_in_start_up_says_so_to_every_reader(tmp_path):
    """Interrupted before any rank made its folder: the readers refuse it with the launcher's own words."""
    import json

    import pytest

    from commscope.errors import UserError
    from commscope.load import load_path

    (tmp_path / "commscope-run.json").write_text(json.dumps({"schema_version": 1, "run_id": "abc"}))
    (tmp_path / "summary.json").write_text(json.dumps({
        "schema_version": 1, "status": "interrupted", "world_size": 2, "ranks": {"0": "not started", "1": "not started"},
        "exit_code": 130, "message": "interrupted by SIGINT after 0/40 steps"}))
    with pytest.raises(UserError, match=r"without rank\*/ folders: nothing was recorded \(summary.json: "
                                        r"interrupted by SIGINT after 0/40 steps\)"):
        load_path(str(tmp_path))


def test_summary_names_the_rank_that_ended_first_when_no_rank_failed_on_its_own(tmp_path):
    """The doctor's evidence where no record shows the cause: the rank whose status was written first of
    those a signal ended (rank 1 here, 60 ms before torchrun stopped rank 3)."""
    import argparse
    import json
    import os

    from instrumented_model.run_summary import RunProgress, build_summary

    errors = {0: "RuntimeError: Read error: Connection reset by peer", 1: "Terminated: terminated by signal 15 (SIGTERM)",
              2: "RuntimeError: Read error: Connection reset by peer", 3: "Terminated: terminated by signal 15 (SIGTERM)"}
    for r, t in ((0, 3.0), (1, 1.0), (2, 2.0), (3, 4.0)):
        d = tmp_path / f"rank{r}"
        d.mkdir()
        (d / "status.json").write_text(json.dumps({"schema_version": 1, "rank": r, "status": "failed",
                                                   "error": errors[r], "last_step": 38}))
        os.utime(d / "status.json", ns=(int(t * 1e9), int(t * 1e9)))
    args = argparse.Namespace(steps=200, backend="gloo", device="cpu", preset="tiny", head_layout="transposed",
                              comm_schedule="explicit")
    s = build_summary(str(tmp_path), args, 4, range(4), JobEnd(torchrun_code=1), RunProgress())
    assert s["status"] == "failed" and s["message"].startswith("failed: rank 1 ended first (Terminated")
    assert s["ended_first"] == {"rank": 1, "how": "signalled", "error": errors[1]}
    # a rank that failed on its own is the cause: no ended_first
    (tmp_path / "rank2" / "status.json").write_text(json.dumps({"schema_version": 1, "rank": 2, "status": "failed",
                                                                 "error": "ValueError: bad batch", "last_step": 38}))
    assert "ended_first" not in build_summary(str(tmp_path), args, 4, range(4), JobEnd(torchrun_code=1), RunProgress())


def test_one_signal_to_every_rank_is_an_interruption_not_a_first_rank():
    """torch.distributed.run signalled from outside (not through the launcher): every rank's end began within
    the bar of the others (status.json ended_ns), so none ended first; ends far apart still name the first,
    and a rank whose peer vanished is not said to have been stopped by torchrun."""
    sig = "Terminated: terminated by signal 15 (SIGTERM)"

    def st(error, ending, ended_ns, ended_from="status"):
        return {"status": "failed", "error": error, "last_step": 35, "ending": ending, "ended_ns": ended_ns,
                "ended_from": ended_from}

    together = {"0": st(sig, "signalled", 1_000_000), "1": st(sig, "signalled", 1_170_000)}
    assert verdict(together, JobEnd(torchrun_code=1), 36, 150) == (
        "interrupted", "interrupted by a signal that reached every rank within 0.2 ms (their status.json ended_ns), "
                       "from outside this launcher, after 36/150 steps")
    # the same ends from the files' mtimes (statuses without ended_ns) say nothing of when the signal came
    mtimes = {r: {**s, "ended_from": "mtime"} for r, s in together.items()}
    assert verdict(mtimes, JobEnd(torchrun_code=1), 36, 150)[1].startswith("failed: rank 0 ended first")
    apart = {"0": st(sig, "signalled", 1_000_000), "1": st(sig, "signalled", 600_000_000)}
    assert verdict(apart, JobEnd(torchrun_code=1), 36, 150)[1] == (
        f"failed: rank 0 ended first ({sig}) after step 35; torch.distributed.run then stopped the others")
    peer = {"0": st(sig, "signalled", 1_000_000), "1": st("RuntimeError: Connection closed by peer", "peer-gone", 9)}
    assert verdict(peer, JobEnd(torchrun_code=1), 36, 150)[1].endswith("after step 35; the others ended after it")


def test_ends_together_widen_by_the_clocks_alignment_error_as_the_doctor_reads_them(tmp_path):
    """The launcher and the doctor read one bar (rundir.schema.signalled_together_bar): two ranks' ends
    60 ms apart are one rank ended first on well-aligned clocks, and one signal to the whole job where each
    clock may be 10 ms off (50 ms + 2 × 10 ms = 70 ms)."""
    import json

    from types import SimpleNamespace

    from commscope.analyze.doctor_stopped import ends_of
    from instrumented_model.run_summary import rank_statuses, signalled_together

    def job(error_ns: int) -> dict:
        d = tmp_path / str(error_ns)
        for r, ended in ((0, 1_000_000_000), (1, 1_060_000_000)):
            (d / f"rank{r}").mkdir(parents=True)
            (d / f"rank{r}" / "status.json").write_text(json.dumps({
                "schema_version": 1, "rank": r, "status": "failed", "last_step": 3, "ended_ns": ended,
                "error": "Terminated: terminated by signal 15 (SIGTERM)"}))
            (d / f"rank{r}" / "meta.json").write_text(json.dumps({"rank": r, "clock": {
                "offset_ns": 0, "error_ns": error_ns, "method": "allreduce", "rounds": 8}}))
        return rank_statuses(str(d), range(2))

    aligned, loose = job(0), job(10_000_000)
    assert [s["clock_error_ns"] for s in loose.values()] == [10_000_000, 10_000_000]
    assert signalled_together(aligned) is None
    assert signalled_together(loose) == 60_000_000
    for statuses, together in ((aligned, False), (loose, True)):
        trace = SimpleNamespace(config={"meta": {int(r): {"clock": {"error_ns": s["clock_error_ns"]}}
                                                 for r, s in statuses.items()}})
        ends = ends_of(trace, {int(r): s for r, s in statuses.items()}, "SIGTERM")
        assert ends.together is together and ends.bar == 50_000_000 + 2 * statuses["0"]["clock_error_ns"]


def test_a_rank_whose_end_a_signal_began_counts_as_signalled_as_the_doctor_counts_it(tmp_path):
    """A DDP job stopped whole while rank 1 was stuck: rank 0, waiting in a collective, ends by the error its
    peer's end raised ("Connection closed by peer") before its own handler runs, and its status.json says
    which signal had begun its end (`signal`). The launcher reads that as the doctor does
    (rundir.schema.ending_signal): one signal to the whole job, not "rank 1 ended first"."""
    import json

    from commscope.rundir.schema import ending_signal
    from instrumented_model.run_summary import rank_statuses

    sig = "Terminated: terminated by signal 15 (SIGTERM)"
    gone = "RuntimeError: Connection closed by peer [127.0.0.1]:29500"
    for r, (error, signal, ended) in enumerate([(gone, "SIGTERM", 1_002_000), (sig, "SIGTERM", 1_000_000)]):
        (tmp_path / f"rank{r}").mkdir()
        (tmp_path / f"rank{r}" / "status.json").write_text(json.dumps({
            "schema_version": 1, "rank": r, "status": "failed", "last_step": 35, "ended_ns": ended,
            "error": error, "signal": signal}))
    statuses = rank_statuses(str(tmp_path), range(2))
    assert [statuses[r]["ending"] for r in "01"] == ["peer-gone", "signalled"]
    assert [ending_signal(statuses[r]) for r in "01"] == ["SIGTERM", "SIGTERM"]
    assert verdict(statuses, JobEnd(torchrun_code=1), 36, 150) == (
        "interrupted", "interrupted by a signal that reached every rank within 0.0 ms (their status.json ended_ns), "
                       "from outside this launcher, after 36/150 steps")
    # without `signal` the same error is a peer lost after rank 1 ended first
    (tmp_path / "rank0" / "status.json").write_text(json.dumps({
        "schema_version": 1, "rank": 0, "status": "failed", "last_step": 35, "ended_ns": 1_002_000, "error": gone}))
    assert verdict(rank_statuses(str(tmp_path), range(2)), JobEnd(torchrun_code=1), 36, 150)[1] == (
        f"failed: rank 1 ended first ({sig}) after step 35; the others ended after it")


def test_ending_signal_reads_the_error_first_then_the_signal_field():
    from commscope.rundir.schema import ending_signal

    assert ending_signal({"error": "Terminated: terminated by signal 1 (SIGHUP)", "signal": "SIGTERM"}) == "SIGHUP"
    assert ending_signal({"error": "RuntimeError: boom", "signal": "SIGINT"}) == "SIGINT"
    assert ending_signal({"error": "RuntimeError: boom"}) is None
    assert ending_signal({"error": None, "signal": 15}) is None  # not a name: not read


# The end of launcher.log of `commscope run --nproc 2 --steps 4` (torch 2.13.0, CPU) whose rank 1 was
# SIGKILLed 0.3 s after it started, before it made its folder; torchrun then stopped rank 0: torch's own
# ChildFailedError report, trimmed to it (and the first entry to the lines the reader reads).
_TORCHRUN_REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
======================================================
instrumented_model.train FAILED
------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 6797)  (SIGTERM)
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_22:20:25
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 6798)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 6798
======================================================
"""


def test_torchrun_report_names_each_failed_rank_and_its_first_failure(tmp_path):
    from instrumented_model.run_summary import torchrun_exits

    (tmp_path / "launcher.log").write_text("[default0]:some output\n" + _TORCHRUN_REPORT)
    assert torchrun_exits(str(tmp_path)) == {0: {"exit_code": -15, "root_cause": False},
                                             1: {"exit_code": -9, "root_cause": True}}
    (tmp_path / "launcher.log").write_text("[default0]:no report: the job completed\n")
    assert torchrun_exits(str(tmp_path)) == {}


def test_no_rank_started_names_the_rank_torchrun_saw_fail_first(tmp_path):
    """A rank SIGKILLed at start-up leaves no folder, and torchrun stops the others before they make theirs:
    the ranks' files say nothing, torchrun's report names the first failure and the rank it stopped after."""
    from instrumented_model.run_summary import rank_statuses, torchrun_exits

    (tmp_path / "launcher.log").write_text(_TORCHRUN_REPORT)
    st = rank_statuses(str(tmp_path), range(2))
    assert verdict(st, JobEnd(torchrun_code=1), 0, 4, exits=torchrun_exits(str(tmp_path))) == (
        "failed", "failed: no rank started recording: rank 1 ended by SIGKILL before making its folder; then rank 0 "
                  "ended by SIGTERM (torch.distributed.run's report); the launcher log holds the ranks' output")
    assert "a rendezvous that timed out" in verdict(st, JobEnd(torchrun_code=1), 0, 4)[1]  # no report: both causes


def test_a_rank_killed_after_completing_is_named_and_its_records_said_whole():
    """Every rank wrote status "completed", yet torchrun failed: a rank process ended badly in its shutdown.
    The run failed (exit 1), but its records are whole, and torchrun's report says which rank it was."""
    statuses = {r: _status("", 3, "completed") for r in ("0", "1")}
    exits = {1: {"exit_code": -9, "root_cause": True}}
    assert verdict(statuses, JobEnd(torchrun_code=1), 4, 4, exits=exits) == (
        "failed", "failed: every rank completed 4/4 steps and its records are whole; then rank 1 ended by SIGKILL "
                  "after writing its last record (torch.distributed.run's report)")
    assert verdict(statuses, JobEnd(torchrun_code=1), 4, 4, exits={0: {"exit_code": 3, "root_cause": True}})[1] \
        .endswith("then rank 0 exited with code 3 after writing its last record (torch.distributed.run's report)")
    assert verdict(statuses, JobEnd(torchrun_code=1), 4, 4)[1] == (
        "failed: every rank completed 4/4 steps and its records are whole; then torch.distributed.run exited 1: a "
        "rank's process failed after its last record (the launcher log says which)")
    assert verdict(statuses, JobEnd(torchrun_code=0), 4, 4)[0] == "completed"
