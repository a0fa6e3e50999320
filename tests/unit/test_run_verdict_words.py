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
