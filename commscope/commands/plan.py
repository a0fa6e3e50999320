"""`commscope plan`: who should compute each NorMuon matrix update, and what each choice costs.

Thin CLI over commscope.plan: builds the matrix list from the trainer's preset, runs every strategy,
optionally calibrates the time model from a run (`--cost measured RUN`) and plans the tensor-parallel
micro-groups (`--tp T`); renders a summary table and a per-rank bar chart per strategy, or JSON.

The matrix shapes of a preset or of a recorded run's model come from the reference trainer, reached
through `_trainer()` only: the trainer package is imported when a plan is made, never when commscope is
imported. The calibration itself is commscope.plan.calibrate's, on the run's regions frame.
"""
from __future__ import annotations

import math
from pathlib import Path

import typer

from commscope.commands._shared import require_finite
from commscope.errors import UserError
from commscope.util.jsondoc import print_document
from commscope.load.limits import WORLD_SIZE
from commscope.plan import (DEFAULT_CAPACITY_BYTES, DEFAULT_TFLOPS, TimeModel, evaluate_owners, evaluate_strategy,
                            make_plan, micro_groups)

COSTS = ("numel", "flops", "measured")
MAX_ELEMENT_BYTES = 64  # bytes per element: beyond any dtype (and any state carried per element)


def _trainer():
    """The trainer's planning side (instrumented_model.planning): this command's one way into the trainer."""
    from instrumented_model import planning

    return planning


def measured_calibration(run: str) -> dict:
    """commscope.plan.calibrate of the run directory `run`, with its world size and preset (None if it names none)."""
    from commscope.load import load_path
    from commscope.plan.calibrate import calibrate
    from commscope.plan.matrices import buckets

    trace = load_path(run)
    if trace.source != "run":
        raise UserError(f"{run} holds profiler traces: --cost measured needs a run directory of "
                        "`commscope run` (its update:<label> regions time each matrix's update)")
    world_size = int(trace.world_size)
    matrices = _trainer().run_matrices(trace.config, world_size, run)
    # a run that assigned whole matrices per owner (--optimizer-partition alpha-lpt) records who owned which
    shards = ((trace.config.get("config") or {}).get("shards") or {})
    owners = {label: sh["owners"] for label, sh in shards.items()
              if isinstance(sh, dict) and isinstance(sh.get("owners"), list)}
    return {**calibrate(trace.regions, buckets(matrices), world_size, run, owners or None),
            "world_size": world_size, "preset": _trainer().run_preset(trace.config), "owners": owners or None,
            "run_status": _run_status(trace.config)}


def _run_status(config: dict) -> str | None:
    """How the run ended: summary.json's status (`commscope run`), else, for a run a training script
    recorded, "completed" when every rank's status.json says it ended so ("exited" counts: its process
    left after closing), else the first other; None when neither file says. A run that did not complete
    calibrates from the steps it finished, and the plan says so."""
    said = (config.get("summary") or {}).get("status")
    if said is not None:
        return str(said)
    ranks = [str((s or {}).get("status")) for s in (config.get("status") or {}).values()]
    if not ranks:
        return None
    return next((s for s in ranks if s not in ("completed", "exited")), "completed")


def plan_cmd(
    run: Path = typer.Argument(None, help="With --cost measured: the run directory whose update timings calibrate the cost."),
    preset: str = typer.Option(None, help="Model preset of the reference trainer. Default: the run's preset with "
                               "--cost measured, else speedrun."),
    world_size: int = typer.Option(None, help="Number of data-parallel ranks (at most COMMSCOPE_MAX_WORLD_SIZE, "
                                   "default 16384). Default: the run's with --cost measured, else 8."),
    cost: str = typer.Option("flops", help="Balancing cost: numel | flops | measured (then give RUN)."),
    alpha: float = typer.Option(1.0, help="alpha_lpt blend: 0 = even split (bank geometry), 1 = fill deficits."),
    tp: int = typer.Option(None, help="Also plan tensor-parallel micro-groups for T-way sharded matrices."),
    capacity_mb: float = typer.Option(None, help=f"Micro-group byte capacity (MiB), with --tp. Default: "
                                      f"{DEFAULT_CAPACITY_BYTES / 2 ** 20:g}."),
    tflops: float = typer.Option(None, help=f"Assumed sustained TFLOP/s of the flops time model (not with --cost "
                                 f"measured: the run's timings are the model). Default: {DEFAULT_TFLOPS:g}."),
    bytes_per_element: int = typer.Option(4, help="Bytes per element of gradients/weights moved."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Assign the NorMuon matrices to ranks with every strategy and compare load, bytes and makespan."""
    if cost not in COSTS:
        raise UserError(f"--cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if (cost == "measured") != (run is not None):
        raise UserError("give a RUN directory exactly when --cost measured")
    for value, option in ((alpha, "--alpha"), (capacity_mb, "--capacity-mb"), (tflops, "--tflops")):
        require_finite(value, option)
    # an option that would change nothing is refused, not ignored: the user meant it to count
    if tflops is not None and cost == "measured":
        raise UserError("--tflops sets the flops time model; with --cost measured the run's update timings are "
                        "the model: leave one out")
    if capacity_mb is not None and tp is None:
        raise UserError("--capacity-mb sizes the tensor-parallel micro-groups: give it with --tp")
    tflops = DEFAULT_TFLOPS if tflops is None else tflops
    capacity_mb = DEFAULT_CAPACITY_BYTES / 2 ** 20 if capacity_mb is None else capacity_mb
    calib = measured_calibration(str(run)) if cost == "measured" else None
    # a measured run is planned as it ran unless another world size is named, as its preset is
    world_size = world_size if world_size is not None else (calib or {}).get("world_size") or 8
    if world_size < 1:
        raise UserError(f"--world-size must be at least 1, got {world_size}")
    if world_size > WORLD_SIZE.value():  # the reading commands' limit: planning time grows faster than linearly
        raise WORLD_SIZE.refuse(f"--world-size {world_size} is too large")
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--alpha must be in [0, 1], got {alpha}")
    for name, value in (("--tflops", tflops), ("--bytes-per-element", bytes_per_element), ("--capacity-mb", capacity_mb)):
        if not value > 0:
            raise UserError(f"{name} must be positive, got {value:g}")
    if bytes_per_element > MAX_ELEMENT_BYTES:
        raise UserError(f"--bytes-per-element must be at most {MAX_ELEMENT_BYTES} (the widest dtype, complex128, "
                        f"has 16), got {bytes_per_element}")
    if not math.isfinite(capacity_mb * 2 ** 20):
        raise UserError(f"--capacity-mb {capacity_mb} is too large to count in bytes")
    if tp is not None and (tp < 1 or world_size % tp):
        raise UserError(f"--tp must divide the world size {world_size}, got {tp}")
    # the run's timings are of its own preset's shapes: plan that preset unless another is named
    preset = preset or (calib or {}).get("preset") or "speedrun"
    matrices = _trainer().preset_matrices(preset, world_size)
    time_model = TimeModel(tflops=tflops)
    if calib is not None:
        from commscope.plan.calibrate import check_shapes

        check_shapes(matrices, calib["ms_per_matrix"], str(run))
        time_model = TimeModel(tflops=tflops, measured_ms=calib["ms_per_matrix"])
    plan = make_plan(matrices, world_size, cost=cost, alpha=alpha, time_model=time_model,
                     bytes_per_element=bytes_per_element)
    plan["preset"] = preset
    plan["trainer_refusal"] = _trainer().trainer_refusal(preset, world_size)
    if calib is not None:
        run_matrices = _trainer().preset_matrices(preset, calib["world_size"])
        try:
            # the prediction for the partition the run used: its recorded owners, else the bank layout
            ran = (evaluate_owners(calib["owners"], run_matrices, calib["world_size"], cost=cost,
                                   time_model=time_model, bytes_per_element=bytes_per_element)
                   if calib["owners"] else
                   evaluate_strategy("bank", run_matrices, calib["world_size"], cost=cost, alpha=alpha,
                                     time_model=time_model, bytes_per_element=bytes_per_element))
        except ValueError as e:
            raise UserError(f"{run}: its partition does not fit the {preset} preset's matrices ({e})") from None
        plan["measured"] = {
            "run": str(run), "steps": calib["steps"], "run_world_size": calib["world_size"],
            "run_partition": "owners" if calib["owners"] else "bank",
            "measured_makespan_ms": calib["measured_makespan_ms"],
            "predicted_run_makespan_ms": ran["predicted_makespan_ms"],
            "run_status": calib["run_status"], "partial_steps": calib["partial_steps"],
        }
    if tp:
        costs = {m["index"]: m["cost"] for m in plan["matrices"]}  # the costs make_plan balanced
        plan["tp"] = micro_groups(matrices, tp, costs, time_model, bytes_per_element,
                                  int(capacity_mb * 2 ** 20))
    if as_json:
        print_document(plan)
    else:
        from reports.console import at_least
        from reports.plan_terminal import print_plan

        print_plan(plan, at_least(120))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
