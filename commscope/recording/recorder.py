"""`Recorder`: the recording implementation of the `NullRecorder` interface (commscope/recording/api.py),
and `record()`, which picks one of the two.

One Recorder per rank writes `RUN/rank{R}/` (docs/run_format.md): meta.json after clock alignment,
events.jsonl one step at a time, status.json at close, trace.json.gz for the profiler window; rank 0
also writes RUN/config.json.

This module sets a recorder up: it checks every argument, refuses a rank folder that already holds a
recording, picks the clock (CUDA events or `perf_counter_ns`, timing.py), aligns it with the other ranks
(clock.py) and writes meta.json. What a recorder does afterwards is in one module per responsibility,
each a part `Recorder` is assembled from:

- hooks.py: gradient-hook order (`watch`, `set_micro_step`);
- regions.py: timed spans (`region`);
- inflight.py: collectives from launch to known completion (`collective`, the in-flight table);
- steps.py: the step context and the resolution and write of a step's buffered records (`step`, `flush=`);
- closing.py: the end of the recording (`close`, interpreter exit, `handle_signals`).

The parts share one object's state; each part's class docstring names the attributes it owns and sets
them up in its `_init_*` method, which `Recorder.__init__` calls.

Invariants: a refused Recorder creates no folder; a rank folder holds one recording; every record's
times are on the common axis (`_shift`: epoch base + clock offset) when written, and so is meta.json's
`started_ns`.
"""
from __future__ import annotations

import atexit
import numbers
import os
import socket
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from commscope.recording.api import NullRecorder
from commscope.recording.clock import ClockSync, align_clocks, epoch_base_ns
from commscope.recording.closing import CLOSED, Closing
from commscope.recording.hooks import HookOrder
from commscope.recording.inflight import Collectives
from commscope.recording.profiler_window import ProfilerWindow
from commscope.recording.regions import Regions
from commscope.recording.sink import EventSink, write_json_atomic
from commscope.recording.steps import StepWriting
from commscope.recording.timing import CudaClock
from commscope.rundir import write_config
from commscope.rundir.io import check_config
from commscope.rundir.schema import (EVENTS, KINETO_TRACE, META, RECORDING_FILES, SCHEMA_VERSION,
                                     rank_dir_name)
from commscope.util.cpus import usable_cores
from commscope.util.step_range import parse_step_range

MODES = ("light", "full")
FLUSH_MODES = ("step", "overlap")
# `mode="full"` without explicit steps profiles steps 1..2: step 0 carries one-time warm-up costs.
DEFAULT_FULL_WINDOW = (1, 3)
_perf = time.perf_counter_ns


def _local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


class Recorder(HookOrder, Regions, Collectives, StepWriting, Closing, NullRecorder):
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
        # readers know a rank by its folder rank<N>/ with 0 <= N < world_size: rank=-1 would write rank-1/,
        # which no reader reads, and a rank past the world size makes the whole run unreadable
        if not isinstance(world_size, numbers.Integral) or isinstance(world_size, bool) or world_size < 1:
            raise ValueError(f"world_size must be a whole number >= 1; got {world_size!r}")
        if not isinstance(rank, numbers.Integral) or isinstance(rank, bool) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be a whole number from 0 to world_size - 1 ({int(world_size) - 1}); "
                             f"got {rank!r}")
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
        self._init_closing()

        self._cuda = CudaClock(self.device) if self.device.type == "cuda" else None
        self._timing = "cuda_event" if self._cuda is not None else "wall"
        self._stamp: Callable[[], Any] = self._cuda.stamp if self._cuda is not None else _perf
        self._base = epoch_base_ns()
        self.clock = ClockSync()
        self._shift = self._base
        if align and distributed:
            # a collective, measured before the rank folder exists: where a peer refused (its folder holds an
            # earlier run's recording) or never started, this fails and leaves no folder in that earlier run
            self._measure_clock(group)
        self._init_steps(flush)
        self._init_collectives()
        self._init_hooks()
        self._window = (
            ProfilerWindow(window, self.rank_dir / KINETO_TRACE, cuda=self._cuda is not None, with_stack=with_stack)
            if window
            else None
        )
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        self._started = _perf()
        self._sink = EventSink(self.rank_dir / EVENTS)
        self._write_meta()
        # A script that dies by an exception (or forgets close) still leaves a status and its buffers.
        ref = weakref.ref(self)
        atexit.register(lambda: (r := ref()) is not None and r._at_exit())

    def align_clocks(self, group: Any = None) -> None:
        if self._step is not None:
            # records resolved so far in the step are on the old axis already (steps.py resolves early)
            raise RuntimeError(f"align_clocks() inside step {self._step}: a step's records share one time "
                               "axis; align between steps")
        self._measure_clock(group)
        self._write_meta()

    def _measure_clock(self, group: Any) -> None:
        """The clock offset to the common axis, measured over `group` (a collective)."""
        gloo = "gloo" in str(self.backend) or self._cuda is None
        try:
            self.clock = align_clocks(
                group,
                device="cpu" if gloo else self.device,
                now_ns=lambda: _perf() + self._base,
            )
        except RuntimeError as e:  # torch.distributed's errors (a timeout, a peer gone) are RuntimeErrors
            # the backend's text names a barrier or a socket; what went wrong is usually a rank that never
            # created its Recorder, which only this line can say
            raise RuntimeError(
                f"commscope: rank {self.rank}: measuring the clock offset failed ({str(e).splitlines()[0][:300]}). "
                "The measurement is a collective over the process group: every rank creates its Recorder "
                "(commscope.record) with the same trace level at the same point of the script (trace=\"off\" "
                "on one rank only leaves the others waiting here), and calls align_clocks() together") from e
        self._shift = self._base + self.clock.offset_ns

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
                # the profiler's window as "START:STOP" (null: none): compare's work key for runs that
                # `commscope run` did not start, whose config.json has no --profile
                "profile_steps": self._window.spec if self._window is not None else None,
                "clock": self.clock.as_dict(),
                "started_ns": self._started + self._shift,  # on the common axis, like every *_ns
            },
        )

    def write_config(self, config: dict) -> None:
        """Rank 0 writes config.json; every rank checks it (rundir.io.check_config), so a key the readers
        know, written with another type, fails at this call rather than every reading command later."""
        if self._closed:  # as every other call of a closed recorder: no silent no-op
            raise RuntimeError(CLOSED)
        check_config(config)
        if self.rank == 0:
            write_config(self.run_dir, config)


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
