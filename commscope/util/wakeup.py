"""Hand the signals that reach a process to a thread of its own, as they arrive.

Why: Python runs signal handlers on the main thread only, between bytecodes. A main thread blocked in C++
(a collective's wait, a pool's futex) never runs them. Python's C-level handler does write the signal's
number to the wakeup fd at once, whatever the main thread is doing, so a thread reading that fd can act on
it. Two parts of commscope need that: recording's TermGuard (a rank stuck in a collective still writes its
status) and the CLI's abandon section (a stop signal during HTA's fork pool ends the process).

`WakeupWatcher(on_signals, name)`: `start()` (main thread) points the wakeup fd at a socket pair and starts
a daemon thread that calls `on_signals(signal_numbers)` with every batch it reads until that returns True
(then it reads and drops them), until `stop()` puts the previous wakeup fd back and ends the thread.

Invariants: the write end never blocks (the C handler must not); the read end stays open and read for as
long as the wakeup fd points at the write end; only the watcher thread closes it, after stop(), so no other
thread's file descriptor can take its number while it reads; a
Python handler must be installed for each signal to watch (without one Python does not write it to the fd).
"""
from __future__ import annotations

import signal
import socket
import threading
from typing import Callable


class WakeupWatcher:
    def __init__(self, on_signals: Callable[[bytes], bool | None], name: str):
        self._on_signals = on_signals
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)  # the C handler must never block
        self._old_fd: int | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "WakeupWatcher":
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Put the previous wakeup fd back and end the thread (its read sees the write end closed)."""
        if self._old_fd is not None:
            signal.set_wakeup_fd(self._old_fd)
            self._old_fd = None
        self._w.close()
        if self._thread.ident is None:  # never started: no thread will close the read end
            self._r.close()

    def _run(self) -> None:
        done = False
        try:
            while True:
                try:
                    data = self._r.recv(64)
                except OSError:
                    return
                if not data:  # stop() closed the write end
                    return
                # once answered, later signals are read and dropped until stop(): the wakeup fd still points
                # at the write end, and a write to a socket whose peer is closed prints a traceback
                if not done and self._on_signals(data):
                    done = True
        finally:
            self._r.close()
