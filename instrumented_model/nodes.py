"""What one node of a several-node job does that a job on one node does not: the launcher's side of sharing
one run directory with the other nodes' launchers.

Each node runs its own `commscope run` and its own torch.distributed.run; they meet only in the rendezvous
and in the shared run directory. Rank 0's output reaches one node's terminal, a fault of one node's rank
is unknown to the other nodes' torchruns, and a user's signal reaches one node. So every node, once per
poll of the launcher's monitor thread (`NodeSync.tick`):

- follows rank 0's progress.jsonl onto its live bar (`ProgressFollower`);
- writes a signal it received into its own launcher log, once (schema.NODE_INTERRUPTED), and reads the
  other nodes' logs for theirs once a second: another node's signal stops this node's job too, since its
  torchrun may be waiting for that node in torch's exit barrier;
- after a fault sign in the shared folder (`NodeSync.fault_seen`), sends its torchrun SIGTERM NUDGE_S
  later, so its ranks end and write how they ended as they would for a fault of their own.

When its job has ended, a node ends its log with schema.NODE_ENDED (a node starting later into the folder
is not of this job), and the node that writes summary.json first waits for every rank folder to hold a
status (`await_statuses`).

Invariants: nothing here starts a thread or a process; `tick` and `fault_seen` are called from the
launcher's monitor thread only, `close` once that thread has stopped, `ended` once no process of the
node's job is left.
"""
from __future__ import annotations

import os
import time
from typing import Protocol

from commscope.rundir import rank_dirs, read_status
from commscope.rundir.schema import NODE_ENDED
from instrumented_model.job import Job, signame
from instrumented_model.run_summary import RunProgress, signal_on_another_node

# After a fault sign: this long for the node's own torchrun to start its teardown (the fault was its own
# rank's) before the launcher sends it SIGTERM (a rank of another node failed); longer than the watchdog's
# grace (commscope.recording.watchdog, at most 3 s), so a rank whose watchdog fired writes its own reason
# before any SIGTERM reaches it
NUDGE_S = 5
# How often a node reads the other nodes' logs for a signal
_LOOK_S = 1.0


class StepBar(Protocol):
    def step(self, rec: dict) -> None: ...


class NodeLog(Protocol):
    def write(self, text: str) -> None: ...
    def flush(self) -> None: ...


class ProgressFollower:
    """Rank 0's progress.jsonl read as it grows. What the file held when the follower was made is an
    earlier attempt's: reading starts past it, and again from the top once the file is truncated (rank 0's
    start record rewrites it). A line that does not parse is skipped; a torn last line waits for its end."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.offset = os.path.getsize(path)
        except OSError:
            self.offset = 0
        self._rest = b""

    def poll(self, bar: StepBar) -> None:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # rewritten from its start
                    self.offset, self._rest = 0, b""
                f.seek(self.offset)
                data = f.read(1 << 20)
        except OSError:
            return
        self.offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        for line in lines:
            rec = RunProgress().add(line.decode("utf-8", "replace"))
            if rec and rec.get("event") == "step" and isinstance(rec.get("step"), int):
                bar.step(rec)


class Signals(Protocol):
    received: int | None  # the signal the user sent this node's launcher, if any


class NodeSync:
    """One node's exchange with the others through the shared run directory, for the job it supervises.
    `follower` is made before the job starts, so that it skips what progress.jsonl held before."""

    def __init__(self, out: str, job: Job, sigs: Signals, log: NodeLog, log_name: str, follower: ProgressFollower,
                 shutdown_grace_s: float):
        self.out, self.job, self.sigs, self.log, self.log_name = out, job, sigs, log, log_name
        self.follower = follower
        self.shutdown_grace_s = shutdown_grace_s  # the ranks' time to end once another node's signal is seen
        self._said = False
        self._next_look = 0.0

    def tick(self, bar: StepBar) -> None:
        self.follower.poll(bar)
        sig = self.sigs.received
        if sig is not None and not self._said:
            self._said = True
            self.log.write(f"commscope run: this node was interrupted by {signame(sig)}\n")
            self.log.flush()
        now = time.monotonic()
        if sig is None and self.job.deadline is None and now >= self._next_look:
            self._next_look = now + _LOOK_S
            if signal_on_another_node(self.out, self.log_name) is not None:
                self.job.start_teardown(self.shutdown_grace_s)
                self.job.nudge_at = now

    def fault_seen(self) -> None:
        """A fault sign in the shared folder: it may be another node's, which this node's torchrun never
        hears of, so NUDGE_S later torchrun gets SIGTERM, passing it to its ranks."""
        self.job.nudge_at = time.monotonic() + NUDGE_S

    def close(self, bar: StepBar) -> None:
        """Once the monitor has stopped: the steps rank 0 logged since the last tick."""
        self.follower.poll(bar)

    def ended(self) -> None:
        """Once no process of this node's job is left: the log's last line, which tells a node starting
        later into this folder that the folder holds an ended job."""
        self.log.write(NODE_ENDED + "\n")


def await_statuses(out: str, world_size: int, grace_s: float, poll_s: float = 0.25) -> None:
    """The summary's node may end while other nodes' ranks are still writing how they ended: wait until
    every rank folder that exists holds a status, at most `grace_s`. A rank without a folder or a status
    after that is summarized as the folder shows it (not started, crashed)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        dirs = rank_dirs(out)
        try:
            if all(read_status(dirs[r]) is not None for r in range(world_size) if r in dirs):
                return
        except ValueError:  # a status being written
            pass
        time.sleep(poll_s)
