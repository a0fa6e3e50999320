"""`commscope doctor`'s terminal output: the verdict line, the evidence table, for a straggler the collective
instances it is based on, the Flight Recorder's second opinion, the faults the run was started with and the
loader's problems (the first few, each whole, as `report` prints them).

Renders a `commscope.analyze.diagnosis.Diagnosis` as it is. Its strings hold the user's labels and paths:
they reach rich as Text, never as markup (rank lists like [0, 1], a label "[/a]" or "enc:x:proj" print as
they are), and the evidence tables give way in their text columns, never in a number's.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reports.report_terminal import print_caveat_lines

COLOURS = {"ok": "green", "insufficient": "yellow", "interrupted": "yellow"}
# the straggler's instances: the columns a reader checks against the timeline
INSTANCE_KEYS = ["step", "sequence", "label", "op", "last_rank", "waiting_caused_ms", "mean_wait_ms",
                 "arrival_skew_ms", "launch_skew_ms", "launched_last_rank"]
SHOWN_INSTANCES = 10
# column headers where the key alone would mislead: the share is of the run's median step, not of the
# step's own time beside it
HEADERS = {"pct_of_median_step": "% of median step"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(v) -> str | Text:
    if v is None:
        return ""
    return f"{v:.2f}" if isinstance(v, float) else Text(str(v))


TEXT_ROOM = 20  # the width a text column (a label, an op) is given before the numbers' headers fold


def _folded(header: str, width: int) -> str:
    """`header` on lines of at most `width` characters, broken after an underscore where one is near
    ("waiting_caused_ms" at 7: "waiting", "_caused", "_ms")."""
    lines = [""]
    for part in header.replace("_", "\0_").split("\0"):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
        while len(lines[-1]) > width:  # a word longer than the column: cut where it must
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return "\n".join(lines)


def _table(title: str, rows: list[dict], keys: list[str] | None = None, width: int | None = None) -> Table:
    """`rows` under `keys`, fitted to `width` columns. rich narrows only the columns that may wrap, so a
    column of numbers is no_wrap and keeps its values' width, its header folded to that width when the
    table would not fit with TEXT_ROOM for each text column; the text columns (labels, ops, rank lists)
    fold and are never cut."""
    keys = keys or list(dict.fromkeys(k for e in rows for k in e))
    cells = [[_cell(e.get(k)) for k in keys] for e in rows]
    numbers = [all(_number(e.get(k)) or e.get(k) is None for e in rows) for k in keys]
    heads = [HEADERS.get(k, k) for k in keys]
    values = [max([len(str(r[i])) for r in cells] + [1]) for i in range(len(keys))]
    needed = 1 + sum(3 + (max(len(h), v) if number else min(max(len(h), v), TEXT_ROOM))  # padding 2, a border
                     for h, v, number in zip(heads, values, numbers))
    t = Table(title=Text(title), show_lines=False)
    for h, v, number in zip(heads, values, numbers):
        if number and width is not None and needed > width:
            h = _folded(h, max(v, 5))
        t.add_column(h, overflow="fold", no_wrap=number, justify="right" if number else "left")
    for row in cells:
        t.add_row(*row)
    return t


def print_doctor_verdict(d, console: Console) -> None:
    console.print(Text.assemble((d.verdict, f"bold {COLOURS.get(d.verdict, 'red')}"), "  ", d.summary),
                  highlight=False)
    if d.evidence:
        title = ("waiting caused per judged step (ms; % of the run's median step, step_ms: the step's own)"
                 if d.verdict == "straggler" else
                 "evidence (times: ns on the run's common time axis)")
        console.print(_table(title, d.evidence, width=console.width))
    det = d.details or {}
    if d.verdict == "straggler" and det.get("instances"):
        inst = det["instances"]
        console.print(_table(f"collective instances it is based on (the {min(len(inst), SHOWN_INSTANCES)} that "
                             f"caused most waiting of {len(inst)}; launch_skew: host side, for reference)",
                             sorted(inst, key=lambda i: -i["waiting_caused_ms"])[:SHOWN_INSTANCES], INSTANCE_KEYS,
                             console.width))
        if det.get("also_late"):
            console.print(Text("also over the bar, with less than half the worst's waiting: " + ", ".join(
                f"rank {r} ({ms:.1f} ms)" for r, ms in det["also_late"].items())), highlight=False)
    if d.second_opinion:
        console.print(Text(f"Flight Recorder: {d.second_opinion.get('verdict')} "
                           f"{d.second_opinion.get('summary', '')}"), highlight=False)
    if d.injected:
        console.print(Text(f"(this run was started with --inject {', '.join(d.injected)}; not used for the "
                           "verdict)"), highlight=False)
    print_caveat_lines([("problem while loading", str(p)) for p in getattr(d, "problems", None) or []], console,
                       more="more problem(s)")
