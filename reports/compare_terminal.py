"""`commscope compare`'s stdout: the speedrun record's A/B table (rich or markdown), the raw samples,
the per-label deltas with their confidence intervals, and the `--json` document.

Renders the frames of commscope.compare (group statistics) and commscope.analyze.compare_labels
(per-label exposed communication) as they are; every number comes from those frames, this module only
formats (4 decimals in the table, "–" where a statistic is undefined: σ of one run, the baseline's own
Time p, a test without spread; null in --json).
"""
from __future__ import annotations

import math
import sys

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from commscope.analyze.compare import DEFAULT_TARGET_LOSS
from commscope.util.text import escape_controls, printable
from reports.console import plain_console
from reports.tables import counted
from reports.widths_terminal import Col, fit, print_fitted

COLUMNS = [  # (frame column, header) in the record's order
    ("runs", "Runs"), ("time_mean", "Time μ"), ("time_std", "Time σ"), ("time_delta", "Time +/-"),
    ("time_p", "Time p"), ("loss_mean", "Loss μ"), ("loss_std", "Loss σ"), ("loss_delta", "Loss +/-"),
    ("loss_p", "p"),
]


UNDEFINED = "–"  # an undefined statistic in the table (and the label deltas' missing CI)
LABEL_DELTAS_CAPTION = ("Per label, ms per step (mean over ranks; a run's first step, its profiler window and the "
                        "step after it, the trace export, left out): a label's exposed communication, with the "
                        "waits queued behind it (attributed); (step time): the step; (step boundary): host time "
                        "at the step's start; '<label> (start − backward end)': where its collectives start "
                        "(docs/compare.md).")


def _fmt(v, column: str = "") -> str:
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return str(v)
    v = float(v)
    if math.isnan(v):
        return UNDEFINED
    if column.endswith("_p") and 0 <= v < 0.00005:  # a p-value that 4 decimals would print as 0
        return "<0.0001"
    return f"{v:.4f}"


def comparison_markdown(table: pd.DataFrame) -> str:
    """The README-ready markdown table of compare_groups()' frame, in the records' columns, each cell as the
    terminal table prints it (`_fmt`: a p below 0.00005 is <0.0001, never 0.0000, which would claim a
    p of exactly zero in a README)."""
    head = "| | " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    rows = ["| " + r["name"] + " | " + " | ".join(_fmt(r[c], c) for c, _ in COLUMNS) + " |"
            for r in table.to_dict("records")]
    return "\n".join([head, sep, *rows])


def raw_samples_text(groups) -> str:
    """Each group's times and losses, as the record lists them under its table."""
    lines = []
    for g in groups:
        lines.append(f"{g.name} times (s): {[round(t, 4) for t in g.times]}")
        lines.append(f"{g.name} losses: {g.losses}")
    return "\n".join(lines)


def comparison_columns(table: pd.DataFrame) -> list[Col]:
    """The A/B table's columns for the terminal (reports.widths_terminal): the group's name and the means
    always stay; at a narrow width the σs go first, then the loss columns' deltas and p."""
    drops = {"runs": 0, "time_mean": 0, "time_std": 3, "time_delta": 1, "time_p": 1, "loss_mean": 0,
             "loss_std": 4, "loss_delta": 2, "loss_p": 2}
    records = table.to_dict("records")
    # a group's name is its folder's: it wraps within its column (never markup), the numbers keep their width
    return [Col("", [Text(r["name"]) for r in records], drop=0, name="group")] + [
        Col(h, [_fmt(r[c], c) for r in records], numbers=True, drop=drops[c]) for c, h in COLUMNS]


COMPARISON_TITLE = "Time in s; p: one-sided t-test of losses < {}; Time p: Welch, candidate faster"


def comparison_title(target_loss: float) -> str:
    """The table's title; the default target is the speedrun's, which says nothing of another model's loss."""
    said = f"{target_loss} (the speedrun's target; --target-loss sets yours)" if target_loss == DEFAULT_TARGET_LOSS \
        else f"{target_loss}"
    return COMPARISON_TITLE.format(said)


def comparison_table(table: pd.DataFrame, target_loss: float, width: int = 200) -> Table | None:
    """The A/B table fitted to `width` (None where even its essential columns do not fit)."""
    return fit(comparison_columns(table), width, title=comparison_title(target_loss))[0]


# "CI", not "95% CI": the rows' levels differ (compare_labels; a note under the table says which)
LABEL_HEADS = ["candidate", "label", "base ms", "cand ms", "Δ ms", "CI", "over", "verdict"]


def _label_rows(table: pd.DataFrame) -> list[list[str]]:
    return [[r["candidate"], r["label"], f"{r['base_ms']:.3f}", f"{r['cand_ms']:.3f}", f"{r['delta_ms']:+.3f}",
             UNDEFINED if math.isnan(r["ci_low"]) else f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
             counted(r["n_cand"], r["unit"].removesuffix("s")), r["verdict"]]  # unit: "runs"
            for r in table.to_dict("records")]


def label_deltas_columns(table: pd.DataFrame) -> list[Col]:
    """compare_labels()' frame as terminal columns: a label such as "attn_gate_bank (start − backward end)"
    wraps between its words; the CI and the run count go first at a narrow width, the candidate's name
    (one per row, often the same) before them."""
    rows = _label_rows(table)
    numbers = {"base ms", "cand ms", "Δ ms", "CI"}
    drops = {"candidate": 5 if table["candidate"].nunique() == 1 else 0, "CI": 2, "over": 3}
    return [Col(h, [Text(r[i]) if h in ("candidate", "label") else r[i] for r in rows], numbers=h in numbers,
                drop=drops.get(h, 0)) for i, h in enumerate(LABEL_HEADS)]


def label_deltas_text(table: pd.DataFrame, markdown: bool = False) -> str:
    """compare_labels()' frame as aligned plain text (or markdown): one row per (candidate, label)."""
    head, body = LABEL_HEADS, _label_rows(table)
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                          *("| " + " | ".join(row) + " |" for row in body)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [head, *body])


def comparison_json(groups, table, target_loss, fail_if_slower, slower, labels, labels_error=None,
                    warnings=()) -> dict:
    """The --json document: every number of the table, the samples, step counts and skipped runs of each
    group, the per-label rows (or why they are missing) and `warnings`, why the groups may not compare like
    for like (commscope.analyze.compare.comparability_warnings)."""
    out = {
        "target_loss": target_loss,
        "time_unit": "s",
        "time_definition": {"log": "final train_time", "run": "sum(step_times_ms) / 1000"},
        "groups": [],
        "fail_if_slower": fail_if_slower,
        "slower": slower,
        "warnings": list(warnings),
    }
    for g, row in zip(groups, table.to_dict("records")):
        out["groups"].append({
            **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()},
            "path": str(g.path), "times": g.times, "losses": g.losses, "steps": [r.steps for r in g.runs],
            "run_paths": [str(r.path) for r in g.runs],
            "skipped": [{"path": str(p), "reason": why} for p, why in g.skipped],
        })
    if labels is not None:
        out["labels"] = labels.to_dict("records")
        out["labels_notes"] = list(labels.attrs.get("notes") or [])  # the steps each run gave no sample
        out["labels_ci"] = labels.attrs.get("ci")
    if labels_error is not None:
        out["labels_error"] = labels_error
    return out


def print_comparison(groups, table: pd.DataFrame, target_loss: float, markdown: bool, labels: pd.DataFrame | None,
                     labels_error: str | None, slower: list[str], fail_if_slower: float | None,
                     warnings=(), console: Console | None = None) -> None:
    """The terminal output: table, raw samples, skipped runs, per-label deltas, slower candidates; the
    warnings (groups that may not compare like for like) on stderr, so a --markdown table stays clean.
    Everything but the markdown (which a README takes as it is) is wrapped to the console's width."""
    console = console or plain_console()

    def line(text: str) -> None:
        console.print(Text(text), highlight=False, overflow="fold")

    if markdown:
        print(comparison_markdown(table))
    else:
        print_fitted(console, comparison_columns(table), title=comparison_title(target_loss))
    console.print()
    for text in raw_samples_text(groups).splitlines():
        line(text)
    for g in groups:
        for p, why in g.skipped:
            line(f"skipped {g.name}/{p.name}: {why}")
    if labels is not None and not labels.empty:
        console.print()
        if markdown:
            print(LABEL_DELTAS_CAPTION)
            print(label_deltas_text(labels, markdown=True))
        else:
            print_fitted(console, label_deltas_columns(labels), title=LABEL_DELTAS_CAPTION)
        for note in [labels.attrs.get("ci"), *(labels.attrs.get("notes") or [])]:
            if note:
                line(f"note: {note}")
    if labels_error is not None:
        line(f"per-label comparison skipped: {labels_error}")
    for name in slower:
        line(f"{name} is slower than {groups[0].name} (Welch one-sided p < {fail_if_slower})")
    for w in warnings:
        print(escape_controls(printable(f"warning: {w}")), file=sys.stderr)  # run names are the user's
