"""`Recorder`: the recording implementation of the `NullRecorder` interface (commscope/recording/api.py).

One Recorder per rank writes `RUN/rank{R}/` (docs/run_format.md): meta.json after clock alignment,
events.jsonl one step at a time, status.json at close, trace.json.gz for the profiler window; rank 0
also writes RUN/config.json.

The hot path (hooks, regions, collectives) only appends to in-memory buffers: host times are raw local
`perf_counter_ns`, device times are unresolved CUDA events. At the end of each step everything is
resolved, moved onto the common time axis (local + epoch base + clock offset) and written in one write.

Which interval a CUDA collective's `start_ns`/`end_ns` measure: with NCCL and `async_op=True` the op
runs on NCCL's internal stream, which first waits for the current stream. `start_ns` is an event on the
current stream just before the launch: when the collective's inputs were ready (it may still queue
behind earlier collectives of the communicator). `end_ns` is an event on the current stream right
after `wait()` (which makes the current stream wait for NCCL): when the result became usable by the
caller, an upper bound on completion. NCCL's own kernel duration is added as `duration_ns` when
`TORCH_NCCL_ENABLE_TIMING=1` (NCCL's events on its own stream). On CPU/gloo `start_ns` is null and
`end_ns` is the Work future's completion callback time.

When a step's records are written (`flush=`): "step" (the default) writes them before the step context
returns, after the step's natural sync with the GPU idle, so the write is exposed in the step time.
"overlap" (CUDA only) sets them aside at the step end and writes them when the next step's first region
ends, when the host has launched that region's kernels and the GPU is busy with them, so the write hides
behind GPU work; it is also written by the next step end, `close()`, an exception leaving a step, the
hang watchdog and TermGuard. What "overlap" gives up: a rank killed by SIGKILL (or a hard crash) between
a step's end and the next region's end loses that step's records.

Invariants: no device synchronization inside a step, except that "overlap" synchronizes with the previous
step's last stamps, which the GPU has passed; with flush="step", a step's records are written before the
step context returns (a later crash cannot lose them); collectives whose completion is unknown stay in
`inflight` (for the hang watchdog) and are never written half-known to events.jsonl.
"""
from __future__ import annotations

import atexit
import contextlib
import numbers
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
import torch.distributed as dist

from commscope.recording.api import CollectiveHandle, NullRecorder, StepInfo, check_compute, check_label, end_status
from commscope.recording.clock import ClockSync, align_clocks, epoch_base_ns
from commscope.recording.collective import GroupInfo, comm_size, op_name
from commscope.recording.profiler_window import ProfilerWindow
from commscope.recording.sink import EventSink, write_json_atomic
from commscope.recording.termguard import SignalHandling, signal_words
from commscope.recording.timing import CudaClock, GpuStamp
from commscope.recording.watchdog import write_inflight
from commscope.rundir import write_config, write_status
from commscope.rundir.schema import (EVENTS, INFLIGHT, KINETO_TRACE, META, SCHEMA_VERSION, STATUS, WATCHDOG,
                                     rank_dir_name)
from commscope.util.cpus import usable_cores
from commscope.util.step_range import parse_step_range

MODES = ("light", "full")
FLUSH_MODES = ("step", "overlap")
# flush="overlap" on an abnormal end: how long to wait for the GPU to pass the set-aside step's stamps
_BEHIND_WAIT_S = 2.0
# `mode="full"` without explicit steps profiles steps 1..2: step 0 carries one-time warm-up costs.
DEFAULT_FULL_WINDOW = (1, 3)
_perf = time.perf_counter_ns
_profiling = torch.autograd._profiler_enabled
# The time fields of each record kind (docs/run_format.md); duration_ns is a duration, not a time.
_REGION_TIMES = ("start_ns", "end_ns")  # also the only fields of any record that may hold a GpuStamp
_COLLECTIVE_TIMES = ("call_ns", "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns")
# The files a recording leaves in its rank folder: one of them there means the folder holds a recording.
RECORDING_FILES = (EVENTS, STATUS, META, WATCHDOG, INFLIGHT, KINETO_TRACE)
EXITED_ERROR = "process exited without Recorder.close()"
CLOSED = "the recorder is closed"


class _Collective:
    """One launched collective: its record (raw local times) plus what is needed to finish it."""

    __slots__ = ("rec", "work", "waited", "done", "__weakref__")

    def __init__(self, rec: dict, work: Any):
        self.rec = rec
        self.work = work
        self.waited = False
        self.done = False  # completion time known (CPU callback fired / CUDA end event recorded)


class RecordedHandle(CollectiveHandle):
    """`wait()` records when it was entered and returned (and, on CUDA, an end event after it)."""

    def __init__(self, work: Any, entry: _Collective, recorder: "Recorder"):
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
            entry.done = True
            entry.work = None


class _Region:
    """`with recorder.region(name):` stamps its start and end and queues the record (also when the body
    raises). A class rather than a generator context manager: regions are the most frequent record, and
    a generator's enter/exit costs several times a plain method call on the step's critical path."""

    __slots__ = ("_recorder", "_rec", "_prof")

    def __init__(self, recorder: "Recorder", rec: dict):
        self._recorder = recorder
        self._rec = rec
        self._prof: Any = None

    def __enter__(self) -> None:
        if _profiling():  # under torch.profiler the region also shows as a user annotation
            self._prof = torch.profiler.record_function(self._rec["name"])
            self._prof.__enter__()
        self._rec["start_ns"] = self._recorder._stamp()

    def __exit__(self, *exc: Any) -> None:
        recorder = self._recorder
        self._rec["end_ns"] = recorder._stamp()
        recorder._pending.append(self._rec)
        if self._prof is not None:
            self._prof.__exit__(*exc)
        if recorder._behind is not None:  # flush="overlap": the previous step, now that the GPU has work
            recorder._write_behind()


def _local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


class Recorder(NullRecorder):
    """Records hook order, collectives, regions and steps of one rank into a run directory."""

    enabled = True

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        rank: int,
        world_size: int,
        device: str | torch.device = "cpu",
        backend: str | None = None,
        mode: str = "light",
        profile_steps: str | tuple[int, int] | None = None,
        with_stack: bool = False,
        group: Any = None,
        align: bool = True,
        flush: str = "step",
    ):
        # Everything is checked before the rank folder is created: a refused Recorder leaves nothing behind.
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if flush not in FLUSH_MODES:
            raise ValueError(f"flush must be one of {', '.join(FLUSH_MODES)}; got {flush!r}")
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise ValueError(f"run_dir {str(self.run_dir)!r} exists and is not a directory")
        distributed = dist.is_available() and dist.is_initialized()
        if world_size > 1 and not distributed and align:
            # align=False is for callers that write ranks' data themselves (tests, converters)
            raise RuntimeError(f"Recorder(world_size={world_size}) needs torch.distributed initialized first "
                               "(dist.init_process_group)")
        self.rank, self.world_size, self.mode = int(rank), int(world_size), mode
        self.device = _checked_device(device)
        window = _profile_window(profile_steps) or (DEFAULT_FULL_WINDOW if mode == "full" else None)
        self.backend = backend or (dist.get_backend() if distributed else "none")
        self.rank_dir = self.run_dir / rank_dir_name(self.rank)
        old = [n for n in RECORDING_FILES if (self.rank_dir / n).exists()]
        if old:
            # Appending to it would mix two runs' records (and a stale watchdog.json or trace.json.gz would
            # pass for this run's); replacing it would destroy a run nobody asked to remove.
            raise RuntimeError(f"{str(self.rank_dir)!r} already holds a recording ({', '.join(old)}); record "
                               "into a new run directory")
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        self._closed = False

        self._cuda = CudaClock(self.device) if self.device.type == "cuda" else None
        self._timing = "cuda_event" if self._cuda is not None else "wall"
        # On CPU there is no GPU work to hide a write behind: "overlap" writes at the step end there too.
        self._overlap = flush == "overlap" and self._cuda is not None
        # flush="overlap": (records, hook tuples, the stream tails to settle, step record) set aside at the
        # last step end and not written yet
        self._behind: tuple | None = None
        # NCCL reads this once, when the process group is created: so can we.
        self._nccl_timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING", "0") not in ("0", "")
        self._stamp: Callable[[], Any] = self._cuda.stamp if self._cuda is not None else _perf
        self._base = epoch_base_ns()
        self.clock = ClockSync()
        self._shift = self._base
        self._groups = GroupInfo()
        self._no_future: set[str] = set()  # ops whose gloo Work has no future
        self._seq: dict[str, int] = defaultdict(int)
        # (group, seq) → record of a launched collective whose completion is not known yet.
        self.inflight: dict[tuple[str, int], dict] = {}
        self._pending: list[Any] = []  # region dicts and _Collective entries not yet written
        self._hook_buf: list[tuple] = []
        self._hook_handles: list[Any] = []
        self._step: int | None = None
        self._micro: int | None = None
        self._pos = 0
        self.last_step: int | None = None
        self._close_lock = threading.Lock()  # the main thread, the watchdog and TermGuard may all close
        self._close_done = threading.Event()
        self._recorded_steps: set[int] = set()
        self._watched: set[str] = set()
        self._signals: SignalHandling | None = None  # handle_signals()
        self._window = (
            ProfilerWindow(window, self.rank_dir / KINETO_TRACE, cuda=self._cuda is not None, with_stack=with_stack)
            if window
            else None
        )
        self._started = _perf()
        self._sink = EventSink(self.rank_dir / EVENTS)
        if align and distributed:
            self.align_clocks(group)
        else:
            self._write_meta()
        # A script that dies by an exception (or forgets close) still leaves a status and its buffers.
        ref = weakref.ref(self)
        atexit.register(lambda: (r := ref()) is not None and r._at_exit())

    # ---- setup -------------------------------------------------------------------------------
    def align_clocks(self, group: Any = None) -> None:
        gloo = "gloo" in str(self.backend) or self._cuda is None
        self.clock = align_clocks(
            group,
            device="cpu" if gloo else self.device,
            now_ns=lambda: _perf() + self._base,
        )
        self._shift = self._base + self.clock.offset_ns
        self._write_meta()

    def _write_meta(self) -> None:
        write_json_atomic(
            self.rank_dir / META,
            {
                "schema_version": SCHEMA_VERSION,
                "rank": self.rank,
                "local_rank": _local_rank(),
                "world_size": self.world_size,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "backend": self.backend,
                "device": str(self.device),
                "torch": torch.__version__,
                # with the ranks per host, tells a reader whether a CPU run's ranks had to take turns
                "cpu_cores": usable_cores(),
                "mode": self.mode,
                "clock": self.clock.as_dict(),
                "started_ns": self._started + self._shift,  # on the common axis, like every *_ns
            },
        )

    def write_config(self, config: dict) -> None:
        if self.rank == 0:
            write_config(self.run_dir, config)

    def watch(self, named_params: Mapping[str, torch.nn.Parameter] | Iterable[tuple[str, Any]]) -> None:
        if self._closed:
            raise RuntimeError(CLOSED)
        items = list(named_params.items() if isinstance(named_params, Mapping) else named_params)
        seen = set(self._watched)
        for label, param in items:  # all checked before any hook is registered
            if not (isinstance(param, torch.Tensor) and param.is_leaf and param.requires_grad):
                raise ValueError(f"watch(): {label!r} is not a leaf tensor that requires grad")
            if label in seen:  # a second hook would record every firing twice
                raise ValueError(f"watch(): {label!r} is already watched")
            seen.add(label)
        for label, param in items:
            self._hook_handles.append(param.register_post_accumulate_grad_hook(self._hook_for(label)))
        self._watched = seen

    def unwatch(self) -> None:
        """Remove every hook `watch` registered (the parameters keep training, unrecorded)."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles.clear()
        self._watched.clear()

    def _hook_for(self, label: str) -> Callable[[torch.Tensor], None]:
        buf = self._hook_buf

        def on_grad_ready(_param: torch.Tensor) -> None:
            # Runs on the autograd thread; backward() blocks the loop, so no concurrent flush.
            buf.append((self._step, self._micro, label, self._pos, _perf()))
            self._pos += 1

        return on_grad_ready

    def set_micro_step(self, micro_step: int | None) -> None:
        self._micro = micro_step
        self._pos = 0

    # ---- timed things ------------------------------------------------------------------------
    def _cur_step(self) -> int:
        return -1 if self._step is None else self._step

    def region(self, name: str, compute: bool | None = None) -> "_Region":
        if self._closed:
            raise RuntimeError(CLOSED)
        rec = {
            "kind": "region",
            "rank": self.rank,
            "step": self._cur_step(),
            "name": name,
            "micro_step": self._micro,
            "start_ns": None,
            "end_ns": None,
            "timing": self._timing,
        }
        if compute is not None:
            check_compute(compute)
            rec["compute"] = compute
        return _Region(self, rec)

    def collective(self, fn: Callable, *args: Any, label: str | None, phase: str, **kwargs: Any) -> CollectiveHandle:
        if self._closed:  # raising, not skipping: the caller's collective must never silently not run
            raise RuntimeError(CLOSED)
        check_label(label)
        op = op_name(fn)
        gname, gsize = self._groups(kwargs.get("group"))
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
            with torch.profiler.record_function(f"commscope:{label}:{phase}"):
                work = fn(*args, async_op=True, **kwargs)
        else:
            work = fn(*args, async_op=True, **kwargs)
        rec["return_ns"] = _perf()
        entry = _Collective(rec, work if self._cuda is not None else None)
        if self._cuda is None and work is not None:
            if not self._watch_completion(work, entry):
                entry.work = work  # no future: wait() return is the completion time (see RecordedHandle)
        self._pending.append(entry)
        return RecordedHandle(work, entry, self)

    def _watch_completion(self, work: Any, entry: _Collective) -> bool:
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

    def _completion_callback(self, entry: _Collective) -> Callable[[Any], None]:
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

    # ---- steps -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[StepInfo]:
        if self._closed:
            raise RuntimeError(CLOSED)
        if self._step is not None:
            raise RuntimeError(f"Recorder.step({step}) inside step {self._step}: step contexts do not nest")
        if step in self._recorded_steps:
            # readers key a rank's records by step: a second step 0 would be dropped as a duplicate
            raise RuntimeError(f"step {step} was already recorded by this rank; step numbers must be unique "
                               "across the run (count steps across epochs)")
        self._recorded_steps.add(int(step))
        self._step, self._micro, self._pos = int(step), 0, 0
        info = StepInfo(int(step))
        if self._cuda is not None:
            self._cuda.new_anchor()
        start = _perf()
        try:
            with contextlib.ExitStack() as stack:
                if self._window is not None:
                    stack.enter_context(self._window.step(step))
                yield info
                end = _perf()  # before the window's export, which is not part of the step
        except BaseException:
            with contextlib.suppress(Exception):  # never mask the training error with a recording one
                self._write_behind(blocking=False)
                self._flush(blocking=False)
            raise
        else:
            step_rec = {
                "kind": "step",
                "rank": self.rank,
                "step": info.step,
                "loss": None if info.loss is None else float(info.loss),
                "start_ns": start + self._shift,
                "end_ns": end + self._shift,
                "tokens": _plain_number(info.tokens),
                **info.extra,
            }
            if self._overlap:
                self._write_behind()  # the step before, if no region of this one ended (no regions)
                hooks = self._hook_buf[:]
                del self._hook_buf[:]  # in place: the hooks' closures append to this list
                self._behind = (self._pending, hooks, self._cuda.take_tails(), step_rec)
                self._pending = []
            else:
                self._flush(blocking=True, tail=step_rec)
            self.last_step = info.step
        finally:
            self._step = None

    def _finish_collective(self, entry: _Collective, blocking: bool) -> bool:
        """Resolve a collective's times; False if its completion is not known yet (keep it)."""
        rec = entry.rec
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

    def _passed(self, rec: dict) -> bool:
        """Whether the GPU has passed every CUDA stamp of `rec` (non-blocking)."""
        return all(self._cuda.ready(rec[k]) for k in _REGION_TIMES if rec[k].__class__ is GpuStamp)

    @staticmethod
    def _nccl_duration(work: Any) -> int | None:
        if work is None:
            return None
        try:
            return int(round(work._get_duration() * 1e6))
        except Exception:  # backend without timing, or not finished: the field is optional
            return None

    def _on_axis(self, rec: dict, keys: tuple[str, ...]) -> dict:
        """Move `rec`'s time fields onto the common axis; CUDA stamps must be passed (settled/ready)."""
        shift = self._shift
        for key in keys:
            val = rec[key]
            if val is None:
                continue
            if val.__class__ is GpuStamp:
                rec[key] = self._cuda.host_ns(val) + shift
            else:
                rec[key] = val + shift
        return rec

    def _resolve(self, items: list[Any], blocking: bool) -> tuple[list[dict], list[Any]]:
        """(finished records on the common axis, unfinished collectives to keep) of pending `items`."""
        cuda = self._cuda
        out: list[dict] = []
        keep: list[Any] = []
        on_axis = self._on_axis
        for item in items:
            if item.__class__ is _Collective:
                if self._finish_collective(item, blocking):
                    out.append(on_axis(item.rec, _COLLECTIVE_TIMES))
                else:
                    keep.append(item)
            elif blocking or cuda is None or self._passed(item):
                out.append(on_axis(item, _REGION_TIMES))
        return out, keep

    def _hook_records(self, hooks: list[tuple]) -> list[dict]:
        shift, rank = self._shift, self.rank
        return [
            {"kind": "hook", "rank": rank, "step": -1 if s is None else s, "micro_step": m,
             "label": label, "position": pos, "t_ns": t + shift}
            for s, m, label, pos, t in hooks
        ]

    def _flush(self, *, blocking: bool, tail: dict | None = None) -> None:
        """Write every finished record (plus `tail`) in one append; keep unfinished collectives."""
        if blocking and self._cuda is not None:
            self._cuda.settle()  # one synchronize per stamped stream, instead of one per event
        out, self._pending = self._resolve(self._pending, blocking)
        hooks = self._hook_buf[:]
        del self._hook_buf[:]
        out += self._hook_records(hooks)
        if tail is not None:
            out.append(tail)
        self._sink.append(out)

    def _write_behind(self, blocking: bool = True) -> None:
        """flush="overlap": write the records set aside at the last step end (nothing if none are).
        `blocking=False` (an abnormal end, where the GPU may never pass them) waits for them a bounded time,
        then writes only what the GPU has passed."""
        behind, self._behind = self._behind, None  # taken once, whichever thread gets here first
        if behind is None:
            return
        items, hooks, tails, step_rec = behind
        if blocking:
            self._cuda.settle(tails)  # that step's last stamps only, never this step's newer ones
        else:
            blocking = self._cuda.passed_within(tails, _BEHIND_WAIT_S)
        out, keep = self._resolve(items, blocking)
        self._pending[:0] = keep  # collectives still running rejoin, ahead of this step's records
        out += self._hook_records(hooks)
        out.append(step_rec)
        self._sink.append(out)

    # ---- end ---------------------------------------------------------------------------------
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

    # ---- signals -----------------------------------------------------------------------------
    def handle_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGHUP), grace_s: float = 2.0) -> None:
        """Turn `signals` (torchrun's teardown sends SIGTERM) into this rank's status: a handler raising
        `Terminated("terminated by signal 15 (SIGTERM)")` on the main thread, plus a TermGuard that closes
        the recorder ("failed", "... while blocked in C++ ...") and exits 128 + signum when the main thread
        sits in C++ (a collective's wait) and cannot run the handler (termguard.SignalHandling). `close()`
        stops the guard and puts the previous handlers back. Main thread only."""
        if self._closed:
            raise RuntimeError(CLOSED)
        if self._signals is not None:
            raise RuntimeError("handle_signals() was already called for this recorder")
        self._signals = SignalHandling(self._on_stuck, signals, grace_s)

    def _on_stuck(self, signum: int) -> None:
        """TermGuard's thread: the main thread did not get to its own cleanup within the grace time."""
        error = f"Terminated: {signal_words(signum)} while blocked in C++ (e.g. a collective's wait)"
        print(f"commscope: rank {self.rank}: {error}", file=sys.stderr, flush=True)
        self._close("failed", error, 10.0)

    # ---- end ---------------------------------------------------------------------------------
    def close(self, status: str = "completed", error: str | None = None, wait_s: float = 10.0) -> None:
        """Flush, stop the profiler window, remove hooks, write status.json (and, on an abnormal end,
        inflight.json); stop `handle_signals`' guard and restore the handlers it replaced. The first caller
        does it; a caller on another thread meanwhile waits up to `wait_s` for status.json to be written,
        so whoever exits next finds it there."""
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
        try:
            if status != "completed":
                write_inflight(self, error)  # how far this rank got, for `commscope doctor`
            if self._window is not None and (status == "completed" or self._cuda is None):
                self._window.finish()
            self._write_behind(blocking=status == "completed")
            self._flush(blocking=status == "completed")
        finally:
            self.unwatch()
            self._sink.close()
            write_status(self.rank_dir, status, error, -1 if self.last_step is None else self.last_step)
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


def _plain_number(value: Any) -> Any:
    """`st.tokens` as JSON writes it (a one-element tensor or a numpy scalar as int/float)."""
    if value is None or value.__class__ is int or value.__class__ is float:
        return value
    value = value.item() if isinstance(value, torch.Tensor) else value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _checked_device(device: Any) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r} is not a torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available here (torch {torch.__version__}); use "
                         "device=\"cpu\"")
    return dev


def _profile_window(spec: Any) -> tuple[int, int] | None:
    """`profile_steps` → (first, stop): "5:8", (5, 8), or an int N for the one step N:N+1."""
    if spec is None or isinstance(spec, str):
        return parse_step_range(spec, "profile_steps", closed=True)
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        return parse_step_range(str(int(spec)), "profile_steps", closed=True)
    if (isinstance(spec, (tuple, list)) and len(spec) == 2
            and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in spec)):
        return parse_step_range((int(spec[0]), int(spec[1])), "profile_steps", closed=True)
    raise ValueError(f"profile_steps must be a step N, a window \"START:STOP\" or a tuple (START, STOP); got {spec!r}")


TRACE_MODES = ("off", *MODES)


def record(run_dir: str | os.PathLike, *, trace: str = "light", rank: int | None = None,
           world_size: int | None = None, **kwargs: Any) -> NullRecorder:
    """Start recording this rank into `run_dir`: `with commscope.record(run_dir) as rec:`.

    `trace="off"` gives a NullRecorder (same methods, records nothing, `kwargs` unused); `"light"` or
    `"full"` a `Recorder(run_dir, mode=trace, rank=..., world_size=..., **kwargs)`. `rank` and
    `world_size` default to torch.distributed's when it is initialized, else to $RANK/$WORLD_SIZE (0/1)."""
    if trace not in TRACE_MODES:
        raise ValueError(f"trace must be one of {', '.join(TRACE_MODES)}; got {trace!r}")
    if trace == "off":
        return NullRecorder()
    distributed = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if distributed else int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = dist.get_world_size() if distributed else int(os.environ.get("WORLD_SIZE", "1"))
    return Recorder(run_dir, mode=trace, rank=rank, world_size=world_size, **kwargs)
