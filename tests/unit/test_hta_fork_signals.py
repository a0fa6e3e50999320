"""While HTA runs, a process it forks (its parse pool) ends on SIGTERM by the kernel's default action, not
through the CLI's inherited Python handler: a pool worker blocked in its queue lock would outlive the
SIGTERM that HTA's pool sends to stop it, and `report` would wait for ever (commscope.util.abandon gives a child forked
in its section the default actions). Outside HTA a fork keeps the handler."""
from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import types

import pytest

from commscope.analyze import hta_bridge


def _child_handler_is_default() -> bool:
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=lambda: q.put(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL))
    p.start()
    p.join(30)
    return q.get()


class _FakeTraceAnalysis:
    """Forks as HTA's parse pool does, and notes what SIGTERM does in the child."""

    seen: list[bool] = []

    def __init__(self, trace_files: dict, trace_dir: str):
        _FakeTraceAnalysis.seen.append(_child_handler_is_default())


@pytest.fixture
def python_sigterm_handler():
    def raise_(signum, frame):  # as commscope.cli installs while a command runs
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, raise_)
    yield
    signal.signal(signal.SIGTERM, old)


def test_children_forked_while_hta_runs_end_on_sigterm(tmp_path, monkeypatch, python_sigterm_handler):
    pytest.importorskip("hta")  # run_hta reads HTA's version before anything else
    fake = types.ModuleType("hta.trace_analysis")
    fake.TraceAnalysis = _FakeTraceAnalysis
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", fake)
    (tmp_path / "rank0.json").write_text('{"traceEvents": []}')
    _FakeTraceAnalysis.seen.clear()
    res = hta_bridge.run_hta({0: str(tmp_path / "rank0.json")})
    assert _FakeTraceAnalysis.seen == [True] and res["status"] == "partial"  # the fake has no analyses
    assert not _child_handler_is_default()  # after HTA, a fork inherits the Python handler again


def test_after_the_first_signal_the_command_ignores_a_second_and_its_forks_still_end():
    """The CLI's second stage (a SIGTERM while the first one's cleanup runs) is ignored by the command, but
    not by a process it forks meanwhile: a pool that replaces its killed workers during the cleanup starts
    ones that end on the SIGTERM its terminate() sends (with SIG_IGN they would outlive it, and `report`
    would wait for them for ever)."""
    import os
    import time

    from commscope.cli import Interrupted, _stop_signals_raise

    with _stop_signals_raise():
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # the second: ignored by this process
        time.sleep(0.05)
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a worker started during the cleanup, blocked in its own work
            os.write(ready_w, b"x")  # past the fork's own signal bookkeeping, which drops one arriving in it
            time.sleep(30)
            os._exit(0)
        os.read(ready_r, 1)
        os.kill(pid, signal.SIGTERM)
        _, code = os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(ready_w)
        assert os.waitstatus_to_exitcode(code) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
