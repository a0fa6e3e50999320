"""The reference trainer leaves a rank's end in the recording API's words (commscope.recording.api
.end_status): Ctrl-C (SIGINT) is status "interrupted" with error "KeyboardInterrupt", SIGTERM and SIGHUP
"failed" with "Terminated: terminated by signal N (NAME)"; and `doctor` reads the Ctrl-C status as an
interruption, not a fault."""
from __future__ import annotations

import json
import os
import signal

import pytest

from instrumented_model import train


@pytest.fixture
def rank_main(monkeypatch, tmp_path):
    """train.main on rank 0 of 1 with `train()` replaced; the process's signal handlers restored after."""
    saved = {sig: signal.getsignal(sig) for sig in train.END_SIGNALS}
    monkeypatch.setenv("RANK", "0"), monkeypatch.setenv("LOCAL_RANK", "0"), monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(train, "die_with_parent", lambda: None)
    monkeypatch.setattr(train, "check_args", lambda args, world_size: None)

    def run(body) -> tuple[int, dict]:
        monkeypatch.setattr(train, "train", lambda args, run: body())
        code = train.main(["--out", str(tmp_path), "--device", "cpu"])
        return code, json.loads((tmp_path / "rank0" / "status.json").read_text())

    yield run
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _signal_self(sig):
    def body():
        os.kill(os.getpid(), sig)
        signal.pause()  # the handler raises before this returns
    return body


def test_ctrl_c_is_interrupted_as_in_the_recording_api(rank_main):
    code, st = rank_main(_signal_self(signal.SIGINT))
    assert (st["status"], st["error"]) == ("interrupted", "KeyboardInterrupt") and code == 1


@pytest.mark.parametrize("sig, name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")])
def test_sigterm_and_sighup_name_the_signal_as_the_recording_api_does(rank_main, sig, name):
    code, st = rank_main(_signal_self(sig))
    assert (st["status"], st["error"]) == ("failed", f"Terminated: terminated by signal {int(sig)} ({name})")


def test_an_error_is_failed_with_its_type(rank_main):
    def body():
        raise RuntimeError("boom")
    code, st = rank_main(body)
    assert (st["status"], st["error"], code) == ("failed", "RuntimeError: boom", 1)
