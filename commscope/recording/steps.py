"""Steps and their write: the `step()` context, and how a step's buffered records are resolved onto the
common time axis and appended to events.jsonl in one write (`step` records, docs/run_format.md).

`StepWriting` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts). Inside a
step the hot path (regions.py, inflight.py, hooks.py) only buffers: host times are raw local
`perf_counter_ns`, device times unresolved CUDA stamps (timing.py). When the step's records are written,
every stamp is resolved, moved onto the common axis (local + epoch base + clock offset: `_shift`) and
the records go to the sink (sink.py) in one append, ending with the step record.

When a step's records are written (`flush=`): "step" (the default) writes them before the step context
returns, after the step's natural sync with the GPU idle, so what is left to do then is exposed in the
step time. On CUDA it is kept small by resolving early: at each region's end (`_advance`), the pending
records at the front whose stamps the GPU has already passed (a non-blocking query) are resolved and
encoded, and the hook records with them, while the host is ahead of the GPU and the work hides behind
the GPU's queue; the step end resolves the rest and writes all of the step's lines in one write.
"overlap" (CUDA only) sets them aside at the step end (`_behind`) and writes them when the next step's
first region ends, when the host has launched that region's kernels and the GPU is busy with them, so
the write hides behind GPU work; it is also written by the next step end, `close()`, an exception
leaving a step, the hang watchdog and TermGuard. What "overlap" gives up: a rank killed by SIGKILL (or a
hard crash) between a step's end and the next region's end loses that step's records.

Invariants: no device synchronization inside a step, except that "overlap" synchronizes with the
previous step's last stamps, which the GPU has passed; with flush="step", a step's records are written
before the step context returns (a later crash cannot lose them), in one write with its records resolved
early (inside the step only: a record made outside a step is moved onto the axis at the next write,
after any align_clocks()); a collective whose completion is unknown is kept pending, never written
half-known; a record leaves the pending list before it is resolved, under `_write_lock` (the watchdog
and TermGuard write from their own threads), so it is never resolved (shifted onto the axis) twice; a
write interrupted by a signal's exception loses at most what it holds in hand (a record half moved onto
the axis, hooks being turned into records, the step record's line), keeps what it resolved for the next
write, and writes nothing twice; step records are encoded before the lock is taken; step numbers are
unique per recorder and step contexts do not nest.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import Any, Iterator

from commscope.recording.api import StepInfo, check_step, plain_extra
from commscope.recording.closing import CLOSED
from commscope.recording.inflight import PendingCollective
from commscope.recording.timing import GpuStamp

# flush="overlap" on an abnormal end: how long to wait for the GPU to pass the set-aside step's stamps
_BEHIND_WAIT_S = 2.0
# how long a write waits for another thread's (milliseconds in practice; see StepWriting._writing)
_LOCK_WAIT_S = 5.0
_perf = time.perf_counter_ns
# The time fields of each record kind (docs/run_format.md); duration_ns is a duration, not a time.
_REGION_TIMES = ("start_ns", "end_ns")  # also the only fields of any record that may hold a GpuStamp
_COLLECTIVE_TIMES = ("call_ns", "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns")


class StepWriting:
    """`step()` and the write of buffered records. State: `_step`, `last_step`, `_recorded_steps`,
    `_pending` (region dicts and `PendingCollective` entries not yet written), `_overlap`, `_behind`."""

    def _init_steps(self, flush: str) -> None:
        # On CPU there is no GPU work to hide a write behind: "overlap" writes at the step end there too.
        self._overlap = flush == "overlap" and self._cuda is not None
        # flush="overlap": (records, hook tuples, the stream tails to settle, step record line) set aside at the
        # last step end and not written yet
        self._behind: tuple | None = None
        # flush="step" on CUDA: resolve records inside the step once the GPU has passed them (`_advance`);
        # `_lines` holds them encoded until the step's write.
        self._early = flush == "step" and self._cuda is not None
        self._lines: list[bytes] = []
        # records already on the axis whose write was interrupted (a signal's exception): the next write's
        self._resolved: list[dict] = []
        # Held while records leave `_pending` and are resolved (`_advance`, `_flush`, `_write_behind`): the
        # hang watchdog and TermGuard write from their own threads while the main thread may be resolving,
        # and a record resolved by both would be shifted onto the axis twice. Never held across a wait on
        # the GPU (settle() runs before it is taken), so a stuck GPU never blocks the other threads' write.
        self._write_lock = threading.Lock()
        self._pending: list[Any] = []
        self._step: int | None = None
        self.last_step: int | None = None
        self._recorded_steps: set[int] = set()

    def _cur_step(self) -> int:
        return -1 if self._step is None else self._step

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[StepInfo]:
        if self._closed:
            raise RuntimeError(CLOSED)
        step = check_step(step)
        if self._step is not None:
            raise RuntimeError(f"Recorder.step({step}) inside step {self._step}: step contexts do not nest")
        if step in self._recorded_steps:
            # readers key a rank's records by step: a second step 0 would be dropped as a duplicate
            raise RuntimeError(f"step {step} was already recorded by this rank; step numbers must be unique "
                               "across the run (count steps across epochs)")
        self._recorded_steps.add(step)
        self._step, self._micro, self._pos = step, 0, 0
        info = StepInfo(step)
        if self._cuda is not None:
            self._cuda.new_anchor()
        start = _perf()
        try:
            with contextlib.ExitStack() as stack:
                if self._window is not None:
                    stack.enter_context(self._window.step(step))
                yield info
                end = _perf()  # before the window's export, which is not part of the step
        except BaseException as e:
            if isinstance(e, SystemExit):
                self.exited_in_step = f"sys.exit({e.code!r}) inside step {step}: the step did not finish"
            with contextlib.suppress(Exception):  # never mask the training error with a recording one
                self._write_behind(blocking=False)
                self._flush(blocking=False)
            raise
        else:
            info.end()  # its fields are read now: a later assignment would be lost
            loss = None if info.loss is None else float(info.loss)
            step_rec = {
                "kind": "step",
                "rank": self.rank,
                "step": info.step,
                # JSON has no NaN: a diverged loss is null, and loss_nonfinite says what it was
                "loss": loss if loss is None or math.isfinite(loss) else None,
                "start_ns": start + self._shift,
                "end_ns": end + self._shift,
                "tokens": plain_extra(info.tokens),
                **{k: plain_extra(v) for k, v in info.extra.items()},
            }
            if loss is not None and not math.isfinite(loss):
                step_rec["loss_nonfinite"] = repr(loss)  # one of rundir.schema.LOSS_NONFINITE
            # encoded here, outside the write lock
            step_line = self._sink.encode([step_rec])
            if self._overlap:
                self._write_behind()  # the step before, if no region of this one ended (no regions)
                self._behind = (self._pending, self._take_hooks(), self._cuda.take_tails(), step_line)
                self._pending = []
            else:
                try:
                    self._flush(blocking=True, tail=step_line)
                except BaseException:
                    # a signal's exception raised after the write returned: the step's line is on disk (the
                    # write's last), so the status written on the way out must name the step as finished
                    if self._sink.ends_with(step_line[-1]):
                        self.last_step = info.step
                    raise
            self.last_step = info.step
        finally:
            self._step = None

    def _advance(self) -> None:
        """flush="step" on CUDA, at a region's end: resolve and encode the pending records at the front that
        the GPU has passed (a finished collective, a region), stopping at the first it has not, and the
        hook records so far; their lines wait in `_lines` for the step's write. Skipped while another
        thread writes (it takes these records)."""
        if not self._write_lock.acquire(blocking=False):
            return
        try:
            pending = self._pending
            passed = self._passed
            n = 0
            for item in pending:
                if item.__class__ is PendingCollective:
                    if not ((item.done or self._known_done(item)) and passed(item.rec)):
                        break
                elif not passed(item):
                    break
                n += 1
            if not n and not self._hook_buf:
                return
            items = pending[:n]
            del pending[:n]  # out of the list before they change (see _resolve)
            out, keep = self._resolve(items, blocking=True)  # every stamp in `items` is passed: nothing waits
            pending[:0] = keep
            try:
                out += self._hook_records(self._take_hooks())
                self._lines += self._sink.encode(out)
            except BaseException:
                self._resolved += out
                raise
        finally:
            self._write_lock.release()

    def _passed(self, rec: dict) -> bool:
        """Whether the GPU has passed every CUDA stamp of `rec` (non-blocking). The end first: when it is not
        passed, one query says so; when it is, a start recorded before it on the same stream is passed too
        (in a region and in a collective the start is stamped first), so one query says that as well."""
        ready = self._cuda.ready
        end, start = rec["end_ns"], rec["start_ns"]
        if end.__class__ is GpuStamp:
            if not ready(end):
                return False
            if start.__class__ is GpuStamp and start.stream is end.stream and start.stream is not None:
                return True
        return start.__class__ is not GpuStamp or ready(start)

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
        """(finished records on the common axis, unfinished collectives to keep) of `items`, which the caller
        has taken out of `_pending`: resolving changes a record in place, so a record still pending could
        be resolved (shifted onto the axis) a second time by a later write.

        Interrupted (a signal's exception on the main thread, a CUDA error), it keeps what it can: the
        records resolved so far join `_resolved` for the next write, the ones not reached go back to
        `_pending`, and only the one in hand, possibly half moved onto the axis, is lost."""
        cuda = self._cuda
        out: list[dict] = []
        keep: list[Any] = []
        on_axis = self._on_axis
        i = 0
        try:
            for i, item in enumerate(items):
                if item.__class__ is PendingCollective:
                    if self._finish_collective(item, blocking):
                        out.append(on_axis(item.rec, _COLLECTIVE_TIMES))
                    else:
                        keep.append(item)
                elif blocking or cuda is None or self._passed(item):
                    out.append(on_axis(item, _REGION_TIMES))
        except BaseException:
            self._resolved += out
            self._pending[:0] = keep + items[i + 1:]
            raise
        return out, keep

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """`_write_lock` for a write, waited for a bounded time: a lock left held (a signal's exception
        between its acquire and the block that releases it) must cost a delay, never a hung close."""
        got = self._write_lock.acquire(timeout=_LOCK_WAIT_S)
        try:
            yield
        finally:
            if got:
                self._write_lock.release()

    def _take_hooks(self) -> list[tuple]:
        """The hook tuples buffered so far, removed from `_hook_buf` in place (the hooks' closures append to
        that list); only the first len() of them, so a hook firing meanwhile on the autograd thread stays."""
        buf = self._hook_buf
        n = len(buf)
        hooks = buf[:n]
        del buf[:n]
        return hooks

    def _hook_records(self, hooks: list[tuple]) -> list[dict]:
        shift, rank = self._shift, self.rank
        return [
            {"kind": "hook", "rank": rank, "step": -1 if s is None else s, "micro_step": m,
             "label": label, "position": pos, "t_ns": t + shift}
            for s, m, label, pos, t in hooks
        ]

    def _flush(self, *, blocking: bool, tail: list[bytes] | None = None) -> None:
        """Write every finished record (then `tail`, the step record's line) in one append; keep unfinished
        collectives."""
        if blocking and self._cuda is not None:
            self._cuda.settle()  # one synchronize per stamped stream, instead of one per event
        with self._writing():
            items, self._pending = self._pending, []  # taken before they change (see _resolve)
            out, keep = self._resolve(items, blocking)
            self._pending[:0] = keep
            self._write(out, self._take_hooks(), tail)

    def _write(self, out: list[dict], hooks: list[tuple], tail: list[bytes] | None) -> None:
        """Append the lines resolved early, the records left from an interrupted write, `out`, `hooks`'
        records and `tail`, in one write. Interrupted before the write (a signal's exception), it leaves
        the resolved records for the next one (`_lines`, `_resolved`) and loses only what is in hand (the
        hooks being turned into records, `tail`); nothing is written twice."""
        records = self._resolved + out
        try:
            records += self._hook_records(hooks)
            lines = self._lines + self._sink.encode(records) + (tail or [])
        except BaseException:
            self._resolved = records
            raise
        self._lines, self._resolved = [], []
        self._sink.append(lines)

    def _write_behind(self, blocking: bool = True) -> None:
        """flush="overlap": write the records set aside at the last step end (nothing if none are).
        `blocking=False` (an abnormal end, where the GPU may never pass them) waits for them a bounded time,
        then writes only what the GPU has passed."""
        behind, self._behind = self._behind, None  # taken once, whichever thread gets here first
        if behind is None:
            return
        items, hooks, tails, step_line = behind
        try:
            if blocking:
                self._cuda.settle(tails)  # that step's last stamps only, never this step's newer ones
            else:
                self._cuda.passed_within(tails, _BEHIND_WAIT_S)
        except BaseException:
            # a signal's exception while waiting on the GPU: the step stays set aside for the close to write
            # (its status names it as finished, last_step, and its records must say so too)
            self._behind = behind
            raise
        with self._writing():
            # Not blocking: the step's regions are passed now, but a collective of it may have been waited
            # in this step, after any stamp `tails` holds; it waits, pending, until the GPU passes its end.
            try:
                out, keep = self._resolve(items, blocking=False)
            except BaseException:
                # the set-aside step finished: its hooks and its step record wait for the next write (the
                # step record then precedes some of its records in the file; readers key records by step)
                self._resolved += self._hook_records(hooks)
                self._lines += step_line
                raise
            self._pending[:0] = keep  # collectives still running rejoin, ahead of this step's records
            self._write(out, hooks, step_line)
