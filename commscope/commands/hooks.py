"""`commscope hooks [RUN]`: gradient-hook firing order per rank next to the optimizer's scatter_order.

Without RUN it first records a short run of the reference trainer (2 steps, --grad-accum 2) into a
temporary directory. Orders: commscope.analyze.hooks_order; table: reports.hooks_terminal.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import typer

from commscope.pipeline import load_hook_orders
from commscope.commands.run import launcher
from commscope.commands._shared import stderr_line
from commscope.errors import UserError
from commscope.rundir.schema import CAPTURE_DIR_PREFIX
from commscope.util.jsondoc import print_document


DEFAULT_NPROC = 2  # ranks of the capture run: the fewest that show hook orders side by side


def capture_run(out: Path, nproc: int = 2, steps: int = 2, grad_accum: int = 2, extra: list[str] | None = None) -> None:
    """A short traced run of the reference trainer into `out` (the launcher `commscope run` uses, quietly)."""
    argv = ["--steps", str(steps), "--grad-accum", str(grad_accum), *(extra or [])]
    summary = launcher().launch_training(argv, launcher().Topology(nproc), str(out), launcher().QuietView())
    if summary["status"] == "interrupted":  # the user stopped it: 128 + the signal, as `run` exits, not bad input
        stderr_line(f"commscope: capture run interrupted: {summary['message']}")
        raise typer.Exit(summary["exit_code"])
    if summary["status"] != "completed":
        raise UserError(f"capture run failed ({summary['status']}): {summary['message']}")


def register(app: typer.Typer) -> None:
    @app.command()
    def hooks(
        run: Optional[Path] = typer.Argument(None, help="Run directory. Omitted: record a short run first."),
        nproc: Optional[int] = typer.Option(None, "--nproc", show_default=False,
                                            help="Ranks of the capture run (without RUN; default 2)."),
        json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Show the gradient-hook firing order per rank next to the optimizer's scatter_order."""
        if run is not None and nproc is not None:  # a recorded run has its ranks: --nproc would be ignored
            raise UserError("--nproc sets the ranks of the capture run, which is made only without RUN; "
                            "drop --nproc or RUN")
        if nproc is not None and nproc < 1:  # checked here: the launcher would name its own --nnodes too
            raise UserError(f"--nproc must be >= 1 (the capture run's ranks), got {nproc}")
        if run is None:
            # the pid in the name lets a later launch sweep the folder should this process be SIGKILLed
            with tempfile.TemporaryDirectory(prefix=f"{CAPTURE_DIR_PREFIX}{os.getpid()}-") as tmp:
                out = Path(tmp) / "run"
                capture_run(out, nproc=DEFAULT_NPROC if nproc is None else nproc)
                orders = load_hook_orders(out)
        else:
            orders = load_hook_orders(run)
        if json:
            print_document(orders.to_json())
        else:
            from reports.console import plain_console
            from reports.hooks_terminal import print_hook_orders
            from reports.report_terminal import print_outcome_and_problems

            console = plain_console()
            print_hook_orders(orders, console)
            print_outcome_and_problems(orders.run_reports, orders.problems, console)
