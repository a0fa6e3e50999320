"""`commscope doctor RUN [--json] [--straggler-ms MS | --straggler-pct P] [--warmup-steps N] [--label-map FILE]`: what went
wrong in a run, across ranks.

Prints one verdict (ok, crash, hang, straggler, desync, interrupted, insufficient) with the culprit ranks,
label, step, sequence and the evidence that shows it (commscope.analyze.doctor; rendered by
reports.doctor_terminal); `--json` prints the same as one JSON document on stdout. Exit code 0 whatever
the verdict (the verdict is the answer, not an error); 2 for input that cannot be read or a bad option.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commscope.commands._shared import (apply_label_map, label_map_option, output_console, read_label_map,
                                       require_finite, scheduler_option)
from commscope.util.jsondoc import print_document


# commscope.analyze.doctor_straggler.STRAGGLER_FLOOR_MS_HOST, written out: importing it would load pandas
# for --help (tests/unit/test_cli.py checks both stay equal)
STRAGGLER_FLOOR_HELP = "50 ms"
MAX_STRAGGLER_MS = 86_400_000  # --straggler-ms at most: a day


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        path: Path = typer.Argument(..., help="A commscope run directory, or a folder of Kineto traces (desync, "
                                    "straggler and insufficient checks, and a hang where a rank's trace stops "
                                    "launching mid-step; docs/faults.md)."),
        as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON on stdout."),
        straggler_ms: Optional[float] = typer.Option(
            None, "--straggler-ms", help="Absolute straggler bar: a rank that makes the others wait this many ms "
            "(on average per waiting rank) in one step. Default: a share of the median step (--straggler-pct)."),
        straggler_pct: Optional[float] = typer.Option(
            None, "--straggler-pct", help="Straggler bar as a % of the run's median step time (default 10 for "
            "device-timed arrivals, i.e. GPUs; 100 for CPU (host-timed) ranks, whose speed varies with OS "
            f"scheduling, and then never below {STRAGGLER_FLOOR_HELP}; a % given here has no floor)."),
        warmup_steps: Optional[int] = typer.Option(None, "--warmup-steps", show_default=False,
                                                   help="Training steps numbered below this are warm-up: not "
                                                   "judged for stragglers. Default: 1."),
        scheduler: Optional[str] = scheduler_option(),
        label_map: Optional[str] = label_map_option(),
    ) -> None:
        """Diagnose a run: what went wrong, which ranks, and the evidence.

        The verdict is one of ok, crash, hang, straggler, desync, interrupted or insufficient."""
        from commscope.analyze.doctor import diagnose_trace
        from commscope.errors import UserError
        from reports.doctor_terminal import print_doctor_verdict

        require_finite(straggler_ms, "--straggler-ms")
        require_finite(straggler_pct, "--straggler-pct")
        if straggler_ms is not None and straggler_pct is not None:
            raise UserError("give --straggler-ms or --straggler-pct, not both")
        if straggler_ms is not None and not 0 < straggler_ms <= MAX_STRAGGLER_MS:
            # beyond a day no wait counts; far beyond, the bar in ns is no longer a number (1e308 ms: inf)
            raise UserError(f"--straggler-ms must be > 0 and at most {MAX_STRAGGLER_MS:,} (a day), got {straggler_ms}")
        if straggler_pct is not None and not straggler_pct > 0:
            raise UserError(f"--straggler-pct must be > 0, got {straggler_pct}")
        from commscope.analyze.waiting import WARMUP_STEPS  # pandas: not at import, which every command pays

        warmup_steps = WARMUP_STEPS if warmup_steps is None else warmup_steps
        if warmup_steps < 0:
            raise UserError(f"--warmup-steps must be >= 0, got {warmup_steps}")
        sizes = read_label_map(label_map)
        from commscope.load import load_path

        trace = apply_label_map(load_path(str(path), scheduler=scheduler), sizes)
        d = diagnose_trace(trace, straggler_ms=straggler_ms, straggler_pct=straggler_pct, warmup_steps=warmup_steps)
        if as_json:
            print_document(d.to_json())
            return
        console = output_console(piped_width=160)
        print_doctor_verdict(d, console)
