"""`commscope run`'s terminal output: the live training bar, the run summary table, the launcher's notes
and a failed run's one-paragraph verdict. Each function renders what the command layer's TerminalView
(commscope/commands/_run_view.py) hands it as the launcher reports the job: rank 0's progress records, the
summary.json document with its step statistics, the doctor's diagnosis. It computes nothing but layout.
"""
from __future__ import annotations

import os
import shlex

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from commscope.analyze.diagnosis import ranks_text
from commscope.analyze.step_gaps import PROFILER_EXPORT, PROFILER_WINDOW, step_list
from commscope.rundir.schema import LAUNCHER_LOG, NOT_STARTED
from commscope.util.ranges import int_ranges


class LiveProgress:
    """The live bar fed with rank 0's step records; other ranks' `commscope:` notes print above it."""

    def __init__(self, console: Console, total: int):
        self._bar = Progress(
            TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[ms]} ms/step"),
            TextColumn("{task.fields[tps]} tok/s"), TimeElapsedColumn(), console=console,
        )
        self._total = total
        self._task = None

    def __enter__(self) -> "LiveProgress":
        self._bar.__enter__()
        self._task = self._bar.add_task("train", total=self._total, loss="-", ms="-", tps="-")
        return self

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)

    def step(self, rec: dict) -> None:
        self._bar.update(self._task, completed=rec["step"] + 1, loss=f"{rec['loss']:.4f}",
                         ms=f"{rec['step_ms']:.1f}", tps=f"{rec['tokens_per_s']:,.0f}")

    def note(self, line: str) -> None:
        self._bar.console.print(line.rstrip(), markup=False, highlight=False)


def print_run_dir(console: Console, out: str) -> None:
    console.print(f"run directory: [bold]{escape(out)}[/]")


def print_run_note(console: Console, note: str) -> None:
    """One line on what the launcher did beside training: a replaced run kept or restored, a process it
    had to kill."""
    console.print(f"note: {escape(note)}", highlight=False)


def _left_out(stats: dict) -> str:
    """The steps the mean step leaves out, in words: " (excluding step 0, and steps 5–8: profiler window
    and its export)", " (excluding step 0)"; "" when none. The profiler's steps are left out only beside
    step 0 (step_stats keeps a lone step)."""
    if not stats.get("excludes_step0"):
        return ""
    prof = stats.get("profiler_steps") or {}
    if not prof:
        return " (excluding step 0)"
    whys = list(dict.fromkeys(prof.values()))
    why = "profiler window and its export" if whys == [PROFILER_WINDOW, PROFILER_EXPORT] else " and ".join(whys)
    return f" (excluding step 0, and step{'s' if len(prof) > 1 else ''} {step_list(prof)}: {why})"


def print_run_summary(console: Console, summary: dict, out: str, stats: dict, log: str = LAUNCHER_LOG,
                      recorded: bool = True) -> None:
    """The summary table; `stats` is the step-time figures of commscope.analyze.run_step_stats: the mean
    and median step and the tokens/s shown over the steps it keeps. `log`: this node's launcher log in
    `out` (one per node when several nodes share the folder)."""
    ok = summary["status"] == "completed"
    t = Table(title=f"commscope run: [{'green' if ok else 'red'}]{summary['status']}[/]", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    losses = summary["losses"]
    t.add_row("ranks", f"{summary['world_size']} × {summary['device']} ({summary['backend']}), preset {summary['preset']}")
    t.add_row("steps", f"{len(losses)} / {summary['steps']}")
    if losses:
        t.add_row("loss", f"{losses[0]:.4f} → {losses[-1]:.4f}")
    # The step times are rank 0's (its progress records): named so, as `report` and `doctor` give other
    # figures for the same run (every rank's mean, the median of the judged steps).
    # Both leave out step 0 and the profiler's steps (run_step_stats), which the label names: the
    # report's headline leaves out the same profiler steps.
    if stats:
        t.add_row("rank 0's mean step", f"{stats['mean_ms']:.1f} ms{_left_out(stats)}")
    tps = stats.get("tokens_per_s", summary["tokens_per_s"]) if stats else summary["tokens_per_s"]
    if tps:
        t.add_row("tokens/s", f"{tps:,.0f}")
    if "median_ms" in stats:
        t.add_row("rank 0's median step", f"{stats['median_ms']:.1f} ms, {stats['median_tokens_per_s']:,.0f} tokens/s")
    by_status: dict[str, list[str]] = {}
    for r, s in summary["ranks"].items():
        by_status.setdefault(s, []).append(r)
    t.add_row("rank status", ", ".join(f"{s}: {int_ranges(rs)}" for s, rs in by_status.items()))
    t.add_row("message", escape(summary["message"]))  # rank errors hold [file:line] that is not markup
    console.print(t)
    if not ok:
        whose = "all ranks" if log == LAUNCHER_LOG else "this node's ranks"
        console.print(f"output of {whose}: {os.path.join(out, log)}")
    # else nothing was recorded to report (--trace off writes statuses only), or the ranks refused the
    # command's options before recording any step
    if recorded and any(s != NOT_STARTED for s in summary["ranks"].values()) and not summary.get("usage_error"):
        console.print(f"next: [bold]commscope report {escape(shlex.quote(out))}[/]")  # pasted into a shell as is


def print_run_verdict(console: Console, out: str, diagnosis) -> None:
    """`commscope doctor`'s one-paragraph verdict on a failed run, a drill (--inject) or an interrupted run
    where it finds more than the interruption, or a note saying why there is none (`diagnosis` is then the
    error the doctor raised). The verdict word is printed once: the summary starts with it."""
    if isinstance(diagnosis, Exception):
        console.print(f"commscope doctor could not diagnose {escape(out)}: {escape(str(diagnosis))}", highlight=False)
        return
    culprits = f" (culprit rank(s) {ranks_text(diagnosis.culprit_ranks)})" if diagnosis.culprit_ranks else ""
    said = diagnosis.summary.removeprefix(f"{diagnosis.verdict}: ")
    color = "green" if diagnosis.verdict == "ok" else "bold red"
    console.print(f"[{color}]{diagnosis.verdict}[/]{culprits}: {escape(said)} "
                  f"Details: [bold]commscope doctor {escape(shlex.quote(out))}[/]", highlight=False)
