"""End the process at once on a stop signal while code that cannot be unwound safely runs.

Why: HTA parses ranks in a fork pool (multiprocessing.Pool). A stop signal sent to the whole process group
(a job scheduler's SIGTERM, a terminal's Ctrl-C or SIGHUP) kills the pool's workers too, and one killed
while it held the task queue's lock never releases it. Unwinding through the pool then runs its
`terminate()`, which takes that lock, and waits for ever: `commscope report` was seen hung with a single
thread in a futex wait and its dead workers unreaped, in repeated trials of SIGTERM to the process group
during HTA's parse on a 2-core machine. No exception can be raised through such a section; the process
has to leave it.

`abandon_on_stop()`: while the block runs in the main thread, SIGTERM, SIGHUP and SIGINT kill and reap
the process's child processes, say `commscope: aborted (SIGTERM)` (`commscope: aborted` for Ctrl-C, as
the CLI does), and exit 128 + the signal, skipping the interpreter's cleanup. A signal whose handler is
the script's own (neither the default, Python's KeyboardInterrupt, nor the CLI's stop handler, which
carries STOP_HANDLER) or that is ignored is left alone. A process forked inside the block ends on any of
them.

Invariant: the caller writes nothing inside the block that an abrupt exit would leave half-written (HTA
reads the traces where they are; the report is written after it).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

STOP_HANDLER = "commscope_stop_handler"  # an attribute the CLI's stop-signal handlers carry


def _ours(handler: object) -> bool:
    return handler in (signal.SIG_DFL, signal.default_int_handler) or bool(getattr(handler, STOP_HANDLER, False))


@contextlib.contextmanager
def abandon_on_stop() -> Iterator[None]:
    """The module docstring's section: a stop signal ends the process (and its children) at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    me = os.getpid()

    def leave(signum: int, _frame: object) -> None:
        if os.getpid() != me:  # a forked worker: it just ends
            os._exit(128 + signum)
        import multiprocessing  # only here: the CLI imports this module on every command

        for child in multiprocessing.active_children():
            child.kill()
        for child in multiprocessing.active_children():
            child.join(5)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        name = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            os.write(2, f"commscope: aborted{name}\n".encode())
        os._exit(128 + signum)

    old: dict[int, object] = {}
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):  # by name: SIGHUP is not on every platform
        s = getattr(signal, name, None)
        if s is not None and _ours(signal.getsignal(s)):
            old[s] = signal.signal(s, leave)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
