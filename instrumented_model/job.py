"""The job's processes as one tree the launcher owns: `commscope run` → torch.distributed.run → ranks.

torch.distributed.run starts every rank in a session of its own, so neither a signal to the launcher's
process group nor a kill of torchrun reaches the ranks, and a rank whose parent dies is re-parented to
PID 1 and trains on. Three things keep the tree whole:

- the launcher is a child subreaper (`become_subreaper`): a rank whose torchrun died is re-parented to
  the launcher, which can still see it, stop it and reap it;
- every child dies with its parent (`die_with_parent`, Linux's parent-death signal): torchrun gets
  SIGTERM when the launcher dies (it then tears its ranks down), a rank gets SIGTERM when torchrun dies
  (it then writes its status and exits);
- `Job` finds the job's processes (the launcher's descendants that carry this run's id in their
  environment), kills a rank that stays stopped (SIGSTOP) past the hang timeout, and after a grace kills
  whatever is left (`start_teardown`, `drain`), noting which ranks it killed and why, so the summary can
  say it and no process outlives the run or writes into it once it is summarized.

Invariants: only processes carrying this run's id are ever signalled or reaped; `drain` returns when none
is left; on systems without prctl (not Linux) the helpers are no-ops and the launcher still kills the tree
it can see.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

RUN_ID_ENV = "COMMSCOPE_RUN_ID"  # every process of the job carries its run's id
PARENT_PID_ENV = "COMMSCOPE_PARENT_PID"  # the pid of the parent a child must die with
TRAINER_MODULE = "instrumented_model.train"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, arg: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, arg, 0, 0, 0) == 0


def become_subreaper(on: bool = True) -> bool:
    """Orphaned descendants are re-parented to this process instead of PID 1 (Linux)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, int(on))


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send `sig` to this process when the parent named in COMMSCOPE_PARENT_PID ends;
    when that parent is already gone (it died before the request was made), send it now."""
    expected = os.environ.get(PARENT_PID_ENV)
    if not expected or not _prctl(_PR_SET_PDEATHSIG, int(sig)):
        return
    if os.getppid() != int(expected):
        os.kill(os.getpid(), sig)


def signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


@dataclass
class _Member:
    proc: psutil.Process
    rank: int | None  # None: torchrun itself or a helper process of a rank


@dataclass
class Job:
    """torch.distributed.run (`pid`) and everything below the launcher that carries `run_id`."""

    pid: int
    run_id: str
    hang_timeout: float
    killed: dict[int, str] = field(default_factory=dict)  # rank → why the launcher killed it
    stopped: dict[int, float] = field(default_factory=dict)  # rank → seconds it had been stopped when killed
    notes: list[str] = field(default_factory=list)  # what the launcher did to processes that are not ranks
    deadline: float | None = None  # monotonic time after which everything left is killed
    nudge_at: float | None = None  # monotonic time at which torchrun gets SIGTERM if still running
    torn_down: bool = False  # the launcher ended torchrun itself (SIGTERM at nudge_at, or SIGKILL)
    _members: dict[tuple[int, float], _Member | None] = field(default_factory=dict)
    _stopped_since: dict[int, float] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def _member(self, p: psutil.Process) -> _Member | None:
        try:
            key = (p.pid, p.create_time())
        except psutil.Error:
            return None
        if key not in self._members:
            try:
                env = p.environ()
                ours = env.get(RUN_ID_ENV) == self.run_id
                is_rank = ours and p.pid != self.pid and TRAINER_MODULE in p.cmdline() and "RANK" in env
                self._members[key] = _Member(p, int(env["RANK"]) if is_rank else None) if ours else None
            except (psutil.Error, ValueError):
                return None  # gone, or a zombie never seen alive: not known to be ours
        return self._members[key]

    def members(self) -> list[_Member]:
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        return [m for m in map(self._member, children) if m is not None]

    def ranks(self) -> set[int]:
        """The ranks of every trainer process of this job seen so far (the launcher's node only)."""
        with self._lock:
            return {m.rank for m in self._members.values() if m is not None and m.rank is not None}

    def alive(self) -> list[_Member]:
        out = []
        for m in self.members():
            with contextlib.suppress(psutil.Error):
                if m.proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(m)
        return out

    def _kill(self, m: _Member, why: str, stopped_s: float | None = None) -> None:
        with contextlib.suppress(psutil.Error):
            m.proc.send_signal(signal.SIGKILL)
        if m.rank is not None:
            self.killed.setdefault(m.rank, why)
            if stopped_s is not None:
                self.stopped.setdefault(m.rank, stopped_s)
        elif m.proc.pid == self.pid:
            self.torn_down = True
            self.notes.append(f"torch.distributed.run {why}: killed")

    def poll(self) -> None:
        """Kill a process stopped past the hang timeout (or any stopped one once the job is ending: a
        stopped process cannot act on SIGTERM), and everything once the teardown deadline has passed."""
        with self._lock:
            now = time.monotonic()
            ending = self.deadline is not None
            for m in self.alive():
                try:
                    stopped = m.proc.status() == psutil.STATUS_STOPPED
                except psutil.Error:
                    continue
                if not stopped:
                    self._stopped_since.pop(m.proc.pid, None)
                    continue
                since = self._stopped_since.setdefault(m.proc.pid, now)
                if now - since >= self.hang_timeout or ending:
                    self._kill(m, f"hung: stopped (SIGSTOP) for {now - since:.1f} s and never resumed "
                                  f"(--hang-timeout {self.hang_timeout:g} s)", stopped_s=now - since)
            if self.nudge_at is not None and now >= self.nudge_at:
                # torchrun on one node of several does not see a rank of another node fail: tear its
                # ranks down as it would its own, with SIGTERM, so they write how they ended
                self.nudge_at = None
                if any(m.proc.pid == self.pid for m in self.alive()):
                    self.torn_down = True
                    self.forward(signal.SIGTERM)
            if ending and now >= self.deadline:
                self.kill_all("still running when the job's teardown grace ran out" if self.ranks() else
                              "stopped before any rank started (waiting at the rendezvous, or starting up)")

    def start_teardown(self, grace_s: float) -> None:
        """Everything still running `grace_s` from now is killed (an earlier deadline stays)."""
        with self._lock:
            d = time.monotonic() + grace_s
            self.deadline = d if self.deadline is None else min(self.deadline, d)

    def kill_all(self, why: str) -> None:
        with self._lock:
            for m in self.alive():
                self._kill(m, why)

    def forward(self, sig: int) -> None:
        """Send `sig` to torch.distributed.run, which passes it to its ranks and tears them down."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def drain(self, grace_s: float) -> None:
        """After torchrun has ended: wait for its ranks (a rank whose torchrun died gets SIGTERM from the
        kernel and writes its status), kill what is left after `grace_s`, and reap every process of the
        job that ended up as this process's child."""
        self.start_teardown(grace_s)
        while self.alive():
            self.poll()
            time.sleep(0.1)
        me = os.getpid()
        for m in self.members():
            with contextlib.suppress(psutil.Error, ChildProcessError):
                if m.proc.pid != self.pid and m.proc.ppid() == me:  # torchrun is its Popen's to reap
                    os.waitpid(m.proc.pid, os.WNOHANG)
