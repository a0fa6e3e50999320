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

import orjson
import pandas as pd
from rich.table import Table
from rich.text import Text

from commscope.analyze.compare_labels import CI_LEVEL
from reports.console import at_least
from reports.tables import counted

COLUMNS = [  # (frame column, header) in the record's order
    ("runs", "Runs"), ("time_mean", "Time μ"), ("time_std", "Time σ"), ("time_delta", "Time +/-"),
    ("time_p", "Time p"), ("loss_mean", "Loss μ"), ("loss_std", "Loss σ"), ("loss_delta", "Loss +/-"),
    ("loss_p", "p"),
]


UNDEFINED = "–"  # an undefined statistic in the table (and the label deltas' missing CI)
LABEL_DELTAS_CAPTION = ("Per label, ms per step (mean over ranks, a run's first step left out): a label's exposed "
                        "communication; (step time): the step; (step boundary): host time at the step's start, "
                        "outside a profiler window and the step after it (the profiler's own time); "
                        "'<label> (start − backward end)': where its collectives start (docs/compare.md).")


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
    """The README-ready markdown table of compare_groups()' frame, in the records' own format (a tiny p is
    0.0000 there, as the published tables print it; the terminal table says <0.0001)."""
    head = "| | " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    rows = ["| " + r["name"] + " | " + " | ".join(_fmt(r[c]) for c, _ in COLUMNS) + " |"
            for r in table.to_dict("records")]
    return "\n".join([head, sep, *rows])


def raw_samples_text(groups) -> str:
    """Each group's times and losses, as the record lists them under its table."""
    lines = []
    for g in groups:
        lines.append(f"{g.name} times (s): {[round(t, 4) for t in g.times]}")
        lines.append(f"{g.name} losses: {g.losses}")
    return "\n".join(lines)


def comparison_table(table: pd.DataFrame, target_loss: float) -> Table:
    t = Table(title=f"Time in s; p: one-sided t-test of losses < {target_loss}; Time p: Welch, candidate faster")
    # a group's name is its folder's: it folds within its column (never markup), the numbers keep their width
    t.add_column("", overflow="fold")
    for _, h in COLUMNS:
        t.add_column(h, justify="right", no_wrap=True)
    for r in table.to_dict("records"):
        t.add_row(Text(r["name"]), *(_fmt(r[c], c) for c, _ in COLUMNS))
    return t


def label_deltas_text(table: pd.DataFrame, markdown: bool = False) -> str:
    """compare_labels()' frame as aligned plain text (or markdown): one row per (candidate, label)."""
    head = ["candidate", "label", "base ms", "cand ms", "Δ ms", f"{CI_LEVEL:.0%} CI", "over", "verdict"]
    body = [[r["candidate"], r["label"], f"{r['base_ms']:.3f}", f"{r['cand_ms']:.3f}", f"{r['delta_ms']:+.3f}",
             UNDEFINED if math.isnan(r["ci_low"]) else f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
             counted(r["n_cand"], r["unit"].removesuffix("s")), r["verdict"]]  # unit: "runs"
            for r in table.to_dict("records")]
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                          *("| " + " | ".join(row) + " |" for row in body)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [head, *body])


def comparison_json(groups, table, target_loss, fail_if_slower, slower, labels, labels_error=None,
                    warnings=()) -> bytes:
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
    if labels_error is not None:
        out["labels_error"] = labels_error
    return orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def print_comparison(groups, table: pd.DataFrame, target_loss: float, markdown: bool, labels: pd.DataFrame | None,
                     labels_error: str | None, slower: list[str], fail_if_slower: float | None,
                     warnings=()) -> None:
    """The terminal output: table, raw samples, skipped runs, per-label deltas, slower candidates; the
    warnings (groups that may not compare like for like) on stderr, so a --markdown table stays clean."""
    console = at_least(120)
    if markdown:
        print(comparison_markdown(table))
    else:
        console.print(comparison_table(table, target_loss))
    print()
    print(raw_samples_text(groups))
    for g in groups:
        for p, why in g.skipped:
            print(f"skipped {g.name}/{p.name}: {why}")
    if labels is not None and not labels.empty:
        print()
        print(LABEL_DELTAS_CAPTION)
        print(label_deltas_text(labels, markdown=markdown))
    if labels_error is not None:
        print(f"per-label comparison skipped: {labels_error}")
    for name in slower:
        print(f"{name} is slower than {groups[0].name} (Welch one-sided p < {fail_if_slower})")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
