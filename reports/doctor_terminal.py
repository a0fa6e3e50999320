"""`commscope doctor`'s terminal output: the verdict line, the evidence table, for a straggler the collective
instances it is based on, the Flight Recorder's second opinion, the faults the run was started with and the
loader's problems (the first few, each whole, as `report` prints them).

Renders a `commscope.analyze.diagnosis.Diagnosis` as it is; every string in it comes from the analysis and is
escaped, so rank lists like [0, 1] are never read as rich markup.
"""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reports.report_terminal import print_caveat_lines

COLOURS = {"ok": "green", "insufficient": "yellow", "interrupted": "yellow"}
# the straggler's instances: the columns a reader checks against the timeline
INSTANCE_KEYS = ["step", "sequence", "label", "op", "last_rank", "waiting_caused_ms", "mean_wait_ms",
                 "arrival_skew_ms", "launch_skew_ms", "launched_last_rank"]
SHOWN_INSTANCES = 10
# column headers where the key alone would mislead: the share is of the run's median step, not of the
# step's own time beside it
HEADERS = {"pct_of_median_step": "% of median step"}


def _cell(v) -> str:
    if v is None:
        return ""
    return f"{v:.2f}" if isinstance(v, float) else escape(str(v))


def _table(title: str, rows: list[dict], keys: list[str] | None = None) -> Table:
    keys = keys or list(dict.fromkeys(k for e in rows for k in e))
    t = Table(title=title, show_lines=False)
    for k in keys:
        t.add_column(HEADERS.get(k, k), overflow="fold")
    for e in rows:
        t.add_row(*(_cell(e.get(k)) for k in keys))
    return t


def print_doctor_verdict(d, console: Console) -> None:
    colour = COLOURS.get(d.verdict, "red")
    console.print(f"[bold {colour}]{d.verdict}[/]  {escape(d.summary)}", highlight=False)
    if d.evidence:
        title = ("waiting caused per judged step (ms; % of the run's median step, step_ms: the step's own)"
                 if d.verdict == "straggler" else
                 "evidence (times: ns on the run's common time axis)")
        console.print(_table(title, d.evidence))
    det = d.details or {}
    if d.verdict == "straggler" and det.get("instances"):
        inst = det["instances"]
        console.print(_table(f"collective instances it is based on (the {min(len(inst), SHOWN_INSTANCES)} that "
                             f"caused most waiting of {len(inst)}; launch_skew: host side, for reference)",
                             sorted(inst, key=lambda i: -i["waiting_caused_ms"])[:SHOWN_INSTANCES], INSTANCE_KEYS))
        if det.get("also_late"):
            console.print(escape("also over the bar, with less than half the worst's waiting: " + ", ".join(
                f"rank {r} ({ms:.1f} ms)" for r, ms in det["also_late"].items())), highlight=False)
    if d.second_opinion:
        console.print(escape(f"Flight Recorder: {d.second_opinion.get('verdict')} "
                             f"{d.second_opinion.get('summary', '')}"), highlight=False)
    if d.injected:
        console.print(escape(f"(this run was started with --inject {', '.join(d.injected)}; not used for the "
                             "verdict)"), highlight=False)
    print_caveat_lines([("problem while loading", str(p)) for p in getattr(d, "problems", None) or []], console,
                       more="more problem(s)")
