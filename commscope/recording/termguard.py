"""Let a rank leave its last words when SIGTERM arrives while its main thread is stuck in C++.

Why: Python runs signal handlers only on the main thread, between bytecodes. A rank blocked in a
collective's wait() (gloo or NCCL, in C++ with the GIL released) never runs its SIGTERM handler; the
launcher's teardown then SIGKILLs it and it leaves no status.json, which `doctor` must read as a crash
of that rank — a second "culprit" next to the rank that really died. Python's C-level handler does write
the signal number to the wakeup fd at once, though, so a daemon thread reading that fd can act while the
main thread is blocked.

How: `TermGuard.start()` (main thread, after a Python SIGTERM handler is installed) points the wakeup fd
at a socket pair and starts the thread. On SIGTERM the thread gives the main thread `grace_s` to reach
its own cleanup and `claim()` it; if it has not, the thread claims it, calls `on_stuck(signum)` (write
in-flight collectives and a "failed" status) and ends the process with 128 + signum.

`Recorder.handle_signals()` is the one-call use of it: a Python handler raising `Terminated` plus a guard
whose stuck path closes the recorder. `Terminated`'s message says "terminated by signal N (NAME)", the
wording `commscope doctor` reads as the consequence of another rank's fault rather than a fault of its own.

Invariants: exactly one of the main thread and the guard thread runs the cleanup (`claim()` is
first-come); the guard never touches the process unless a signal it watches arrived; `stop()` restores
the previous wakeup fd.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Callable


class Terminated(Exception):
    """A signal that ends the process (torch.distributed.run tearing the job down because another rank
    failed, the user interrupting the job, the kernel saying the launcher died), raised on the main thread
    by the handler `Recorder.handle_signals()` installs."""


def signal_words(signum: int) -> str:
    """"terminated by signal 15 (SIGTERM)"."""
    try:
        return f"terminated by signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        return f"terminated by signal {signum}"


def raise_terminated(signum: int, frame: object) -> None:
    """A Python signal handler: `Terminated("terminated by signal 15 (SIGTERM)")` on the main thread."""
    raise Terminated(signal_words(signum))


class TermGuard:
    def __init__(self, on_stuck: Callable[[int], None], *, grace_s: float = 2.0,
                 signals: tuple[int, ...] = (signal.SIGTERM,), exit_fn: Callable[[int], None] = os._exit):
        self.on_stuck = on_stuck
        self.grace_s = grace_s
        self.signals = set(signals)
        self._exit = exit_fn
        self._lock = threading.Lock()
        self._claimed_by: str | None = None
        self._guard_done = threading.Event()  # set when the guard's on_stuck has returned
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)  # the C handler must never block
        self._old_fd: int | None = None
        self._thread = threading.Thread(target=self._run, name="commscope-termguard", daemon=True)

    def start(self) -> "TermGuard":
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._old_fd is not None:
            signal.set_wakeup_fd(self._old_fd)
            self._old_fd = None
        self._w.close()  # ends the thread's recv

    def claim(self, who: str = "main", wait_s: float = 60.0) -> bool:
        """True for the first caller only: that caller owns the cleanup. A caller that lost to the guard
        thread waits (up to `wait_s`) until the guard's cleanup is written, so returning and exiting the
        interpreter cannot cut the guard's daemon thread short; the guard then ends the process."""
        with self._lock:
            holder = self._claimed_by
            if holder is None:
                self._claimed_by = who
                return True
        if holder == "guard":
            self._guard_done.wait(wait_s)
        return False

    @property
    def claimed_by(self) -> str | None:
        return self._claimed_by

    def _run(self) -> None:
        while True:
            try:
                data = self._r.recv(64)
            except OSError:
                return
            if not data:
                return
            hit = next((b for b in data if b in self.signals), None)
            if hit is None:
                continue
            # The main thread's own handler normally raises at once and claims the cleanup itself.
            time.sleep(self.grace_s)
            if not self.claim("guard"):
                return
            try:
                self.on_stuck(hit)
            except Exception:  # noqa: BLE001 - the exit below must happen whatever the callback does
                traceback.print_exc()
            finally:
                self._guard_done.set()
            sys.stderr.flush()
            self._exit(128 + hit)
            return
