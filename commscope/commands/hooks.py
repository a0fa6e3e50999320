"""`commscope hooks [RUN]`: gradient-hook firing order per rank next to the optimizer's scatter_order.

Without RUN it first records a short run of the reference trainer (2 steps, --grad-accum 2) into a
temporary directory. Orders: commscope.analyze.hooks_order; table: reports.hooks_terminal.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import orjson
import typer

from commscope.analyze.hooks_order import capture_run, load_hook_orders


def register(app: typer.Typer) -> None:
    @app.command()
    def hooks(
        run: Optional[Path] = typer.Argument(None, help="Run directory. Omitted: record a short run first."),
        nproc: int = typer.Option(2, "--nproc", help="Ranks of the capture run (without RUN)."),
        json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Show the gradient-hook firing order per rank next to the optimizer's scatter_order."""
        if run is None:
            with tempfile.TemporaryDirectory(prefix="commscope-hooks-") as tmp:
                out = Path(tmp) / "run"
                capture_run(out, nproc=nproc)
                orders = load_hook_orders(out)
        else:
            orders = load_hook_orders(run)
        if json:
            typer.echo(orjson.dumps(orders.to_json()).decode())
        else:
            from rich.console import Console

            from reports.hooks_terminal import print_hook_orders

            print_hook_orders(orders, Console())
