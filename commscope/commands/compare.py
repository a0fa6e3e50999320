"""`commscope compare BASELINE CANDIDATE...`: the speedrun record's A/B table for groups of runs.

Thin rendering over commscope.analyze.compare (statistics) and commscope.compare_labels (per-label exposed
communication of commscope run dirs); every number comes from those frames, this module only formats.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import orjson
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from commscope.analyze.compare import DEFAULT_TARGET_LOSS, compare_groups, slower_candidates
from commscope.load.run_groups import Group, load_group
from commscope.errors import UserError

COLUMNS = [  # (frame column, header) in the record's order
    ("runs", "Runs"), ("time_mean", "Time μ"), ("time_std", "Time σ"), ("time_delta", "Time +/-"),
    ("time_p", "Time p"), ("loss_mean", "Loss μ"), ("loss_std", "Loss σ"), ("loss_delta", "Loss +/-"),
    ("loss_p", "p"),
]


def _fmt(v) -> str:
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return str(v)
    v = float(v)
    return "NaN" if math.isnan(v) else f"{v:.4f}"


def render_markdown(table: pd.DataFrame) -> str:
    head = "| | " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    rows = ["| " + r["name"] + " | " + " | ".join(_fmt(r[c]) for c, _ in COLUMNS) + " |"
            for r in table.to_dict("records")]
    return "\n".join([head, sep, *rows])


def render_raw(groups: list[Group]) -> str:
    lines = []
    for g in groups:
        lines.append(f"{g.name} times (s): {[round(t, 4) for t in g.times]}")
        lines.append(f"{g.name} losses: {g.losses}")
    return "\n".join(lines)


def _rich_table(table: pd.DataFrame, target_loss: float) -> Table:
    t = Table(title=f"Time in s; p: one-sided t-test of losses < {target_loss}; Time p: Welch, candidate faster")
    t.add_column("")
    for _, h in COLUMNS:
        t.add_column(h, justify="right")
    for r in table.to_dict("records"):
        t.add_row(r["name"], *(_fmt(r[c]) for c, _ in COLUMNS))
    return t


def _json(groups, table, target_loss, fail_if_slower, slower, labels, labels_error=None) -> bytes:
    out = {
        "target_loss": target_loss,
        "time_unit": "s",
        "time_definition": {"log": "final train_time", "run": "sum(step_times_ms) / 1000"},
        "groups": [],
        "fail_if_slower": fail_if_slower,
        "slower": slower,
    }
    for g, row in zip(groups, table.to_dict("records")):
        out["groups"].append({
            **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()},
            "path": str(g.path), "times": g.times, "losses": g.losses,
            "run_paths": [str(r.path) for r in g.runs],
            "skipped": [{"path": str(p), "reason": why} for p, why in g.skipped],
        })
    if labels is not None:
        out["labels"] = labels
    if labels_error is not None:
        out["labels_error"] = labels_error
    return orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def compare_cmd(
    folders: list[Path] = typer.Argument(..., help="BASELINE then one or more CANDIDATE folders of runs or logs."),
    target_loss: float = typer.Option(DEFAULT_TARGET_LOSS, help="Loss target for the one-sample t-test."),
    markdown: bool = typer.Option(False, "--markdown", help="Print a README-ready markdown table."),
    as_json: bool = typer.Option(False, "--json", help="Print every number as JSON."),
    fail_if_slower: float = typer.Option(None, help="Exit 1 if a candidate is slower at this significance."),
    n_boot: int = typer.Option(2000, help="Bootstrap resamples for per-label confidence intervals."),
) -> None:
    """Compare groups of runs (commscope run dirs or modded-nanogpt logs) in the speedrun record's style."""
    if len(folders) < 2:
        raise UserError("compare needs a BASELINE and at least one CANDIDATE folder")
    if fail_if_slower is not None and not 0 < fail_if_slower < 1:
        raise UserError(f"--fail-if-slower must be a significance level in (0, 1), got {fail_if_slower}")
    groups = [load_group(f) for f in folders]
    table = compare_groups(groups, target_loss)
    slower = slower_candidates(table, fail_if_slower) if fail_if_slower is not None else []
    labels, labels_error = None, None
    if all(g.run_dirs for g in groups):
        from commscope.compare_labels import compare_labels  # needs the loader; logs never do
        try:
            labels = compare_labels([g.run_dirs for g in groups], [g.name for g in groups], n_boot=n_boot)
        except UserError as e:  # the table above stands on summary.json alone; say why labels are missing
            labels_error = str(e)

    if as_json:
        sys.stdout.write(_json(groups, table, target_loss, fail_if_slower, slower,
                               None if labels is None else labels.to_dict("records"), labels_error).decode() + "\n")
    else:
        console = Console(width=max(Console().width, 120))
        if markdown:
            print(render_markdown(table))
        else:
            console.print(_rich_table(table, target_loss))
        print()
        print(render_raw(groups))
        for g in groups:
            for p, why in g.skipped:
                print(f"skipped {g.name}/{p.name}: {why}")
        if labels is not None and not labels.empty:
            from commscope.compare_labels import render_labels
            print()
            print(render_labels(labels, markdown=markdown))
        if labels_error is not None:
            print(f"per-label comparison skipped: {labels_error}")
        for name in slower:
            print(f"{name} is slower than {groups[0].name} (Welch one-sided p < {fail_if_slower})")
    if slower:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
