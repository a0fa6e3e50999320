"""The launcher's signal handling (instrumented_model.launcher._Signals): SIGINT, SIGTERM and SIGHUP stop
the job, except a signal the launcher was started ignoring, which stays ignored: SIGHUP under `nohup`
(closing the terminal must not stop the run) and SIGINT in a shell's background job."""
from __future__ import annotations

import signal
import sys

import pytest

from instrumented_model.launcher import _Signals

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")


@pytest.fixture
def restore():
    saved = {s: signal.getsignal(s) for s in _Signals.SIGNALS}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("ignored", [signal.SIGHUP, signal.SIGINT], ids=["nohup", "background job"])
def test_a_signal_started_ignored_stays_ignored_and_the_others_stop_the_job(restore, ignored):
    for s in _Signals.SIGNALS:
        signal.signal(s, signal.SIG_IGN if s == ignored else signal.SIG_DFL)
    sig = _Signals()
    with sig:
        for s in _Signals.SIGNALS:
            if s == ignored:
                assert signal.getsignal(s) is signal.SIG_IGN
            else:
                assert signal.getsignal(s) == sig._handle
        signal.raise_signal(ignored)  # nothing happens: no job stop, no exception
        assert sig.received is None
        signal.raise_signal(signal.SIGTERM)
        assert sig.received == signal.SIGTERM  # before a job is attached: kept for attach() to forward
    # restored as they were on the way out
    assert signal.getsignal(ignored) is signal.SIG_IGN
    assert all(signal.getsignal(s) is signal.SIG_DFL for s in _Signals.SIGNALS if s != ignored)
