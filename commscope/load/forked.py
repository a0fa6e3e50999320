"""A minimal process pool for parsing files: `run(fn, items, workers)`, forked workers that each take the
next item from one queue and send its result back on a pipe of their own; with `in_parent`, the calling
process takes items from the same queue too.

Why not concurrent.futures: its workers stay until the parent has processed the last result and sends
exit sentinels, and its manager thread must then be joined (or it races interpreter exit on CPython 3.11).
Here the first QUEUE_AHEAD items are queued before the workers start and the rest as results come back,
each followed by one end marker per worker once the last item is queued, so a worker that finds no more
items exits at once (tearing down a forked copy of the parent takes ~10 ms), overlapping the other
workers' last items and the parent's work. The queue is a pipe (64 KiB: about 4,000 queued items): queuing
every item of a 4,096-rank folder before any worker read would block the parent on its own pipe forever.

Why `in_parent`: a result parsed in the parent is neither pickled nor sent nor unpickled (~5 ms of a
~60 ms Kineto file, on the critical path), and there is one process fewer to fork and tear down; with
one process per core the parent would otherwise only wait. While it works on an item it cannot read the
pipes, so they are enlarged to hold a whole result (Linux) and a worker finishing meanwhile need not wait;
between its items the parent takes in whatever has arrived.

Memory (`cost`, `budget`): an item's `cost` is its estimated peak memory while parsed. When the costs of
all items together exceed `budget`, items are queued as memory frees up (`Budget`): in order, the next
once its cost fits in what the running ones leave of the budget, or when none is running. One command's
parses then stay within the budget however many cores there are. The parent only hands items out in
that case (a parent busy parsing could not free memory and queue the next item); `in_parent`'s saving
matters for small files only.

A worker never outlives the parent: it holds no pipe end but its own writing end (an inherited reading
end would keep its `send` blocked forever once the parent has gone), it is killed when the parent dies
(Linux's PR_SET_PDEATHSIG, checked against a parent that died before it was set), and it takes SIGTERM
and SIGHUP with their default action, not the parent's handlers.

Invariants: results come back in the order of `items` (progress counts completions, in any order); an
item whose call raised raises in the parent (the first such item in order; from a worker, its traceback
attached as the cause); a worker that dies is an error at once; workers are reaped, or killed if the
caller stops early, when the block ends.
"""
from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from commscope.errors import UserError
from commscope.load.files import gc_paused

try:
    import fcntl
except ImportError:  # pragma: no cover - not Unix: pipes keep their size
    fcntl = None

_DONE = None  # the end marker in the item queue
_BYE = "bye"  # a worker's last message: it ran out of items (EOF without it: the worker died)
_PIPE_BYTES = 1 << 20  # Linux's default limit for unprivileged processes (/proc/sys/fs/pipe-max-size)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# items queued and not yet done, at most: well within what the task pipe buffers (module docstring)
QUEUE_AHEAD = 1024


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, as text (attached as the exception's cause)."""

    def __str__(self) -> str:
        return self.args[0]


class Budget:
    """Which items run at once under a memory budget: items start in order, the next once its cost fits
    in what the running ones leave of `limit` or when none is running (so an item costlier than the whole
    budget still runs, alone), and never more than `ahead` at once. `limit` None: no budget."""

    def __init__(self, costs: list[int], limit: int | None, ahead: int = QUEUE_AHEAD) -> None:
        self.costs, self.limit, self.ahead = costs, limit, ahead
        self.next = 0  # the first item not started
        self.used = 0  # the costs of the running items
        self.running = 0

    def binds(self) -> bool:
        """Whether running every item at once would pass the budget."""
        return self.limit is not None and sum(self.costs) > self.limit

    def most_at_once(self) -> int:
        """The most items that can ever run at once (the cheapest ones together), at least 1."""
        if not self.binds():
            return len(self.costs)
        k, total = 0, 0
        for c in sorted(self.costs):
            total += c
            if total > self.limit:
                break
            k += 1
        return max(k, 1)

    def start(self) -> list[int]:
        """The items that start now (marked running)."""
        out = []
        while self.next < len(self.costs) and self.running < self.ahead and (
                self.running == 0 or self.limit is None or self.used + self.costs[self.next] <= self.limit):
            out.append(self.next)
            self.used += self.costs[self.next]
            self.running += 1
            self.next += 1
        return out

    def claim(self) -> int | None:
        """The next item, started by the caller itself rather than queued (so beyond `ahead`); None when
        every item has started."""
        if self.all_started():
            return None
        i = self.next
        self.used += self.costs[i]
        self.running += 1
        self.next += 1
        return i

    def finish(self, i: int) -> None:
        self.used -= self.costs[i]
        self.running -= 1

    def all_started(self) -> bool:
        return self.next == len(self.costs)


@functools.cache
def _prctl() -> Callable | None:
    """libc's prctl (Linux), or None. Loaded in the parent, once: a worker then only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None


def _bind_to_parent(parent: int, prctl: Callable | None, inherited: list) -> None:
    """In a new worker: be killed when `parent` dies, leave SIGTERM/SIGHUP to their default action, and
    close the pipe ends inherited from the parent (the other workers' and its own reading ends)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if prctl is not None:  # "the parent" is the thread that forked: run() is called on the main thread
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was set
        os._exit(1)
    for c in inherited:
        c.close()


def _sendable(e: BaseException) -> BaseException:
    """`e` if the parent can rebuild it from its pickle, else a RuntimeError with its type and message:
    an exception whose constructor takes other arguments than its `args` would fail in the parent's
    unpickling, as a traceback far from its cause."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any failure to round-trip
        return RuntimeError(f"{type(e).__name__}: {e}")


def _work(tasks: Any, out: Any, fn: Callable, items: list, init: Callable | None, parent: int,
          prctl: Callable | None, inherited: list) -> None:
    _bind_to_parent(parent, prctl, inherited)
    if init is not None:
        init()
    while (i := tasks.get()) is not _DONE:
        try:
            out.send((i, fn(items[i]), None, None))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            out.send((i, None, _sendable(e), traceback.format_exc()))
    out.send(_BYE)
    out.close()


def _how_died(procs: list) -> str:
    """" (killed by signal 9, SIGKILL)" for the first worker that ended abnormally, once reaped."""
    for p in procs:
        p.join(timeout=1.0)
        code = p.exitcode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f" (killed by signal {-code}, {signal.Signals(-code).name})"
            return f" (killed by signal {-code})"
        if code:
            return f" (exit code {code})"
    return ""


@contextlib.contextmanager
def run(fn: Callable, items: list, workers: int, progress: Callable[[int, int], None] | None = None,
        init: Callable | None = None, in_parent: bool = False, cost: Callable[[Any], int] | None = None,
        budget: int | None = None) -> Iterator[list]:
    """`[fn(x) for x in items]` computed by `workers` forked processes (each calling `init` first) and,
    `in_parent`, by this process too (without `init`); with `budget`, items whose `cost` together pass
    it are not parsed all at once (see the module docstring)."""
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    n = len(items)
    gate = Budget([cost(x) for x in items] if cost is not None else [0] * n, budget)
    if gate.binds():  # the parent hands items out as memory frees up, so it parses none itself
        workers, in_parent = max(1, min(workers + in_parent, gate.most_at_once())), False
    else:
        gate = Budget(gate.costs, None)  # everything starts as fast as the queue takes it
    tasks = ctx.SimpleQueue()
    # The parent takes its items from the queue only where every item is queued before the workers start:
    # otherwise it could wait on an empty queue whose reading lock a worker holds (the worker waiting for
    # items the parent queues as it takes in results), and it claims items from the gate directly instead.
    from_queue = in_parent and n <= gate.ahead
    ends = workers + from_queue  # end markers, one per process that reads the queue
    marked = False

    def feed() -> None:
        nonlocal marked
        for i in gate.start() if ends else ():  # nobody reads the queue: the parent claims every item
            tasks.put(i)
        if gate.all_started() and not marked:
            marked = True
            for _ in range(ends):
                tasks.put(_DONE)

    feed()
    procs, readers = [], []
    finished = False
    try:
        parent, prctl = os.getpid(), _prctl()
        for _ in range(workers):
            r, w = ctx.Pipe(duplex=False)
            _enlarge(r)
            p = ctx.Process(target=_work, args=(tasks, w, fn, items, init, parent, prctl, [*readers, r]),
                            daemon=True)
            p.start()
            w.close()  # the worker holds the writing end: EOF here means it has gone
            procs.append(p)
            readers.append(r)
        got = _Results(n, progress, gate, feed)
        live = list(readers)
        if in_parent:
            while (i := tasks.get() if from_queue else gate.claim()) not in (_DONE, None):
                try:
                    value = fn(items[i])
                except Exception as e:  # noqa: BLE001 - raised in item order below, as a worker's would be
                    got.add(i, None, e, None)
                else:
                    got.add(i, value, None, None)
                got.receive(live, timeout=0)
            feed()  # every item started: the workers' end markers
        while got.done < n:
            if got.died or not live:
                raise UserError(f"a parse worker died{_how_died(procs)} after {got.done} of {n} files; a killed "
                                "worker most often means the system ran out of memory: COMMSCOPE_MAX_PARSE_MB "
                                "lowers how much is parsed at once")
            got.receive(live, timeout=None)
        if got.errors:
            err, tb = got.errors[min(got.errors)]
            if tb is not None:
                err.__cause__ = RemoteTraceback(tb)
            raise err
        finished = True
        yield got.values
    finally:
        for p in procs:
            if not finished:
                p.terminate()
            p.join()
        for r in readers:
            r.close()
        tasks.close()


def _enlarge(conn: Any) -> None:
    """Let the pipe behind `conn` buffer a whole result, where the platform allows (Linux ≥ 2.6.35)."""
    with contextlib.suppress(AttributeError, OSError):  # no fcntl / no F_SETPIPE_SZ / over the limit
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


class _Results:
    """Results (and errors, by item) as they complete, from the workers' pipes or from the parent; each
    completion frees its item's share of `gate` and calls `feed` to start what now fits."""

    def __init__(self, n: int, progress: Callable[[int, int], None] | None, gate: Budget,
                 feed: Callable[[], None]) -> None:
        self.values: list = [None] * n
        self.errors: dict[int, tuple] = {}
        self.done = 0
        self.died = False  # a worker's pipe ended without its last message
        self._progress = progress
        self._gate, self._feed = gate, feed

    def add(self, i: int, value: Any, err: BaseException | None, tb: str | None) -> None:
        if err is not None:
            self.errors[i] = (err, tb)
        else:
            self.values[i] = value
        self.done += 1
        self._gate.finish(i)
        self._feed()
        if self._progress:
            self._progress(self.done, len(self.values))

    def receive(self, readers: list, timeout: float | None) -> None:
        """Take in the results waiting on `readers` (within `timeout`: 0 polls, None blocks until one
        arrives); a reader whose worker has gone is removed from the list (`died` when it ended without
        its last message)."""
        with gc_paused():  # unpickling a result allocates ~10⁴ objects: no collections meanwhile
            for r in wait(readers, timeout):
                try:
                    msg = r.recv()
                except EOFError:
                    readers.remove(r)
                    self.died = True
                    continue
                if isinstance(msg, str):  # _BYE
                    readers.remove(r)
                    continue
                self.add(*msg)
