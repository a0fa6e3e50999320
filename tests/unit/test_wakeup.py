"""commscope.util.wakeup: the watcher thread sees each signal the process receives, puts the previous wakeup
fd back at stop, ends its thread, and leaves no socket open."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from commscope.util.wakeup import WakeupWatcher

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def _wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def test_signals_reach_the_thread_and_stop_restores_everything() -> None:
    seen: list[int] = []
    got = threading.Event()

    def on_signals(data: bytes) -> bool:
        seen.extend(data)
        got.set()
        return False

    old_handler = signal.signal(signal.SIGUSR1, lambda *_: None)  # Python writes only handled signals
    before = _wakeup_fd()
    fds = _fds()
    try:
        watcher = WakeupWatcher(on_signals, "test-wakeup").start()
        assert _wakeup_fd() not in (-1, before)  # pointed at its socket
        signal.raise_signal(signal.SIGUSR1)
        assert got.wait(5)
        assert seen == [signal.SIGUSR1]
        thread = watcher._thread
        watcher.stop()
        thread.join(5)
        assert not thread.is_alive()
        assert _wakeup_fd() == before
        deadline = time.monotonic() + 5
        while _fds() - fds and time.monotonic() < deadline:  # the thread closes the read end on its way out
            time.sleep(0.01)
        assert not (_fds() - fds)
    finally:
        signal.signal(signal.SIGUSR1, old_handler)


def test_after_a_true_answer_later_signals_are_dropped_quietly_until_stop(capfd) -> None:
    """TermGuard answers True once it has acted (or lost the cleanup to the main thread), which may be seconds
    before the main thread stops it: a second SIGTERM meanwhile must not find the read end closed (Python
    prints "Exception ignored when trying to write to the signal wakeup fd")."""
    fds = _fds()
    calls: list[bytes] = []
    old_handler = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        watcher = WakeupWatcher(lambda data: calls.append(data) or True, "test-wakeup").start()
        for _ in range(3):
            signal.raise_signal(signal.SIGUSR1)
            time.sleep(0.1)
        assert calls == [bytes([signal.SIGUSR1])]  # answered once
        watcher.stop()
        watcher._thread.join(5)
        assert not watcher._thread.is_alive()
        WakeupWatcher(lambda data: False, "never-started").stop()
        assert not (_fds() - fds)
        assert "wakeup fd" not in capfd.readouterr().err
    finally:
        signal.signal(signal.SIGUSR1, old_handler)
