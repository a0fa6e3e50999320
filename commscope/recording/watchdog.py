"""Per-rank hang watchdog: when a collective's `wait()` has been blocked longer than the hang timeout,
write `rank{R}/watchdog.json` and end the process so the launcher tears the job down.

Why a thread: a rank blocked in a collective sits in C++ with the GIL released, so a daemon thread can
still look at the recorder's in-flight table (`Recorder.inflight`: launched collectives whose completion
is unknown, raw local `perf_counter_ns` times) and at every thread's Python stack.

What watchdog.json holds (docs/faults.md): the collective being waited on, every launched-but-unfinished
collective (label, group, seq, op, bytes, call/return/wait times on the common time axis), the last
finished step, and the Python stack of every thread.

Invariants: the watchdog only reads recorder state and writes files in its own rank directory
(and NCCL's Flight Recorder dump under RUN/flight_recorder/); it fires
at most once; before exiting it waits a short grace period so that peers blocked on the same collective
fire too (their reports are the evidence `doctor` compares), then closes the recorder (flushing finished
records, status "failed") and exits with HANG_EXIT.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

from commscope.rundir.schema import (FLIGHT_RECORDER_DIR, INFLIGHT, SCHEMA_VERSION, STATUS, WATCHDOG,
                                     flight_recorder_name)
from commscope.util.atomic import write_bytes_atomic, write_json_atomic

HANG_EXIT = 124  # timeout(1)'s code: "ran past its limit"


def _stacks() -> dict[str, list[str]]:
    names = {t.ident: t.name for t in threading.enumerate()}
    return {f"{names.get(ident, 'thread')} ({ident})": traceback.format_stack(frame)
            for ident, frame in sys._current_frames().items()}


def write_inflight(recorder: Any, reason: str | None) -> bool:
    """On an abnormal end, `rank{R}/inflight.json`: the collectives this rank launched whose completion is
    unknown (a rank torn down while peers hang is otherwise silent about how far it got). False if none."""
    snap = getattr(recorder, "inflight_snapshot", lambda: [])()
    if not snap or not getattr(recorder, "enabled", False):
        return False
    write_json_atomic(recorder.rank_dir / INFLIGHT, {
        "schema_version": SCHEMA_VERSION, "rank": recorder.rank, "reason": reason,
        "last_step": recorder.last_step,
        "inflight": sorted(snap, key=lambda r: (str(r.get("group")), r.get("seq", 0))),
    })
    return True


def dump_flight_recorder(recorder: Any) -> bool:
    """On NCCL, write PyTorch's Flight Recorder buffer to RUN/flight_recorder/rank_<R> (pickle), the same
    place TORCH_FR_DUMP_TEMP_FILE points NCCL's own timeout dump at; doctor reads it as a second source.
    False when not on NCCL or this torch cannot dump (the watchdog's own report does not depend on it)."""
    if "nccl" not in str(getattr(recorder, "backend", "")):
        return False
    try:
        from torch._C._distributed_c10d import _dump_nccl_trace

        blob = _dump_nccl_trace(True, True, False)  # collectives, stack traces, not only active ones
    except Exception:  # noqa: BLE001 - older/newer torch without this private hook
        return False
    d = recorder.run_dir / FLIGHT_RECORDER_DIR
    d.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(d / flight_recorder_name(recorder.rank), blob)
    return True


class Watchdog:
    """Watches one Recorder's waits; `start()` it after the recorder exists, `stop()` before close."""

    def __init__(self, recorder: Any, timeout_s: float, *, poll_s: float | None = None,
                 grace_s: float | None = None, exit_code: int = HANG_EXIT,
                 exit_fn: Callable[[int], None] = os._exit):
        if not timeout_s > 0:
            raise ValueError(f"hang timeout must be > 0 seconds, got {timeout_s}")
        self.rec = recorder
        self.timeout_ns = int(timeout_s * 1e9)
        self.timeout_s = float(timeout_s)
        self.poll_s = poll_s if poll_s is not None else min(1.0, timeout_s / 10)
        # Peers blocked on the same collective entered wait() within a step's skew of each other.
        self.grace_s = grace_s if grace_s is not None else min(3.0, max(0.5, timeout_s / 2))
        self.exit_code = exit_code
        self._exit = exit_fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commscope-watchdog", daemon=True)
        self.fired: dict | None = None

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def blocked_since(self, rec: dict) -> int | None:
        """Local ns since which this collective holds the rank up, or None if it does not (yet)."""
        if getattr(self.rec, "_cuda", None) is not None:
            # NCCL: wait() only orders streams and returns at once; a hang blocks the host later, in a
            # sync. The recorder resolves CUDA collectives at every step end, so one launched longer ago
            # than the timeout and still in flight means the step has not ended since.
            return rec.get("call_ns") if isinstance(rec.get("call_ns"), int) else None
        if rec.get("wait_end_ns") is not None:
            return None
        return rec.get("wait_ns")

    def overdue(self, now_ns: int | None = None) -> dict | None:
        """The longest-blocking in-flight collective past the timeout (a raw in-flight record), or None."""
        now = time.perf_counter_ns() if now_ns is None else now_ns
        worst, worst_t = None, None
        for rec in list(self.rec.inflight.values()):
            t = self.blocked_since(rec)
            if t is not None and now - t > self.timeout_ns and (worst_t is None or t < worst_t):
                worst, worst_t = rec, t
        return worst

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            rec = self.overdue()
            if rec is not None:
                self.fire(rec)
                return

    def report(self, rec: dict) -> dict:
        shift = getattr(self.rec, "_shift", 0)  # local perf_counter_ns → common time axis
        inflight = self.rec.inflight_snapshot()
        key = (rec.get("group"), rec.get("seq"))
        waiting = next((r for r in inflight if (r.get("group"), r.get("seq")) == key), None)
        now = time.perf_counter_ns()
        return {
            "schema_version": SCHEMA_VERSION,
            "rank": self.rec.rank,
            "world_size": self.rec.world_size,
            "timeout_s": self.timeout_s,
            "fired_ns": now + shift,
            "waited_s": (now - (self.blocked_since(rec) or now)) / 1e9,
            "last_step": self.rec.last_step,
            "waiting_on": waiting,
            "inflight": sorted(inflight, key=lambda r: (str(r.get("group")), r.get("seq", 0))),
            "stacks": _stacks(),
        }

    def fire(self, rec: dict) -> None:
        doc = self.report(rec)
        self.fired = doc
        write_json_atomic(self.rec.rank_dir / WATCHDOG, doc)
        w = doc["waiting_on"] or {}
        msg = (f"hang watchdog: waited {doc['waited_s']:.1f} s (> {self.timeout_s:g} s) on {w.get('op')} "
               f"'{w.get('label')}' (group {w.get('group')}, seq {w.get('seq')}, step {w.get('step')})")
        print(f"commscope: rank {self.rec.rank}: {msg}", file=sys.stderr, flush=True)
        dump_flight_recorder(self.rec)
        time.sleep(self.grace_s)
        try:
            self.rec.close("failed", msg)
        except Exception:  # noqa: BLE001 - the exit below must happen whatever the recorder does
            traceback.print_exc()
        # If the main thread is already closing (its wait failed when a peer's watchdog ended that peer),
        # Recorder.close waits for it; other recorders may return at once: let status.json appear first.
        status = self.rec.rank_dir / STATUS
        deadline = time.monotonic() + 10
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._exit(self.exit_code)
