"""Let a rank leave its last words when SIGTERM arrives while its main thread is stuck in C++.

Why: Python runs signal handlers only on the main thread, between bytecodes. A rank blocked in a
collective's wait() (gloo or NCCL, in C++ with the GIL released) never runs its SIGTERM handler; the
launcher's teardown then SIGKILLs it and it leaves no status.json, which `doctor` must read as a crash
of that rank — a second "culprit" next to the rank that really died. Python's C-level handler does write
the signal number to the wakeup fd at once, though, so a daemon thread reading that fd can act while the
main thread is blocked.

How: `TermGuard.start()` (main thread, after a Python SIGTERM handler is installed) starts a
`commscope.util.wakeup.WakeupWatcher` on the wakeup fd. On SIGTERM the thread gives the main thread `grace_s` to reach
its own cleanup and `claim()` it; if it has not, the thread claims it, calls `on_stuck(signum)` (write
in-flight collectives and a "failed" status) and ends the process with 128 + signum. A Ctrl-C (SIGINT) is
the main thread's KeyboardInterrupt, for the script to handle, except where the main thread still sits in
a collective's wait `grace_s` after it (`stuck_waiting`): then it is ended the same way ("interrupted").

`SignalHandling` is the one-call use of it (`Recorder.handle_signals()`): a Python handler raising
`Terminated` plus a guard whose stuck path closes the recorder, undone again at close. `Terminated`'s message says "terminated by signal N (NAME)", the
wording `commscope doctor` reads as the consequence of another rank's fault rather than a fault of its own.

Invariants: exactly one of the main thread and the guard thread runs the cleanup (`claim()` is
first-come); the guard never touches the process unless a signal it watches arrived; `stop()` restores
the previous wakeup fd.
"""
from __future__ import annotations

import numbers
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterable

from commscope.util.wakeup import WakeupWatcher


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


# perf_counter_ns() when the first ending signal reached this process (raise_terminated ran, or a TermGuard
# read it from the wakeup fd while the main thread sat in C++): when the rank's end began. One process is
# one rank, so one value per process; status.json's `ended_ns` carries it for the doctor, which tells a
# job stopped whole (every rank signalled at once) from one rank ended first and the others after it.
_arrived_ns: int | None = None
_arrived_signal: str | None = None  # its name, "SIGTERM": status.json `signal`, whatever error then ended it


def _arrived(signum: int) -> None:
    global _arrived_ns, _arrived_signal
    if _arrived_ns is None:
        _arrived_ns = time.perf_counter_ns()
        try:
            _arrived_signal = signal.Signals(signum).name
        except ValueError:
            _arrived_signal = f"signal {signum}"


def signal_arrived_ns() -> int | None:
    """perf_counter_ns() at the first ending signal this process received (None: none yet)."""
    return _arrived_ns


def signal_arrived() -> str | None:
    """The name of the first ending signal this process received ("SIGTERM"; None: none yet). A rank whose
    main thread sat in a collective's wait may end by the error that wait then raises (its peer, stopped by
    the same signal, closed the connection): its status says which signal had begun its end."""
    return _arrived_signal


def raise_terminated(signum: int, frame: object) -> None:
    """A Python signal handler: `Terminated("terminated by signal 15 (SIGTERM)")` on the main thread."""
    _arrived(signum)
    raise Terminated(signal_words(signum))


def interrupt_timed(signum: int, frame: object) -> None:
    """Python's own SIGINT handler (KeyboardInterrupt), timing the arrival first: a Ctrl-C ends the rank as
    always, and its status says when."""
    _arrived(signum)
    signal.default_int_handler(signum, frame)


class TermGuard:
    def __init__(self, on_stuck: Callable[[int], None], *, grace_s: float = 2.0,
                 signals: tuple[int, ...] = (signal.SIGTERM,), exit_fn: Callable[[int], None] = os._exit,
                 stuck_waiting: Callable[[], bool] | None = None):
        """`stuck_waiting`: whether the main thread sits in a collective's wait that has not returned. Given,
        a Ctrl-C (SIGINT, left to the main thread's KeyboardInterrupt) the main thread has not acted on
        within `grace_s` while it still sits in that wait is handled as the watched signals are: the wait
        may never return (a peer stopped), and torch.distributed.run would SIGKILL the rank, statusless."""
        self.on_stuck = on_stuck
        self.grace_s = grace_s
        self.signals = set(signals)
        self.stuck_waiting = stuck_waiting
        self._exit = exit_fn
        self._lock = threading.Lock()
        self._claimed_by: str | None = None
        self._guard_done = threading.Event()  # set when the guard's on_stuck has returned
        self._watcher = WakeupWatcher(self._on_signals, "commscope-termguard")

    def start(self) -> "TermGuard":
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._watcher.stop()

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

    def _on_signals(self, data: bytes) -> bool:
        """The watcher thread, with the signal numbers it read: True once this guard has acted."""
        first = next((b for b in data if b in self.signals or b == signal.SIGINT), None)
        if first is not None:
            # now, not after the grace: the main thread may be blocked for good. Ctrl-C (SIGINT, Python's
            # KeyboardInterrupt) is timed too, though this guard leaves it to the main thread
            _arrived(first)
        hit = next((b for b in data if b in self.signals), None)
        if hit is None:
            if first != signal.SIGINT or self.stuck_waiting is None:
                return False
            # Ctrl-C: KeyboardInterrupt is the main thread's, unless it is stuck in a collective's wait
            time.sleep(self.grace_s)
            if not self.stuck_waiting():
                return False
            hit = signal.SIGINT
        else:
            # The main thread's own handler normally raises at once and claims the cleanup itself.
            time.sleep(self.grace_s)
        if not self.claim("guard"):
            return True
        try:
            self.on_stuck(hit)
        except Exception:  # noqa: BLE001 - the exit below must happen whatever the callback does
            traceback.print_exc()
        finally:
            self._guard_done.set()
        sys.stderr.flush()
        self._exit(128 + hit)
        return True


def _is_signal(sig: Any) -> bool:
    try:
        signal.Signals(sig)
    except (ValueError, TypeError):
        return False
    return True


class SignalHandling:
    """`signals` (torchrun's teardown sends SIGTERM) turned into an end the recorder can write: on the main
    thread a handler raising `Terminated`, and a TermGuard calling `on_stuck(signum)` (then exiting
    128 + signum) when the main thread sits in C++ and cannot run it. `release()` and `restore()` undo it
    around the recorder's close. Main thread only (Python's rule for signal handlers)."""

    def __init__(self, on_stuck: Callable[[int], None], signals: Iterable[int] | int, grace_s: float,
                 stuck_waiting: Callable[[], bool] | None = None):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("handle_signals() must be called from the main thread (Python runs signal "
                               "handlers there only)")
        sigs = (signals,) if isinstance(signals, int) else tuple(signals)
        if not sigs:
            raise ValueError("handle_signals(): signals is empty")
        for sig in sigs:
            if sig in (signal.SIGKILL, signal.SIGSTOP) or not _is_signal(sig):
                raise ValueError(f"handle_signals(): {sig!r} is not a signal that can be handled")
        if isinstance(grace_s, bool) or not isinstance(grace_s, numbers.Real) or not grace_s >= 0:
            raise ValueError(f"handle_signals(): grace_s must be a number of seconds >= 0, got {grace_s!r}")
        self._old: dict[int, Any] = {sig: signal.signal(sig, raise_terminated) for sig in sigs}
        if signal.SIGINT not in self._old and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            # Ctrl-C stays a KeyboardInterrupt, timed (the doctor reads when each rank's end began); a
            # script's own SIGINT handler is left alone
            self._old[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt_timed)
        # a Ctrl-C left to KeyboardInterrupt (timed above) is ended by the guard too where the main thread
        # stays stuck in a collective's wait; a script's own SIGINT handler is left alone
        stuck = stuck_waiting if signal.getsignal(signal.SIGINT) is interrupt_timed else None
        self._guard: TermGuard | None = TermGuard(on_stuck, grace_s=float(grace_s), signals=sigs,
                                                  stuck_waiting=stuck).start()
        self._held: list[int] = []

    def claim(self, wait_s: float) -> bool:
        """Whether the caller may close; False when the guard's thread closes instead (and ends the process)."""
        return self._guard is None or self._guard.claim("close", wait_s)

    def release(self) -> bool:
        """Main thread, at close: stop the guard and hold back signals until `restore()`, so one arriving
        while the recorder writes its last words cannot cut them short. False on another thread, where
        signal handlers and the wakeup fd cannot be changed (nothing is done)."""
        if self._guard is None or threading.current_thread() is not threading.main_thread():
            return False
        guard, self._guard = self._guard, None
        for sig in self._old:
            signal.signal(sig, lambda signum, frame: self._held.append(signum))
        guard.stop()
        return True

    def restore(self) -> None:
        """Put the handlers back that were there before, then raise the signals held back meanwhile."""
        old, self._old = self._old, {}
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(self._held):
            signal.raise_signal(sig)
