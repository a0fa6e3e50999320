"""Collective bookkeeping: each recorded collective's record from its launch to its known completion,
and the in-flight table of those not known to have finished (`collective` records, docs/run_format.md).

`Collectives` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts).
`collective()` numbers the launch within its process group, runs the collective with `async_op=True`,
and returns a `RecordedHandle` whose `wait()` stamps the wait. The record stays in `inflight` until its
completion is known; the step writer (steps.py) asks `_finish_collective` which pending ones it may write.

Which interval a CUDA collective's `start_ns`/`end_ns` measure: with NCCL and `async_op=True` the op
runs on NCCL's internal stream, which first waits for the current stream. `start_ns` is an event on the
current stream just before the launch: when the collective's inputs were ready (it may still queue
behind earlier collectives of the communicator). `end_ns` is an event on the current stream right
after `wait()` (which makes the current stream wait for NCCL): when the result became usable by the
caller, an upper bound on completion. NCCL's own kernel duration is added as `duration_ns` when
`TORCH_NCCL_ENABLE_TIMING=1` (NCCL's events on its own stream). On CPU/gloo `start_ns` is null and
`end_ns` is the Work future's completion callback time (the return of `wait()` for a Work without a
future).

A collective whose handle the caller drops without waiting (DDP's join path; a fire-and-forget launch) is
written, with `wait_ns` and `end_ns` null, once the backend says its Work has finished (`is_completed()`,
non-blocking): nobody can wait on it any more, and kept it would hold up every later record.

Invariants: sequence numbers count this recorder's collectives per group from 0; a collective whose
completion is unknown (failed ones included) stays in `inflight`, for the hang watchdog, and is never
written half-known (a dropped, finished one is known to have finished, at an unknown time); the
completion callback, on gloo's worker thread, only makes GIL-atomic assignments.
"""
from __future__ import annotations

import os
import time
import weakref
from collections import defaultdict
from typing import Any, Callable

import torch

from commscope.recording.api import (CollectiveHandle, check_collective_fn, check_label, check_phase, group_argument,
                                     profiler_active)
from commscope.recording.closing import CLOSED
from commscope.recording.collective import GroupInfo, comm_size, op_name

_perf = time.perf_counter_ns
_profiling = profiler_active


class PendingCollective:
    """One launched collective: its record (raw local times) plus what is needed to finish it."""

    __slots__ = ("rec", "work", "waited", "done", "handle", "__weakref__")

    def __init__(self, rec: dict, work: Any):
        self.rec = rec
        self.work = work
        self.waited = False
        self.done = False  # completion known (CPU callback fired / CUDA end event recorded / finished unwaited)
        self.handle: Callable[[], Any] = _gone  # weak reference to the caller's handle, set by collective()


def _gone() -> None:
    return None


def _completed(work: Any) -> bool:
    """Whether the backend says `work` has finished (a non-blocking query); False when it cannot say."""
    try:
        return work is not None and bool(work.is_completed())
    except Exception:  # a backend without the query: not known to be finished
        return False


class RecordedHandle(CollectiveHandle):
    """`wait()` records when it was entered and returned (and, on CUDA, an end event after it)."""

    def __init__(self, work: Any, entry: PendingCollective, recorder: "Collectives"):
        super().__init__(work)
        self._entry = entry
        self._recorder = recorder

    def wait(self) -> None:
        entry = self._entry
        if entry.waited:
            super().wait()
            return
        entry.rec["wait_ns"] = _perf()
        super().wait()
        entry.rec["wait_end_ns"] = _perf()
        entry.waited = True
        if self._recorder._cuda is not None:
            entry.rec["end_ns"] = self._recorder._cuda.stamp()
            entry.done = True
            if not self._recorder._nccl_timing:
                # Only NCCL's own duration needs the Work at the step-end flush. Released here, it is freed
                # when the caller drops it, inside the step as without recording, instead of ~17 µs a Work in
                # the flush, which runs after the step's sync with the GPU idle.
                entry.work = None
        elif self.work is None or entry.work is not None:  # no completion callback for this work
            entry.rec["end_ns"] = entry.rec["wait_end_ns"]
            entry.rec["end_at_wait"] = True  # its duration runs to the wait: no transfer time (docs/run_format.md)
            entry.done = True
            entry.work = None


class Collectives:
    """`collective()` and the in-flight table. State: `inflight`, `_groups`, `_seq`, `_no_future`,
    `_nccl_timing`."""

    def _init_collectives(self) -> None:
        # NCCL reads this once, when the process group is created: so can we.
        self._nccl_timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING", "0") not in ("0", "")
        self._groups = GroupInfo()
        self._no_future: set[str] = set()  # ops whose gloo Work has no future
        self._seq: dict[str, int] = defaultdict(int)
        # (group, seq) → record of a launched collective whose completion is not known yet.
        self.inflight: dict[tuple[str, int], dict] = {}

    def collective(self, fn: Callable, *args: Any, label: str | None, phase: str, **kwargs: Any) -> CollectiveHandle:
        if self._closed:  # raising, not skipping: the caller's collective must never silently not run
            raise RuntimeError(CLOSED)
        check_collective_fn(fn, kwargs)
        check_label(label)
        check_phase(phase)
        op = op_name(fn)
        gname, gsize = self._groups(group_argument(fn, args, kwargs))
        if gsize < 1:  # this rank is no member of the group: torch runs nothing here, so nothing is recorded
            return CollectiveHandle(fn(*args, async_op=True, **kwargs))
        seq = self._seq[gname]
        self._seq[gname] = seq + 1
        nbytes, dtype = comm_size(op, args, kwargs, gsize)
        rec = {
            "kind": "collective",
            "rank": self.rank,
            "step": self._cur_step(),
            "label": label,
            "phase": phase,
            "op": op,
            "bytes": nbytes,
            "dtype": dtype,
            "group": gname,
            "group_size": gsize,
            "seq": seq,
            "call_ns": _perf(),
            "return_ns": None,
            "wait_ns": None,
            "wait_end_ns": None,
            "start_ns": self._cuda.stamp() if self._cuda is not None else None,
            "end_ns": None,
            "timing": self._timing,
        }
        self.inflight[(gname, seq)] = rec
        if _profiling():
            # an unlabelled collective's scope has an empty label (`commscope::<phase>`), which the loader reads
            # as no label, as the run directory's null
            with torch.profiler.record_function(f"commscope:{'' if label is None else label}:{phase}"):
                work = fn(*args, async_op=True, **kwargs)
        else:
            work = fn(*args, async_op=True, **kwargs)
        rec["return_ns"] = _perf()
        entry = PendingCollective(rec, work if self._cuda is not None else None)
        if self._cuda is None and work is not None:
            if not self._watch_completion(work, entry):
                entry.work = work  # no future: wait() return is the completion time (see RecordedHandle)
        self._pending.append(entry)
        handle = RecordedHandle(work, entry, self)
        entry.handle = weakref.ref(handle)
        return handle

    def _watch_completion(self, work: Any, entry: PendingCollective) -> bool:
        # Some gloo works (e.g. reduce_scatter_tensor on torch 2.13) have no future: remember per op.
        kind = entry.rec["op"]
        if kind in self._no_future:
            return False
        try:
            fut = work.get_future()
        except RuntimeError:
            self._no_future.add(kind)
            return False
        fut.add_done_callback(self._completion_callback(entry))
        return True

    def _completion_callback(self, entry: PendingCollective) -> Callable[[Any], None]:
        inflight = self.inflight

        def on_done(fut: Any) -> None:
            # gloo worker thread (or inline if already done): only plain assignments, GIL-atomic.
            t = _perf()
            try:
                fut.value()
            except Exception:
                return  # failed (peer died, timeout): never finished, stays in inflight
            entry.rec["end_ns"] = t
            entry.done = True
            inflight.pop((entry.rec["group"], entry.rec["seq"]), None)

        return on_done

    def _known_done(self, entry: PendingCollective) -> bool:
        """Whether `entry`'s completion is known: its wait() (CUDA) or completion callback (gloo) said so, or
        nobody can wait on it any more (the caller dropped its handle without waiting: DDP's join path,
        a fire-and-forget launch) and the backend says it finished. Such a record is written with no wait
        and no end (docs/run_format.md); kept pending, it would hold up the early resolution of every
        later record and read as a hang to the watchdog. A handle still held may yet be waited: kept."""
        if entry.done:
            return True
        if not entry.waited and entry.handle() is None and _completed(entry.work):
            entry.done = True
        return entry.done

    def _finish_collective(self, entry: PendingCollective, blocking: bool) -> bool:
        """Resolve a collective's times; False if its completion is not known yet (keep it)."""
        rec = entry.rec
        self._known_done(entry)
        if self._cuda is None:
            if not entry.done and entry.waited and blocking:
                # wait() returned, so the future is complete; its callback may trail by microseconds.
                deadline = _perf() + 1_000_000_000
                while not entry.done and _perf() < deadline:
                    time.sleep(0)
            if not entry.done:
                return False
        else:
            if not entry.done:
                return False
            if not blocking and not self._passed(rec):
                return False
            rec["duration_ns"] = self._nccl_duration(entry.work) if self._nccl_timing else None
            entry.work = None
        self.inflight.pop((rec["group"], rec["seq"]), None)
        return True

    @staticmethod
    def _nccl_duration(work: Any) -> int | None:
        if work is None:
            return None
        try:
            return int(round(work._get_duration() * 1e6))
        except Exception:  # backend without timing, or not finished: the field is optional
            return None

    def waiting_in(self) -> list[dict]:
        """The in-flight records of recorded collectives whose wait began and has not returned: where the
        main thread sits (TermGuard's stuck test, blocked_where)."""
        return [r for r in list(self.inflight.values())
                if r.get("wait_ns") is not None and r.get("wait_end_ns") is None]

    def blocked_where(self) -> str:
        """Where the main thread is blocked, in words, when a signal's handler cannot run on it (TermGuard):
        in the wait of a recorded collective that has not returned (the oldest such), else elsewhere in C++.
        On CUDA wait() returns at once, so a rank held up by a collective blocks in a later sync instead."""
        waiting = self.waiting_in()
        if waiting:
            r = min(waiting, key=lambda r: r["wait_ns"])
            label = "(no label)" if r["label"] is None else f"'{r['label']}'"
            return f"in the wait of collective {label} ({r['op']}, group {r['group']} seq {r['seq']})"
        if self._cuda is not None:
            return ("in C++ outside any recorded collective's wait (on CUDA: a sync with the GPU, e.g. behind a "
                    "collective's kernel, or a long op)")
        return "in C++ outside any recorded collective's wait (a long op, or a collective not recorded)"

    def inflight_snapshot(self) -> list[dict]:
        """Launched collectives whose completion is unknown, host times on the common axis (watchdog)."""
        snap = []
        for rec in list(self.inflight.values()):
            row = dict(rec)
            for key, val in row.items():
                if key.endswith("_ns"):
                    row[key] = val + self._shift if isinstance(val, int) else None
            snap.append(row)
        return snap
