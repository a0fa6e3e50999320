"""What a finished `commscope run` job did: rank 0's progress, each rank's status, and the run's
`summary.json` (docs/run_format.md), built from the run directory once no process of the job is left
(so no rank can change the run after it is summarized).

Rank 0 reports progress twice: `@@commscope {json}` lines on stdout (which the launcher parses for the
live bar) and the same records in RUN/progress.jsonl. The summary reads the file, because torch's
--tee can tear a console line; the console copy is the fallback where the file is not on this host.

Invariants:
- The summary's status is "completed" only if torch.distributed.run exited 0 and every expected rank
  wrote status "completed"; a rank with a watchdog report or stopped past the hang timeout is "hung",
  one without a readable status "crashed".
- `exit_code` is what `commscope run` itself exits with (`exit_code()`), never torchrun's code.
- The message names the rank(s) behind the ending, not its victims: in a hang the ranks that waited are
  victims and the ones that did not are the culprits (with --trace off too, where the waiting shows only
  as the backend's timeout); when every rank was ended by a signal, the first one to end.
- Nothing here prints: reports/run_terminal.py renders what these functions return.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
from dataclasses import dataclass, field

from commscope.util.atomic import write_json_atomic
from commscope.rundir import launcher_log_tails, read_status
from commscope.rundir.schema import (NODE_INTERRUPTED, NOT_STARTED, PROGRESS, SCHEMA_VERSION,
                                     INFLIGHT, META, STATUS, SUMMARY, WATCHDOG, ending_signal, rank_dir_name,
                                     signalled_together_bar)
from instrumented_model.job import signame
from instrumented_model.train import PROGRESS_PREFIX

# torch.distributed.run --tee prefixes each line with "[<role><local_rank>]:"
_TEE_PREFIX = re.compile(r"^\[[A-Za-z_]*(\d+)\]:")
_JSON = json.JSONDecoder()


@dataclass
class RunProgress:
    """What rank 0 reported, parsed from its progress lines."""

    start: dict = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    step_times_ms: list[float] = field(default_factory=list)

    def feed(self, line: str) -> dict | None:
        """Parse one output line; return the progress record if it is one.

        torch's --tee tails each rank's log file and writes every piece `readline` returns behind the
        rank's prefix: a line it caught half-written arrives with the prefix again in its middle (or,
        when only the newline was missing, at its end). Removing that rank's prefix inside the record and
        reading the first JSON value keeps such a step (one was lost that way under load in CI)."""
        m = _TEE_PREFIX.match(line)
        body = line[m.end():] if m else line
        if not body.startswith(PROGRESS_PREFIX):
            return None
        text = body[len(PROGRESS_PREFIX):]
        if m:
            text = text.replace(m.group(0), "")
        return self.add(text)

    def add(self, text: str) -> dict | None:
        """Take the record that `text` starts with (trailing bytes ignored); None if it holds none."""
        try:
            rec, _end = _JSON.raw_decode(text.strip())
        except json.JSONDecodeError:
            return None
        if not isinstance(rec, dict):
            return None
        if rec.get("event") == "start":
            self.start = rec
        elif rec.get("event") == "step":
            self.losses.append(float(rec["loss"]))
            self.step_times_ms.append(float(rec["step_ms"]))
        return rec

    def tokens_per_s(self) -> float | None:
        """Throughput over the finished steps, leaving out step 0 (warm-up) when there are others."""
        times = self.step_times_ms[1:] if len(self.step_times_ms) > 1 else self.step_times_ms
        if not times or not self.start:
            return None
        tokens = self.start["batch_size"] * self.start["seq_len"]
        return tokens * len(times) / (sum(times) / 1e3)


def progress_from_file(run_dir: str) -> RunProgress | None:
    """Rank 0's progress as it wrote it to RUN/progress.jsonl (a torn last line is skipped), or None
    where the file is not on this host or holds no start record."""
    prog = RunProgress()
    try:
        with open(os.path.join(run_dir, PROGRESS), errors="replace") as f:
            for line in f:
                prog.add(line)
    except OSError:
        return None
    return prog if prog.start else None


@dataclass
class JobEnd:
    """How the job ended, as the launcher saw it."""

    torchrun_code: int  # torch.distributed.run's exit code (negative: killed by that signal)
    signal: int | None = None  # SIGINT/SIGTERM/SIGHUP the launcher received (the run was interrupted)
    stopped: dict[int, float] = field(default_factory=dict)  # rank → seconds stopped (SIGSTOP) when killed
    storage_error: str | None = None  # the output could not be written (disk full, read-only)
    hang_timeout: float = math.inf  # --hang-timeout: a job with no step for this long before its first fault hung
    torn_down: bool = False  # the launcher itself ended torchrun (its teardown after a fault): not from outside


# How a rank's error says it ended: waiting on its peers (our watchdog, the backend's timeout), stopped
# by a signal (the launcher's teardown, torchrun's, or from outside), or cut off by a peer that went away.
# (an error quoting the --hang-timeout option is no timeout)
_WAITED = re.compile(r"hang watchdog|timed out|(?<!hang-)timeout", re.I)
_SIGNALLED = re.compile(r"terminated by signal|KeyboardInterrupt")
_PEER_GONE = re.compile(r"Connection (closed|reset|refused)|Broken pipe|by peer|DistNetworkError|Read error|"
                        r"Write error|Socket", re.I)


# a rank's refusal of the options it was given (train.check_same_options: the nodes were launched with
# different ones), written as its status's error: a mistake in the command, not a fault of the job
_USAGE = "UserError: "


def usage_error(statuses: dict[str, dict]) -> str | None:
    """The refusal of the options by a rank that refused them before its first step (every rank does: they
    compare the same options): `commscope run` then ends as for any bad option, one line and exit 2."""
    refused = [s for s in statuses.values() if s["ending"] == "usage" and _after_step(s) == "before finishing any step"]
    return refused[0]["error"][len(_USAGE):] if refused else None


def rank_statuses(run_dir: str, ranks: range | list[int], stopped: dict[int, float] | None = None
                  ) -> dict[str, dict]:
    """Each expected rank's status.json, or a stand-in saying why there is none, with `ending` (how the
    rank ended: completed, stopped, waited, signalled, peer-gone, no-status, no-folder, usage, error) and
    `ended_ns` (when its end began: status.json's own `ended_ns`, the signal's arrival on the run's common
    axis, else when its status was written, its mtime: a rank blocked in C++ writes its status seconds
    after the signal reached it). A rank without a folder is NOT_STARTED: it never
    recorded anything, which is not the same as crashing mid-run."""
    out = {}
    for r in ranks:
        d = os.path.join(run_dir, rank_dir_name(r))
        if not os.path.isdir(d):  # torn down in start-up, or failed before its Recorder made the folder
            out[str(r)] = {"status": NOT_STARTED, "error": "no rank folder: it never started recording",
                           "last_step": None, "ending": "no-folder", "ended_ns": None}
            continue
        try:
            st = read_status(d)
        except ValueError:
            st = {"status": "crashed", "error": "unreadable status.json", "last_step": None}
        ended_ns, ended_from = None, "mtime"
        if st is None:
            st = {"status": "crashed", "error": "no status.json: the process ended without writing one", "last_step": None}
        elif type(st.get("ended_ns")) is int:
            ended_ns, ended_from = st["ended_ns"], "status"
        else:
            with contextlib.suppress(OSError):
                ended_ns = os.stat(os.path.join(d, STATUS)).st_mtime_ns
        error = str(st.get("error") or "")
        watchdog = os.path.exists(os.path.join(d, WATCHDOG))
        if st["status"] == "completed":
            ending = "completed"
        elif stopped and r in stopped:
            ending = "stopped"
        elif st["status"] == "crashed":
            ending = "no-status"
        elif watchdog or _WAITED.search(error):
            ending = "waited"
        elif _SIGNALLED.search(error):
            ending = "signalled"
        elif _PEER_GONE.search(error):
            ending = "peer-gone"
        elif error.startswith(_USAGE):
            ending = "usage"
        else:
            ending = "error"
        if ending in ("stopped", "waited") and (watchdog or ending == "stopped"):
            st = {**st, "status": "hung"}
        out[str(r)] = {**st, "ending": ending, "ended_ns": ended_ns, "ended_from": ended_from,
                       "clock_error_ns": _clock_error_ns(d), "waiting": _waiting_at_end(d, ended_ns)}
    return out


WAITING_SAID_S = 1.0  # a wait this long at a rank's end is worth saying (the doctor's least stall bar)


def _waiting_at_end(rank_dir: str, ended_ns: int | None) -> tuple[float, str] | None:
    """(seconds, label) of the longest wait the rank was in when its end began, from its inflight.json (the
    collectives it launched whose completion was unknown at its end), where at least WAITING_SAID_S; else
    None. A rank a signal ended while it waited on a stuck peer is that peer's victim, not the cause."""
    if ended_ns is None:
        return None
    try:
        with open(os.path.join(rank_dir, INFLIGHT), "rb") as f:
            doc = json.loads(f.read(1 << 20))
        rows = [(ended_ns - r["wait_ns"], str(r.get("label"))) for r in doc["inflight"]
                if type(r.get("wait_ns")) is int and r["wait_ns"] <= ended_ns]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    longest = max(rows, default=None)
    return (longest[0] / 1e9, longest[1]) if longest and longest[0] >= WAITING_SAID_S * 1e9 else None


def _ranks(rs) -> str:
    return ",".join(str(r) for r in rs)


def stall_s(run_dir: str, statuses: dict[str, dict]) -> float | None:
    """Seconds from rank 0's last progress record (progress.jsonl's mtime) to the first rank's ending
    other than "completed"; None when either is unknown. A stall longer than the hang timeout means the
    job hung before anything failed, even where no rank says it waited (a peer's timeout closed the
    connection under it)."""
    first = [s["ended_ns"] for s in statuses.values() if s["ending"] != "completed" and s["ended_ns"]]
    try:
        last = os.stat(os.path.join(run_dir, PROGRESS)).st_mtime_ns
    except OSError:
        return None
    return (min(first) - last) / 1e9 if first else None


TORCHRUN_KILLED = "failed: torch.distributed.run was killed by "  # the message's start when it was


# torch.distributed.run's report of a failed job (its ChildFailedError), one entry per failed rank process:
# "rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: 4916)"; the entries after "Root Cause" are the
# first failure it observed, those under "Failures" the others (often ranks it stopped itself after it)
_TORCHRUN_FAILURE = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)
_ROOT_CAUSE = "Root Cause"


def torchrun_exits(out: str) -> dict[int, dict]:
    """rank → {"exit_code": its process's exit code (negative: the signal that ended it), "root_cause":
    whether torchrun named it its first observed failure} for each rank process torch.distributed.run
    reported failed, read from the tails of the run's launcher logs (every node's). The one witness of a
    rank's end where the rank itself could write nothing: killed before it made its folder, or after it
    wrote its status "completed". Empty where no log holds torchrun's report."""
    exits: dict[int, dict] = {}
    for tail in launcher_log_tails(out, _LOG_TAIL).values():
        root_at = tail.rfind(_ROOT_CAUSE)
        for m in _TORCHRUN_FAILURE.finditer(tail):
            exits.setdefault(int(m.group(1)), {"exit_code": int(m.group(2)),
                                               "root_cause": 0 <= root_at < m.start()})
    return exits


def _exit_said(rank: int, code: int) -> str:
    return f"rank {rank} ended by {signame(-code)}" if code < 0 else f"rank {rank} exited with code {code}"


def _exits_said(exits: dict[int, dict], what: str) -> str:
    """torchrun's report in words: its first observed failure(s) `what` (a phrase saying when), then the
    rank processes that failed after them (most often stopped by torchrun itself)."""
    first = [r for r, e in sorted(exits.items()) if e["root_cause"]] or sorted(exits)
    said = ", ".join(_exit_said(r, exits[r]["exit_code"]) for r in first) + f" {what}"
    later = [r for r in sorted(exits) if r not in first]
    if later:
        said += "; then " + ", ".join(_exit_said(r, exits[r]["exit_code"]) for r in later)
    return said + " (torch.distributed.run's report)"


def verdict(statuses: dict[str, dict], end: JobEnd, steps_done: int, steps: int,
            stalled_s: float | None = None, exits: dict[int, dict] | None = None) -> tuple[str, str]:
    """The run's status and one line saying what happened, naming the rank(s) behind it: a stopped rank
    over one that crashed, over one that failed with its own error; torchrun killed from outside; then a
    hang (ranks waited, or the job stalled for the hang timeout: `stalled_s`), whose culprits are the
    ranks that were *not* waiting; then the first rank a signal ended. `exits` (torchrun_exits) names the
    rank processes torchrun saw fail where their records cannot: none started, or all completed."""
    done = f"{steps_done}/{steps} steps"
    exits = exits or {}
    if end.storage_error:
        return "failed", f"failed: {end.storage_error}, after {done}"
    everyone = bool(statuses) and all(s["ending"] == "completed" for s in statuses.values())
    if end.signal and everyone and steps_done == steps:
        # the signal came as the job was ending: every rank had written its whole run, nothing was cut short
        n = len(statuses)
        return "completed", (f"{n} rank{'s' * (n != 1)} completed {steps_done} step{'s' * (steps_done != 1)}; "
                             f"{signame(end.signal)} reached the launcher after every rank had completed")
    if end.signal:
        return "interrupted", f"interrupted by {signame(end.signal)} after {done}"
    if end.torchrun_code == 0 and everyone:
        n = len(statuses)
        return "completed", f"{n} rank{'s' * (n != 1)} completed {steps_done} step{'s' * (steps_done != 1)}"
    by: dict[str, list[int]] = {}
    for r, s in statuses.items():
        by.setdefault(s["ending"], []).append(int(r))
    waited = sorted(by.get("waited", []))
    if by.get("stopped"):
        rs = sorted(by["stopped"])
        secs = max(end.stopped[r] for r in rs)
        also = f"; rank(s) {_ranks(waited)} waited on it" if waited else ""
        return "hung", (f"hung: rank(s) {_ranks(rs)} stopped (SIGSTOP) and never resumed; killed after {secs:.1f} s "
                        f"stopped{also}")
    if by.get("no-status"):
        rs = sorted(by["no-status"])
        return "crashed", (f"crashed: rank(s) {_ranks(rs)} ended without a status (killed, aborted or os._exit), "
                           f"after {done} of rank 0")
    if statuses and len(by.get("no-folder", [])) == len(statuses):
        if exits:
            return "failed", (f"failed: no rank started recording: "
                              f"{_exits_said(exits, 'before making its folder')}; the launcher log holds the "
                              "ranks' output")
        return "failed", (f"failed: no rank started (torch.distributed.run exited {end.torchrun_code} before any "
                          "rank made its folder: a rendezvous that timed out waiting for a node, or an error at "
                          "start-up; the launcher log says which)")
    if by.get("no-folder"):
        rs = sorted(by["no-folder"])
        return "crashed", (f"crashed: rank(s) {_ranks(rs)} ended before recording anything (no rank folder; "
                           "their output is in the launcher log)")
    if by.get("error") or by.get("usage"):
        r = min(by.get("error", []) + by.get("usage", []))
        s = statuses[str(r)]
        return "failed", f"failed: rank {r} failed {_after_step(s)}: {s.get('error')}"
    if end.torchrun_code < 0 and not end.torn_down:
        completed = statuses and all(s["ending"] == "completed" for s in statuses.values())
        after = "every rank had completed" if completed else "its ranks were terminated"
        return "failed", (f"{TORCHRUN_KILLED}{signame(-end.torchrun_code)} after {done}; {after}")
    if everyone:
        # every rank wrote status "completed" (its records are whole), yet torchrun failed: a rank process
        # ended badly after its last record, in its shutdown (a kill, an abort in a destructor)
        who = (f"then {_exits_said(exits, 'after writing its last record')}" if exits else
               f"then torch.distributed.run exited {end.torchrun_code}: a rank's process failed after its last "
               "record (the launcher log says which)")
        return "failed", f"failed: every rank completed {done} and its records are whole; {who}"
    if waited or (stalled_s is not None and stalled_s >= end.hang_timeout):
        # A peer that timed out closes its connections, so ranks still waiting see "connection closed":
        # victims too. The culprit never joined, so no timeout ended it: the teardown's signal did.
        victims = sorted(waited + by.get("peer-gone", []))
        culprits = sorted(by.get("signalled", []))
        if culprits:
            return "hung", (f"hung: rank(s) {_ranks(victims)} waited on a collective that rank(s) {_ranks(culprits)} "
                            f"never joined; rank(s) {_ranks(culprits)} were then terminated")
        return "hung", (f"hung: rank(s) {_ranks(victims)} all waited on a collective (a desync, or every rank "
                        "stuck); commscope doctor tells which rank is behind it")
    together = signalled_together(statuses)
    if together is not None:
        # one signal reached every rank at once (torch.distributed.run signalled from outside, not through
        # this launcher): the job was stopped, no rank first
        return "interrupted", (f"interrupted by a signal that reached every rank within {together / 1e6:,.1f} ms "
                               f"(their status.json ended_ns), from outside this launcher, after {done}")
    first = first_to_end(statuses)
    if first is not None:
        return "failed", _ended_first_message(statuses, first)
    return "failed", f"failed: torch.distributed.run exited {end.torchrun_code} after {done}"


def signalled_together(statuses: dict[str, dict]) -> int | None:
    """The spread (ns) of the ranks' ends where a signal ended every rank, or began its end (status.json
    `signal`, read by rundir.schema.ending_signal as the doctor reads it: a rank in a collective's wait may end
    by the error its peer's end raised), and their status.json ended_ns
    (the signal's arrival) are within the doctor's bar of each other (rundir.schema.signalled_together_bar:
    SIGNALLED_TOGETHER_NS widened by the clocks' alignment error, as analyze.doctor_stopped reads them): one
    signal to the whole job. None otherwise, or where a status has no ended_ns of its own."""
    ended = [s["ended_ns"] for s in statuses.values()
             if (s["ending"] == "signalled" or ending_signal(s)) and s.get("ended_from") == "status"]
    if not ended or len(ended) != len(statuses):
        return None
    spread = max(ended) - min(ended)
    bar = signalled_together_bar(s.get("clock_error_ns", 0) for s in statuses.values())
    return spread if spread <= bar else None


def _clock_error_ns(rank_dir: str) -> int:
    """The rank's clock alignment error (meta.json `clock.error_ns`), 0 where its meta.json has none."""
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(rank_dir, META)) as f:
            meta = json.load(f)
        clock = meta.get("clock") if isinstance(meta, dict) else None
        error = clock.get("error_ns") if isinstance(clock, dict) else None
        if type(error) is int and error >= 0:
            return error
    return 0


def _ended_first_message(statuses: dict[str, dict], first: int) -> str:
    """The verdict's line where no rank failed on its own, stopped or waited: the rank the others followed."""
    s = statuses[str(first)]
    stopped = all(o["ending"] == "signalled" for r, o in statuses.items() if r != str(first))
    after = "torch.distributed.run then stopped the others" if stopped else "the others ended after it"
    waiting = s.get("waiting")
    waited = (f", {waiting[0]:,.1f} s into its wait on '{waiting[1]}', which had not completed (a rank it waited "
              "on may have been stuck: commscope doctor says)") if waiting else ""
    return f"failed: rank {first} ended first ({s.get('error')}) {_after_step(s)}{waited}; {after}"


def first_to_end(statuses: dict[str, dict]) -> int | None:
    """The rank that ended first of those a signal ended, else of those that lost a peer (by when each
    wrote its status; ties to the lower rank): where no rank failed on its own or timed out, the one whose
    ending the others followed. None where no rank ended either way."""
    for kind in ("signalled", "peer-gone"):
        rs = [int(r) for r, s in statuses.items() if s["ending"] == kind]
        if rs:
            return min(rs, key=lambda r: (statuses[str(r)]["ended_ns"] or 0, r))
    return None


def _after_step(status: dict) -> str:
    """When a rank ended, in words: a status's last_step is -1 (or missing) when it finished no step."""
    last = status.get("last_step")
    return f"after step {last}" if isinstance(last, int) and last >= 0 else "before finishing any step"


def exit_code(status: str, end: JobEnd, refused: str | None = None) -> int:
    """What `commscope run` exits with, and summary.json's exit_code: 0 completed, 128 + signal when
    interrupted, 2 when the output could not be written or the ranks refused the options, else 1."""
    if end.storage_error or refused:
        return 2
    if status == "interrupted" and end.signal:
        return 128 + end.signal
    return 0 if status == "completed" else 1


# bytes of a launcher log's tail read for its last words (a node's interruption line, torchrun's report)
_LOG_TAIL = 1 << 16


def signal_on_another_node(out: str, own_log: str) -> int | None:
    """The signal that stopped another node's launcher (NODE_INTERRUPTED in the tail of its log), else
    None: with several nodes the user's Ctrl-C or SIGTERM reaches one node, and the job is interrupted."""
    for name, tail in launcher_log_tails(out, _LOG_TAIL).items():
        m = NODE_INTERRUPTED.search(tail) if name != own_log else None
        if m and m.group(1) in signal.Signals.__members__:
            return int(signal.Signals[m.group(1)])
    return None


def build_summary(out: str, args: argparse.Namespace, world_size: int, ranks: range | list[int],
                  end: JobEnd, console_progress: RunProgress) -> dict:
    """The summary.json document of the job that just ended in `out` (no process of it is left)."""
    prog = progress_from_file(out) or console_progress
    statuses = rank_statuses(out, ranks, end.stopped)
    # the ranks refused the options they were given: the command's mistake, said as such before any verdict
    refused = None if end.signal or end.storage_error else usage_error(statuses)
    exits = torchrun_exits(out)
    status, message = (("failed", f"failed: the ranks refused the options before the first step: {refused}")
                       if refused else verdict(statuses, end, len(prog.losses), args.steps, stall_s(out, statuses),
                                               exits))
    summary = {
        "schema_version": SCHEMA_VERSION, "status": status, "world_size": world_size,
        "backend": args.backend, "device": args.device, "preset": args.preset, "steps": args.steps,
        "head_layout": args.head_layout, "comm_schedule": args.comm_schedule,
        "losses": prog.losses, "step_times_ms": prog.step_times_ms, "tokens_per_s": prog.tokens_per_s(),
        "ranks": {r: s["status"] for r, s in statuses.items()}, "exit_code": exit_code(status, end, refused),
        "message": message,
    }
    if refused:  # `commscope run` ends with this line (exit 2), as for an option it refuses itself
        summary["usage_error"] = refused
    # where the verdict is the rank the others followed (none failed on its own, stopped or waited): the
    # doctor's evidence when the records show no cause (a rank killed from outside between two collectives)
    first = first_to_end(statuses)
    if first is not None and message == _ended_first_message(statuses, first):
        summary["ended_first"] = {"rank": first, "how": statuses[str(first)]["ending"],
                                  "error": statuses[str(first)].get("error")}
    if exits:  # torchrun's word on how each failed rank process ended, beside what the ranks wrote
        summary["torchrun_exits"] = {str(r): e for r, e in sorted(exits.items())}
    if message.startswith(TORCHRUN_KILLED):  # the doctor's evidence that the job was ended from outside
        summary["torchrun_killed"] = signame(-end.torchrun_code)
    if prog.start.get("device"):
        summary["device"] = prog.start["device"].split(":")[0]
    return summary


def write_summary(out: str, summary: dict) -> None:
    write_json_atomic(os.path.join(out, SUMMARY), summary)
