"""`commscope doctor`'s terminal output: the verdict line, the evidence table, for a straggler the collective
instances it is based on, the Flight Recorder's second opinion, the faults the run was started with and the
loader's problems (the first few, each whole, as `report` prints them).

Renders a `commscope.analyze.diagnosis.Diagnosis` as it is. Its strings hold the user's labels and paths:
they reach rich as Text, never as markup (rank lists like [0, 1], a label "[/a]" or "enc:x:proj" print as
they are). The tables are fitted by reports.widths_terminal: headers in words with units, numbers whole
and with thousands separators, labels and ops never narrower than their longest word; the least useful
columns are left out (and named) at narrow widths, and rows become "key: value" lines where even the
essential columns do not fit. Times on the run's common axis (`*_ns`, 19-digit epoch values) mean nothing
to a reader without the other end of the interval: the evidence shows them as ms since its earliest time,
in the page's tables (diagnosis.evidence_tables: a hang's culprits apart from the ranks waiting), and
--json keeps the ns.
"""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from rich.console import Console
from rich.text import Text

from commscope.analyze.diagnosis import evidence_tables
from reports.report_terminal import print_outcome_and_problems
from reports.widths_terminal import Col, print_fitted

COLOURS = {"ok": "green", "insufficient": "yellow", "interrupted": "yellow"}
# the straggler's instances: the columns a reader checks against the timeline
INSTANCE_KEYS = ["step", "sequence", "label", "op", "last_rank", "waiting_caused_ms", "mean_wait_ms",
                 "arrival_skew_ms", "launch_skew_ms", "launched_last_rank"]
SHOWN_INSTANCES = 10
# key: (header, drop). drop 0: never left out; higher: left out first when the terminal is narrow. The
# share is of the run's median step, not of the step's time beside it (that step's median over the ranks),
# hence its header.
COLUMNS = {
    "rank": ("rank", 0), "step": ("step", 0), "instances": ("collectives", 2),
    "waiting_caused_ms": ("waiting caused (ms)", 0), "mean_wait_ms": ("mean wait (ms)", 1),
    "pct_of_median_step": ("% of median step", 2), "step_ms": ("step time (ms)", 3),
    "sequence": ("seq", 2), "label": ("label", 0), "op": ("op", 1), "last_rank": ("last rank", 2),
    "arrival_skew_ms": ("arrival skew (ms)", 3), "launch_skew_ms": ("launch skew (ms)", 4),
    "launched_last_rank": ("launched last", 4), "last_finished_step": ("last finished step", 0),
    "status": ("status", 0), "role": ("role", 1), "launched": ("launched", 0), "finished": ("finished", 1),
    "source": ("source", 3), "last_launched_seq": ("last launched seq", 2),
    "last_launched_label": ("last launched label", 1), "bytes": ("bytes", 0), "dtype": ("dtype", 2),
    "records": ("records", 1), "why": ("why", 0),
}
# numbers that name something (a rank, a step): no thousands separator, which would read as a rank list
IDS = {"rank", "step", "sequence", "last_rank", "launched_last_rank", "last_finished_step", "last_launched_seq"}
# counts: a whole float (a frame's float64 bytes) prints as the integer it is, 393,216 not 393,216.0
COUNTS = {"bytes", "records", "instances"}
# free text that may run to several lines (an exception's message): printed under the table, whole
BELOW = ("error",)
MISSING = "–"
# what a null says where it is an answer, not an unknown: a rank that finished no step (its JSON has null,
# never a sentinel step such as -1)
NULL_WORDS = {"last_finished_step": "none"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def number_text(v, key: str = "") -> str:
    """A figure as the doctor prints it: ids as they are, other integers with thousands separators, ms and
    % with one decimal as the verdict's prose has them (three where that would print a small value as 0)."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and key in IDS | COUNTS):
        return str(int(v)) if key in IDS else f"{int(v):,}"
    if v != v:  # NaN
        return MISSING
    return f"{v:,.1f}" if v == 0 or abs(v) >= 1 else f"{v:.3f}"


def _cell(v, key: str) -> str:
    if v is None or v is pd.NA:  # pd.NA: a missing value of a nullable integer column (bytes)
        return NULL_WORDS.get(key, MISSING)
    if isinstance(v, bool) or _number(v):
        return number_text(v, key)
    return " ".join(str(v).split()) if key in ("why", "status") else str(v)


def _shown_keys(rows: list[dict], keys: list[str] | None) -> list[str]:
    keys = keys or list(dict.fromkeys(k for e in rows for k in e))
    return [k for k in keys if not k.endswith("_ns") and k not in BELOW and
            any(e.get(k) is not None or (k in NULL_WORDS and k in e) for e in rows)]


def _columns(rows: list[dict], keys: list[str] | None = None) -> list[Col]:
    cols = []
    for k in _shown_keys(rows, keys):
        head, drop = COLUMNS.get(k, (k.replace("_", " ").removesuffix(" ms") + (" (ms)" if k.endswith("_ms") else ""), 2))
        cells = [_cell(e.get(k), k) for e in rows]
        numbers = all(_number(e.get(k)) or e.get(k) is None for e in rows)
        cols.append(Col(head, cells, numbers=numbers, drop=drop, whole=k == "op"))
    return cols


def _instances_caption(left_out: list[str]) -> str:
    """What the instances' columns mean, for those shown."""
    host = [h for h in ("launch skew", "launched last") if not any(x.startswith(h) for x in left_out)]
    return "last rank: the last to arrive" + (f"; {' and '.join(host)}: host side, for reference" if host else "") + "."


def _verdict_line(d) -> Text:
    """The verdict word once, in its colour: the summary already starts with it ("straggler: rank 1 …")."""
    style = f"bold {COLOURS.get(d.verdict, 'red')}"
    head = f"{d.verdict}:"
    if d.summary.startswith(head):
        return Text.assemble((head, style), d.summary[len(head):])
    return Text.assemble((d.verdict, style), "  ", d.summary)


def print_doctor_verdict(d, console: Console) -> None:
    console.print(_verdict_line(d), highlight=False)
    for other in getattr(d, "also", None) or []:  # a second fault beside the verdict (a straggler beside a desync)
        console.print(Text.assemble(("also ", "bold"), _verdict_line(SimpleNamespace(**other))), highlight=False)
    if d.evidence:
        if d.verdict == "straggler":
            print_fitted(console, _columns(d.evidence), title="Waiting caused per judged step",
                         caption="Waiting in ms per waiting rank; % of median step: of the run's median step; "
                                 "step time: that step's median over the ranks.")
        else:
            # the page's tables (doctor_section): rows of the same fields together, times in ms since the
            # earliest, so the launches' and the watchdog's times read as numbers, not epoch nanoseconds
            groups, origin = evidence_tables(d.evidence)
            for i, rows in enumerate(groups):
                last = i == len(groups) - 1
                print_fitted(console, _columns(rows), title="Evidence" if i == 0 else None,
                             caption="times (ms): since the earliest time in this evidence; doctor --json gives "
                                     "them as ns on the trace's clock" if last and origin is not None else None)
        for e in d.evidence:
            for k in BELOW:
                if e.get(k):
                    console.print(Text.assemble((f"rank {e.get('rank')}'s {k}:", "bold"), " ", str(e[k])),
                                  highlight=False, overflow="fold")
    det = d.details or {}
    if d.verdict == "straggler" and det.get("instances"):
        inst = det["instances"]
        shown = sorted(inst, key=lambda i: -i["waiting_caused_ms"])[:SHOWN_INSTANCES]
        print_fitted(console, _columns(shown, INSTANCE_KEYS),
                     title=f"The {len(shown)} collective instances that caused the most waiting (of {len(inst)})",
                     caption=_instances_caption)
        if det.get("also_late"):
            console.print(Text("also over the bar, with less than half the worst's waiting: " + ", ".join(
                f"rank {r} ({ms:,.1f} ms)" for r, ms in det["also_late"].items())), highlight=False)
    if d.second_opinion:
        console.print(Text(f"Flight Recorder: {d.second_opinion.get('verdict')} "
                           f"{d.second_opinion.get('summary', '')}"), highlight=False)
    if d.injected:
        console.print(Text(f"(this run was started with --inject {', '.join(d.injected)}; not used for the "
                           "verdict)"), highlight=False)
    print_outcome_and_problems(getattr(d, "run_reports", None) or [], getattr(d, "problems", None) or [], console)
