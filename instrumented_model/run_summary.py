"""What a finished `commscope run` job did: rank 0's progress, each rank's status, and the run's
`summary.json` (docs/run_format.md), built from the run directory after torch.distributed.run ends.

Rank 0 reports progress twice: `@@commscope {json}` lines on stdout (which the launcher parses for the
live bar) and the same records in RUN/progress.jsonl. The summary reads the file, because torch's
--tee can tear a console line; the console copy is the fallback where the file is not on this host.

Invariants:
- The summary's status is "completed" only if torch.distributed.run exited 0 and every expected rank
  wrote status "completed"; a rank with a watchdog report is "hung", one without a readable status
  "crashed".
- Nothing here prints: reports/run_terminal.py renders what these functions return.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
from dataclasses import dataclass, field

from commscope.util.atomic import write_json_atomic
from commscope.rundir import read_status
from commscope.rundir.schema import PROGRESS, SCHEMA_VERSION, SUMMARY, WATCHDOG, rank_dir_name
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


def rank_statuses(run_dir: str, ranks: range | list[int]) -> dict[str, dict]:
    """Each expected rank's status.json, or a stand-in saying why there is none."""
    out = {}
    for r in ranks:
        try:
            st = read_status(os.path.join(run_dir, rank_dir_name(r)))
        except ValueError:
            st = {"status": "crashed", "error": "unreadable status.json", "last_step": None}
        if st is None:
            st = {"status": "crashed", "error": "no status.json: the process ended without writing one", "last_step": None}
        if os.path.exists(os.path.join(run_dir, rank_dir_name(r), WATCHDOG)):
            st = {**st, "status": "hung"}
        out[str(r)] = st
    return out


def overall_status(exit_code: int, statuses: dict[str, dict], interrupted: bool) -> str:
    kinds = {s["status"] for s in statuses.values()}
    if interrupted:
        return "interrupted"
    if exit_code == 0 and kinds <= {"completed"} and statuses:
        return "completed"
    for k in ("hung", "crashed"):
        if k in kinds:
            return k
    return "failed"


def describe(status: str, statuses: dict[str, dict], steps_done: int, steps: int) -> str:
    """One line saying what happened, naming the first rank that did not complete."""
    if status == "completed":
        return f"{len(statuses)} ranks completed {steps_done} steps"
    if status == "interrupted":
        return f"interrupted by the user after {steps_done}/{steps} steps"
    bad = [(r, s) for r, s in statuses.items() if s["status"] not in ("completed",)]
    # A rank that failed on its own explains more than one torn down afterwards by the launcher.
    bad.sort(key=lambda rs: ("terminated by signal" in str(rs[1].get("error")), int(rs[0])))
    if not bad:
        return f"{status}: torch.distributed.run exited non-zero after {steps_done}/{steps} steps"
    r, s = bad[0]
    return f"{status}: rank {r} {s['status']} after step {s.get('last_step')}: {s.get('error')}"


def build_summary(out: str, args: argparse.Namespace, world_size: int, ranks: range | list[int],
                  exit_code: int, interrupted: bool, console_progress: RunProgress) -> dict:
    """The summary.json document of the job that just ended in `out`."""
    prog = progress_from_file(out) or console_progress
    statuses = rank_statuses(out, ranks)
    status = overall_status(exit_code, statuses, interrupted)
    summary = {
        "schema_version": SCHEMA_VERSION, "status": status, "world_size": world_size,
        "backend": args.backend, "device": args.device, "preset": args.preset, "steps": args.steps,
        "head_layout": args.head_layout, "comm_schedule": args.comm_schedule,
        "losses": prog.losses, "step_times_ms": prog.step_times_ms, "tokens_per_s": prog.tokens_per_s(),
        "ranks": {r: s["status"] for r, s in statuses.items()}, "exit_code": exit_code,
        "message": describe(status, statuses, len(prog.losses), args.steps),
    }
    if prog.start.get("device"):
        summary["device"] = prog.start["device"].split(":")[0]
    return summary


def write_summary(out: str, summary: dict) -> None:
    write_json_atomic(os.path.join(out, SUMMARY), summary)


def step_stats(summary: dict) -> dict:
    """The step-time figures the summary table shows: the mean step (step 0, the warm-up, left out when
    there are others) and, from three steps on, the median step and the throughput at that pace (a few
    slow steps, a GPU clock dip or a checkpoint, move the mean; the median says what a step takes)."""
    times, tps = summary["step_times_ms"], summary["tokens_per_s"]
    if not times:
        return {}
    tail = times[1:] or times
    stats = {"mean_ms": sum(tail) / len(tail), "excludes_step0": len(times) > 1}
    if len(times) > 2 and tps:
        median = statistics.median(tail)
        # tokens_per_s is over the mean step (RunProgress.tokens_per_s)
        stats.update(median_ms=median, median_tokens_per_s=tps * stats["mean_ms"] / median)
    return stats
