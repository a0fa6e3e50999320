"""`commscope doctor`'s terminal output: the verdict line, the evidence table, the Flight Recorder's
second opinion and the faults the run was started with.

Renders a `commscope.analyze.doctor.Diagnosis` as it is; every string in it comes from the analysis and is
escaped, so rank lists like [0, 1] are never read as rich markup.
"""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def print_doctor_verdict(d, console: Console) -> None:
    colour = "green" if d.verdict == "ok" else "red"
    console.print(f"[bold {colour}]{d.verdict}[/]  {escape(d.summary)}", highlight=False)
    if d.evidence:
        keys = list(dict.fromkeys(k for e in d.evidence for k in e))
        t = Table(title="evidence (times: ns on the run's common time axis)", show_lines=False)
        for k in keys:
            t.add_column(k, overflow="fold")
        for e in d.evidence:
            t.add_row(*("" if e.get(k) is None else escape(str(e.get(k))) for k in keys))
        console.print(t)
    if d.second_opinion:
        console.print(escape(f"Flight Recorder: {d.second_opinion.get('verdict')} "
                             f"{d.second_opinion.get('summary', '')}"), highlight=False)
    if d.injected:
        console.print(escape(f"(this run was started with --inject {', '.join(d.injected)}; not used for the "
                             "verdict)"), highlight=False)
