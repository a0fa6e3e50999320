"""`commscope report`'s terminal output: the doctor's verdict line, top exposed labels (and the labels
their queueing waits behind), communication overlap per rank (on GPU traces HTA's rule beside the
device-only number; without device kernels the recorded spans, and why the other two do not apply), host
time at step boundaries, and what the input
cannot show (the document's `problems` and `notes`, the first few, each whole), and a note when HTA's
analyses were asked for but HTA is not installed.

Every table is fitted to the terminal's width (reports.widths_terminal.print_fitted): no number or key
word is cut, and a column left out for width is named under its table.

Why: the first answer (which collective is exposed, where) should not need a browser. Rendered from the
same summarize() document as the HTML and --json, so all three agree. Writes to the given Console (the
command uses stderr when stdout is reserved, e.g. never mixes with --json).
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from commscope.util.text import escape_controls
from commscope.analyze.report_overview import cause, queued_behind
from commscope.analyze.summary import (COMM_OVERLAP_NAMES, comm_overlap_note, comm_overlap_rows, hta_note,
                                       undefined_overlap_note)
from reports.tables import bandwidth, counted, fmt
from reports.widths_terminal import Col, print_fitted


def pct(v) -> str:
    """Percentages with one decimal, so a column lines up (fmt drops the decimals of 91.0)."""
    return fmt(v) if v is None else f"{float(v):.1f}"


def queued_pct(label: dict) -> str:
    """`queued_ms` as a share of `exposed_ms` (both per-rank means over the same ranks); "–" (the dash
    every unknown cell shows) when the document has no queueing split or nothing is exposed."""
    queued, exposed = label.get("queued_ms"), label.get("exposed_ms")
    if queued is None or not exposed:
        return "–"
    return pct(100.0 * min(max(float(queued), 0.0), float(exposed)) / float(exposed))


def queued_behind_line(ranked: list[tuple[str, dict]]) -> str | None:
    """Which labels the rows' `queued %` waits behind (their `queued_behind_ms`, through
    report_overview.queued_behind, the page's bullets' reading): the cause of the wait, which the share
    alone does not name. None when no row queued."""
    parts = []
    for lab, v in ranked:
        q = queued_behind(v.get("queued_behind_ms"))
        if q is None:
            continue
        named = ", ".join(f"{k} {fmt(x)}" for k, x in q.named)
        more = f", {counted(q.more, 'more label')} {fmt(q.more_ms)}" if q.more else ""
        parts.append(f"{lab} behind {named}{more}")
    return "queued behind (ms per rank): " + "; ".join(parts) if parts else None


def styled_head(head: str, text: str, style: str = "bold") -> Text:
    """`head` in `style`, then `text` as the characters it holds: a Text, never markup, since `text` holds
    labels, paths and error messages (a "[/a]" in them would otherwise end the output with MarkupError)."""
    return Text.assemble((head, style), " ", text)


CAVEATS_SHOWN = 6  # problems and notes printed under the tables; the rest are counted


def print_caveat_lines(items: list[tuple[str, str]], console: Console, more: str = "more",
                       where: str = "see --json") -> None:
    """(kind, text) caveats, the first CAVEATS_SHOWN of them, then how many more there are and `where`
    they all are (--json for report and doctor; export's trace holds them). Each is printed whole, wrapped
    at word boundaries: a caveat cut mid-sentence loses the part that says what to do about it. `doctor`
    and `export` print their loading problems with it too."""
    for kind, text in items[:CAVEATS_SHOWN]:
        # one line each: a newline in a label or path it names is written as an escape, not a line break
        console.print(styled_head(f"{kind}:", escape_controls(text)), highlight=False, overflow="fold")
    if len(items) > CAVEATS_SHOWN:
        console.print(f"… {len(items) - CAVEATS_SHOWN} {more}, {where}", highlight=False)


def print_outcome_and_problems(run_reports: list, problems: list, console: Console,
                               where: str = "see --json") -> None:
    """`doctor`'s and `export`'s caveats: the ranks that did not complete ("the run reports: …"), then
    what the loader could not read ("problem while loading: …"), through print_caveat_lines."""
    print_caveat_lines([("the run reports", str(p)) for p in run_reports]
                       + [("problem while loading", str(p)) for p in problems], console,
                       more="more line(s)" if run_reports else "more problem(s)", where=where)


def print_caveats(summary: dict, console: Console) -> None:
    """What the input cannot show: the document's `run_reports` (ranks that did not complete), its
    `problems` (the loader's), then its `notes` (the
    analysis'), through print_caveat_lines; a missing HTA after them, outside the cap."""
    items = [("the run reports", str(p)) for p in summary.get("run_reports") or []]
    items += [("problem while loading", str(p)) for p in summary.get("problems") or []]
    items += [("note", str(n)) for n in summary.get("notes") or []]
    print_caveat_lines(items, console, more=_more(items[CAVEATS_SHOWN:]))
    hta = hta_note(summary)  # outside the cap: the one caveat about this machine, not the input
    if hta:
        console.print(styled_head("note:", hta), highlight=False, overflow="fold")


def _more(hidden: list[tuple[str, str]]) -> str:
    """What the caveats left out are, by kind ("more: 4 problem(s), 2 note(s)"): the same count `doctor`
    and `export` print for their problems, where those are all they list."""
    names = {"the run reports": "run report line(s)", "problem while loading": "problem(s)", "note": "note(s)"}
    counts = {names[k]: sum(1 for kind, _ in hidden if kind == k) for k in names}
    return "more: " + ", ".join(f"{n} {name}" for name, n in counts.items() if n)


BOUNDARY_PCT = 2.0  # host time at step boundaries worth a line in the terminal summary (% of wall time)


def print_doctor_line(diagnosis, console: Console) -> None:
    """The doctor's one-line verdict above the tables (commscope.analyze.diagnosis.Diagnosis.summary)."""
    console.print(styled_head("doctor:", diagnosis.summary), highlight=False)


TERMINAL_RANKS = 16  # above, the per-rank overlap table lists the representative ranks only


def print_report_summary(summary: dict, console: Console, top: int = 8) -> None:
    """The terminal report: the most exposed labels, overlap by rank, host time at step boundaries, then
    what the analyses could not conclude."""
    _print_top_labels(summary, console, top)
    _print_overlap_by_rank(summary, console)
    _print_step_boundaries(summary, console)
    print_caveats(summary, console)


def _print_top_labels(summary: dict, console: Console, top: int) -> None:
    labels = summary.get("labels") or {}
    ranked = sorted(labels.items(), key=lambda kv: -(kv[1].get("exposed_ms") or 0.0))[:top]
    # The ranking is by exposed time, which on run directories is mostly queueing behind earlier collectives
    # for small late labels: "queued %" says how much of each row is that rather than its own transfer; the
    # caption says which duration "mean ms" is (a device kernel, or launch to completion).
    # Each column is as wide as its longest number or word (reports.widths_terminal): at 80 columns rich
    # alone printed the label one letter per line, or left it out and cut the numbers ("768.6…"). Where
    # even that does not fit, the figures a reader needs least here go first (busbw, then hidden %, then
    # queued %), named in the caption; the label and the exposed time always stay.
    rows = [(Text(lab), fmt(v.get("op")), fmt(v.get("count")), fmt(v.get("exposed_ms")), queued_pct(v),
             fmt(v.get("mean_ms")), pct(v.get("hidden_pct")), bandwidth(v.get("busbw_gbps"))) for lab, v in ranked]
    heads = [("label", False, 0), ("op", False, 1), ("calls", True, 2), ("exposed ms/rank", True, 0),
             ("queued %", True, 3), ("mean ms", True, 2), ("hidden %", True, 4), ("busbw GB/s", True, 5)]
    cols = [Col(h, [r[i] for r in rows], numbers=numbers, drop=drop, name=h.removesuffix(" GB/s"),
                whole=h == "op")
            for i, (h, numbers, drop) in enumerate(heads)]

    def caption(left_out: list[str]) -> str:  # the columns shown, explained
        notes = [f"mean ms: {summary.get('duration_basis') or 'no durations'}"]
        if "queued %" not in left_out:
            notes.append("queued %: share of the exposed time spent behind earlier collectives of its process "
                         "group (the rest is its own)")
        if "hidden %" not in left_out:
            notes.append("hidden %: share of the duration compute hid")
        return "; ".join(notes) + "."

    print_fitted(console, cols, edge=False, caption=caption,
                 title=f"Top exposed collectives ({counted(len(labels), 'label')}, {counted(summary.get('ranks'), 'rank')})")
    behind = queued_behind_line(ranked)
    if behind:
        console.print(behind, highlight=False, markup=False, overflow="fold")
    caused = cause(summary)  # the label the top of the list waits for, when it is not the top itself
    if caused is not None and ranked:
        console.print(Text(f"{ranked[0][0]}: {caused.why[0]}"), highlight=False)


def _print_overlap_by_rank(summary: dict, console: Console) -> None:
    """Communication overlap per rank: every rank, or beyond TERMINAL_RANKS the representative ones."""
    rows = comm_overlap_rows(summary)
    shown = rows
    if len(rows) > TERMINAL_RANKS:  # a thousand rows would bury the rest: the ranks to look at first
        reps = {str(x["rank"]) for x in summary.get("representative_ranks") or []}
        shown = [row for row in rows if str(row["rank"]) in reps]
    if rows:
        # every column a number: the rank and each overlap kept whole at any width (reports.widths_terminal)
        keys = [k for k in rows[0] if k != "rank"]
        cols = [Col("rank", [str(row["rank"]) for row in shown], numbers=True)]
        cols += [Col(f"{COMM_OVERLAP_NAMES[k + '_by_rank']} %", [pct(row[k]) for row in shown], numbers=True)
                 for k in keys]
        print_fitted(console, cols, title="Communication overlap by rank",
                     caption=None if shown is rows else (f"the {len(shown)} representative ranks of {len(rows)}; "
                                                         "every rank: --json and the HTML page"))
        console.print(comm_overlap_note(summary), highlight=False)  # as wide as the console, not the table
        note = undefined_overlap_note(summary)
        if note:
            console.print(note)


def _print_step_boundaries(summary: dict, console: Console) -> None:
    """The ranks whose host time between steps is at least BOUNDARY_PCT of wall time, the rest counted."""
    every = summary.get("step_boundaries") or []
    bounds = [b for b in every if (b.get("host_pct") or 0) >= BOUNDARY_PCT]
    many = len(bounds) > TERMINAL_RANKS
    # the ranks left out are counted in the caption: a table of 3 ranks must not read as "3 ranks measured"
    unknown = sum(1 for b in every if b.get("host_pct") is None)
    small = len(every) - len(bounds) - unknown
    hidden = ([f"{counted(small, 'rank')} under {BOUNDARY_PCT:g} % of wall time"] if small else []) + \
             ([f"{counted(unknown, 'rank')} without a step period"] if unknown else [])
    bounds = sorted(bounds, key=lambda x: -x["host_pct"])[:TERMINAL_RANKS] if many else bounds
    if bounds:
        run = summary.get("source") in (None, "run")  # a profiler trace's gaps are its device's idle
        # where even the numbers' widths do not fit, the start delay goes first, then the largest gap
        cols = [Col("rank", [str(x["rank"]) for x in bounds], numbers=True),
                Col("host % of wall" if run else "idle % of period",
                    [pct(x["host_pct"]) for x in bounds], numbers=True),
                Col("gap median ms", [fmt(x["gap_median_ms"]) for x in bounds], numbers=True),
                Col("gap max ms", [fmt(x["gap_max_ms"]) for x in bounds], numbers=True, drop=1),
                Col("start delay median ms", [fmt(x["start_delay_median_ms"]) for x in bounds], numbers=True,
                    drop=2)]
        if not run:  # a profiler trace's device windows start with the step's first device work: no delay
            cols = cols[:-1]

        def boundary_caption(left_out: list[str]) -> str:  # the columns shown, explained
            return ((f"the {TERMINAL_RANKS} ranks with the most; " if many else "") +
                    (f"not shown: {', '.join(hidden)} (every rank: --json); " if hidden else "") +
                    ("gap: one step's end to the next one's start" +
                     ("" if "start delay median ms" in left_out else "; start delay: a step's start to its first "
                      "compute") + ". After a step-end sync the device has nothing queued there." if run else
                     "gap: the device idle between one step's last device work and the next one's first, "
                     "waiting for the host to launch it."))

        print_fitted(console, cols, title="Host time at step boundaries" if run else
                     "Device idle at step boundaries (waiting for the host)", caption=boundary_caption)
