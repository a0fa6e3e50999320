"""How a rank's recording ends: `close()`, the interpreter-exit fallback and `handle_signals()`.

`Closing` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts). Closing
writes what is still buffered (steps.py), stops the profiler window, removes the gradient hooks
(hooks.py), closes events.jsonl, writes status.json (and, on an abnormal end, inflight.json, how far the
rank got, for `commscope doctor`). Three threads may close one recorder: the main thread leaving the
`with` block, the hang watchdog, and TermGuard when a signal finds the main thread blocked in C++. The
first of them writes; the others wait for status.json, so whoever ends the process next finds it there.

Why an interpreter-exit fallback: a script that dies by an unhandled exception, or forgets `close()`,
would otherwise leave no status.json, which `commscope doctor` reads as a crash without words.

Invariants: the rank's end is written once (`_close_lock`); after `_closed` is set every recording
method raises `CLOSED` (a collective is refused rather than run unrecorded or skipped); status.json is
written even when flushing fails; `close()` leaves the signal handlers as they were before
`handle_signals()`.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Iterable

from commscope.recording.api import end_status
from commscope.recording.termguard import SignalHandling, signal_arrived, signal_arrived_ns, signal_words
from commscope.recording.watchdog import write_inflight
from commscope.rundir import write_status
from commscope.rundir.schema import RANK_STATUSES

CLOSED = "the recorder is closed"
EXITED_ERROR = "process exited without Recorder.close()"


class Closing:
    """The end of a recording. State: `_closed`, `_close_lock`, `_close_done`, `_signals`."""

    def _init_closing(self) -> None:
        self._closed = False
        self._close_lock = threading.Lock()  # the main thread, the watchdog and TermGuard may all close
        self._close_done = threading.Event()
        self._signals: SignalHandling | None = None  # handle_signals()
        # "sys.exit(0) inside step 3": a SystemExit that left a step unfinished (Steps), which no status
        # "completed" may hide (its peers wait in that step's collectives for a rank that is gone)
        self.exited_in_step: str | None = None

    def handle_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGHUP), grace_s: float = 2.0) -> None:
        """Turn `signals` (torchrun's teardown sends SIGTERM) into this rank's status: a handler raising
        `Terminated("terminated by signal 15 (SIGTERM)")` on the main thread, plus a TermGuard that closes
        the recorder ("failed", "... while blocked in the wait of collective 'attn' ...": blocked_where) and
        exits 128 + signum when the main thread sits in C++ (a collective's wait) and cannot run the handler
        (termguard.SignalHandling). `close()`
        stops the guard and puts the previous handlers back. Main thread only."""
        if self._closed:
            raise RuntimeError(CLOSED)
        if self._signals is not None:
            raise RuntimeError("handle_signals() was already called for this recorder")
        self._signals = SignalHandling(self._on_stuck, signals, grace_s,
                                       stuck_waiting=lambda: bool(self.waiting_in()))

    def _on_stuck(self, signum: int) -> None:
        """TermGuard's thread: the main thread did not get to its own cleanup within the grace time (a
        Ctrl-C ends the rank as KeyboardInterrupt would have: interrupted)."""
        if signum == signal.SIGINT:
            status, error = "interrupted", f"KeyboardInterrupt: {signal_words(signum)} while blocked {self.blocked_where()}"
        else:
            status, error = "failed", f"Terminated: {signal_words(signum)} while blocked {self.blocked_where()}"
        print(f"commscope: rank {self.rank}: {error}", file=sys.stderr, flush=True)
        self._close(status, error, 10.0)

    def close(self, status: str = "completed", error: str | None = None, wait_s: float = 10.0) -> None:
        """Flush, stop the profiler window, remove hooks, write status.json (and, on an abnormal end,
        inflight.json); stop `handle_signals`' guard and restore the handlers it replaced. The first caller
        does it; a caller on another thread meanwhile waits up to `wait_s` for status.json to be written,
        so whoever exits next finds it there. `status` is one of rundir.schema.RANK_STATUSES (ValueError
        otherwise, before anything is written: the readers refuse any other)."""
        if status not in RANK_STATUSES:
            raise ValueError(f"close(status={status!r}): a rank's status is one of {', '.join(RANK_STATUSES)}")
        if self.exited_in_step is not None and (status, error) in (("completed", None), ("exited", EXITED_ERROR)):
            status, error = "exited", self.exited_in_step
        sh = self._signals
        if sh is not None and not sh.claim(wait_s):
            return  # the guard's thread closes (claim waited for it) and ends the process
        released = sh is not None and sh.release()
        try:
            self._close(status, error, wait_s)
        finally:
            if released:
                sh.restore()

    def _close(self, status: str, error: str | None, wait_s: float) -> None:
        if not self._close_lock.acquire(blocking=False):
            self._close_done.wait(wait_s)
            return
        self._closed = True
        # when the end began: a signal's arrival (the close may come seconds later, after TermGuard's grace)
        arrived = signal_arrived_ns() if status != "completed" else None
        if arrived is not None and arrived < self._started:  # an earlier recording's in this process, not ours
            arrived = None
        ended_ns = (arrived if arrived is not None else time.perf_counter_ns()) + self._shift
        signalled = signal_arrived() if arrived is not None else None
        try:
            if status != "completed":
                write_inflight(self, error)  # how far this rank got, for `commscope doctor`
            if self._window is not None and (status == "completed" or self._cuda is None):
                self._window.finish()
            self._write_behind(blocking=status == "completed")
            self._flush(blocking=status == "completed")
        finally:
            # status.json is written whatever fails before it (a hook that will not come off, a closing
            # write the disk refuses): without it doctor reads this rank as one that died
            try:
                self.unwatch()
                self._sink.close()
            finally:
                try:
                    write_status(self.rank_dir, status, error, -1 if self.last_step is None else self.last_step,
                                 ended_ns, signalled)
                finally:
                    self._close_done.set()
            note = self._window.close_note(self.last_step) if self._window is not None else None
            if note:
                print(note, file=sys.stderr, flush=True)

    def _at_exit(self) -> None:
        if self._close_lock.locked():  # somebody has closed (or is closing) the recorder
            return
        # Python sets sys.last_value (3.12: also sys.last_exc) for an unhandled exception before atexit
        # handlers run; a plain end of the script, sys.exit() or os._exit-free shutdown leaves none.
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if isinstance(exc, BaseException):
            self.close(*end_status(exc))
        else:
            # The script may have finished all it meant to or stopped early with sys.exit: not knowable here.
            self.close("exited", EXITED_ERROR)
