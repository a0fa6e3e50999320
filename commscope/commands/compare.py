"""`commscope compare BASELINE CANDIDATE...`: the speedrun record's A/B table for groups of runs.

Statistics: commscope.analyze.compare (statistics), commscope.load.run_groups (groups) and commscope.analyze.compare_labels
(per-label exposed communication of commscope run dirs); output: reports.compare_terminal.
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from commscope.analyze.compare import (DEFAULT_TARGET_LOSS, comparability_warnings, compare_groups,
                                       precision_warnings, slower_candidates)
from commscope.commands._shared import require_finite
from commscope.load.run_groups import check_one_kind, load_group, unique_names
from commscope.errors import UserError


def compare_cmd(
    folders: list[Path] = typer.Argument(..., help="BASELINE then one or more CANDIDATE folders of runs or logs."),
    target_loss: float = typer.Option(DEFAULT_TARGET_LOSS, help="Loss target for the one-sample t-test."),
    markdown: bool = typer.Option(False, "--markdown", help="Print a README-ready markdown table."),
    as_json: bool = typer.Option(False, "--json", help="Print every number as JSON."),
    fail_if_slower: float = typer.Option(None, help="Exit 1 if a candidate is slower at this significance."),
) -> None:
    """Compare groups of runs (commscope run dirs or modded-nanogpt logs) in the speedrun record's style."""
    from reports.compare_terminal import comparison_json, print_comparison

    require_finite(target_loss, "--target-loss")
    if target_loss < 0:  # a cross-entropy is never below 0: a sign typo would test every run as a miss
        raise UserError(f"--target-loss is a cross-entropy loss, which is never negative: got {target_loss}")
    require_finite(fail_if_slower, "--fail-if-slower")
    if markdown and as_json:  # one output: the JSON holds every number, the markdown table a few of them
        raise UserError("--markdown and --json each choose the output: give one")
    if len(folders) < 2:
        raise UserError("compare needs a BASELINE and at least one CANDIDATE folder")
    if fail_if_slower is not None and not 0 < fail_if_slower < 1:
        raise UserError(f"--fail-if-slower must be a significance level in (0, 1), got {fail_if_slower}")
    groups = unique_names([load_group(f) for f in folders])
    check_one_kind(groups)
    table = compare_groups(groups, target_loss)
    warnings = comparability_warnings(groups) + precision_warnings(groups)
    slower = slower_candidates(table, fail_if_slower) if fail_if_slower is not None else []
    # a gate that cannot show a candidate is not slower (too few runs left, crashed ones skipped) fails:
    # in CI a pass must mean "not slower", not "not measured"
    unjudged = _say_where_the_gate_cannot_fire(groups, table) if fail_if_slower is not None else False
    labels, labels_error = None, None
    if all(g.run_dirs for g in groups):
        from commscope.analyze.compare_labels import compare_labels, run_samples
        from commscope.load import load_path  # run directories only: logs never need the loader

        try:
            # one run loaded at a time: only its samples are kept
            samples = [[run_samples(load_path(str(p))) for p in g.run_dirs] for g in groups]
            labels = compare_labels(samples, [g.name for g in groups])
        except UserError as e:  # the table above stands on summary.json alone; say why labels are missing
            labels_error = str(e)
    if as_json:
        from commscope.util.jsondoc import print_document

        print_document(comparison_json(groups, table, target_loss, fail_if_slower, slower, labels, labels_error,
                                       warnings))
    else:
        from commscope.commands._shared import output_console

        print_comparison(groups, table, target_loss, markdown, labels, labels_error, slower, fail_if_slower,
                         warnings, console=output_console(piped_width=160))
    if slower or unjudged:
        raise typer.Exit(1)


def _say_where_the_gate_cannot_fire(groups, table) -> bool:
    """One stderr line naming the candidates whose Welch test is undefined, and whether there are any: the
    gate fails for them (docs/compare.md), and the line says it was not a measured slowdown."""
    import math

    runs = dict(zip(table["name"], table["runs"]))
    base = groups[0].name
    why = []
    for name, p in zip(table["name"].iloc[1:], table["slower_p"].iloc[1:]):
        if not (isinstance(p, float) and math.isnan(p)):
            continue
        if min(runs[base], runs[name]) < 2:
            why.append(f"{name}: too few runs ({base} has {runs[base]}, {name} {runs[name]}; the test needs at least "
                       "two runs a side)")
        else:
            why.append(f"{name}: no spread in the times on either side")
    if why:
        print("--fail-if-slower: the gate could not be evaluated for " + "; ".join(why) + ", so it fails (exit "
              "1): a gate that cannot show a candidate is not slower does not pass.", file=sys.stderr)
    return bool(why)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
