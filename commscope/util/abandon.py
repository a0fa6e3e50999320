"""End the process at once on a stop signal while code that cannot be unwound safely runs.

Why: HTA parses ranks in a fork pool (multiprocessing.Pool). A stop signal sent to the whole process group
(a job scheduler's SIGTERM, a terminal's Ctrl-C or SIGHUP) kills the pool's workers too, and one killed
while it holds the task queue's lock never releases it. Unwinding through the pool runs its `terminate()`,
which takes that lock and waits for ever, with a single thread left in a futex wait and the dead workers
unreaped. No exception can be raised through such a section; the process has to leave it. Nor can the
main thread be relied on to notice: Python runs handlers on it only, and a signal the kernel hands to one
of the pool's threads does not interrupt the main thread's wait.

`abandon_on_stop()`: while the block runs,
- in the CLI (SIGTERM's handler is the CLI's stop handler, which carries STOP_HANDLER), SIGTERM and SIGHUP
  where the CLI handles them, and SIGINT where it is Python's KeyboardInterrupt, are watched by a thread on
  Python's wakeup fd (commscope.util.wakeup): the first one kills the process's children, says
  `commscope: aborted (SIGTERM)` (`commscope: aborted` for Ctrl-C, as the CLI does), and exits 128 + the
  signal, skipping the interpreter's cleanup. A library caller's process (a notebook, a script calling
  summarize()) keeps its own handling: ending it, or its own children, is not commscope's to decide.
- a process forked takes the default action for those signals and no wakeup fd (a worker stopped by its
  pool's terminate() must end, and its signal must not reach this process's watcher); one forked after
  the first signal (the pool's thread replacing the workers that died) ends at once.

Invariant: the caller writes nothing inside the block that an abrupt exit would leave half-written (HTA
reads the traces where they are; the report is written after it).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator

from commscope.util.wakeup import WakeupWatcher

STOP_HANDLER = "commscope_stop_handler"  # an attribute the CLI's stop-signal handlers carry
# rounds of killing the children, 50 ms apart: a child forked before the signal but listed by multiprocessing
# only after the first round is killed in a later one (those forked after it end by themselves)
KILL_ROUNDS = 3
_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP", "SIGINT")) if s is not None)

_depth = 0         # sections open in this process: what a forked child does (_in_child)
_leaving = False   # a stop signal arrived: a child forked from now on ends at once


def _in_child() -> None:
    if _leaving:
        os._exit(0)
    if _depth:
        for s in _SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)


os.register_at_fork(after_in_child=_in_child)


def _cli(handler: object) -> bool:
    return bool(getattr(handler, STOP_HANDLER, False))


def _taken() -> list[int]:
    """The signals this section watches: none outside the CLI (module docstring)."""
    if not _cli(signal.getsignal(signal.SIGTERM)):
        return []
    return [s for s in _SIGNALS if _cli(signal.getsignal(s))
            or (s == signal.SIGINT and signal.getsignal(s) is signal.default_int_handler)]


def _leave(signum: int) -> None:
    """Kill the children (those forked from now on end by themselves), say so, and exit 128 + `signum`."""
    global _leaving
    _leaving = True
    import multiprocessing  # only here: the CLI imports this module on every command

    for _ in range(KILL_ROUNDS):
        children = multiprocessing.active_children()
        for child in children:
            child.kill()
        for child in children:
            child.join(1)
        time.sleep(0.05)
    with contextlib.suppress(Exception):
        import sys

        sys.stdout.flush()
    name = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        os.write(2, f"commscope: aborted{name}\n".encode())
    os._exit(128 + signum)


def _watching(watched: set[int]):
    def on_signals(data: bytes) -> bool:
        hit = next((b for b in data if b in watched), None)
        if hit is not None:
            _leave(hit)  # never returns
        return False
    return on_signals


def _noted(signum: int, _frame: object) -> None:
    """The Python handler of a watched signal, on the main thread whenever it gets to it: nothing to do, as
    the C handler under it wrote the signal to the wakeup fd, which the watcher reads at once."""


@contextlib.contextmanager
def abandon_on_stop() -> Iterator[None]:
    """The module docstring's section: a stop signal ends the process (and its children) at once."""
    global _depth
    _depth += 1
    watched: dict[int, object] = {}
    watcher = None
    try:
        if threading.current_thread() is threading.main_thread():
            taken = _taken()
            if taken:
                watcher = WakeupWatcher(_watching(set(taken)), "commscope-abandon").start()
                watched = {s: signal.signal(s, _noted) for s in taken}
        yield
    finally:
        while _leaving:  # the watcher is ending the process: nothing after the block may start writing
            time.sleep(1)
        for s, h in watched.items():
            signal.signal(s, h)
        if watcher is not None:
            watcher.stop()
        _depth -= 1
