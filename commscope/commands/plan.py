"""`commscope plan`: who should compute each NorMuon matrix update, and what each choice costs.

Thin CLI over commscope.plan: builds the matrix list from the trainer's preset, runs every strategy,
optionally calibrates the time model from a run (`--cost measured RUN`) and plans the tensor-parallel
micro-groups (`--tp T`); renders a summary table and a per-rank bar chart per strategy, or JSON.
"""
from __future__ import annotations

import sys
from pathlib import Path

import orjson
import typer
from rich.bar import Bar
from rich.console import Console
from rich.table import Table

from commscope.errors import UserError
from commscope.plan import (DEFAULT_CAPACITY_BYTES, DEFAULT_TFLOPS, TimeModel, evaluate_strategy, make_plan,
                            matrices_for_config, micro_groups)

COSTS = ("numel", "flops", "measured")


def _mb(b: float) -> str:
    return f"{b / 2 ** 20:,.1f} MiB"


def _render(plan: dict, console: Console) -> None:
    n_pad = sum(m["padding"] for m in plan["matrices"])
    console.print(f"{len(plan['matrices'])} matrices ({n_pad} padding) over {plan['world_size']} ranks; "
                  f"balancing cost: {plan['cost']}; alpha {plan['alpha']}; time model: {plan['time_model']}")
    t = Table(title="Strategies (makespan: slowest rank's predicted optimizer time)")
    for h in ("strategy", "max/mean", "padding waste", "makespan ms", "max recv", "max send", "collective"):
        t.add_column(h, justify="left" if h == "strategy" else "right")
    for name, s in plan["strategies"].items():
        t.add_row(name, f"{s['max_over_mean']:.4f}", f"{s['padding_waste']:.1%}",
                  f"{s['predicted_makespan_ms']:.4f}", _mb(max(s["recv_bytes"])), _mb(max(s["send_bytes"])),
                  _mb(s["collective_bytes"]))
    console.print(t)
    top = max(max(s["per_rank_ms"]) for s in plan["strategies"].values()) or 1.0
    for name, s in plan["strategies"].items():
        bars = Table(title=f"{name}: per-rank optimizer time (ms)", show_header=False, box=None)
        bars.add_column("rank", justify="right")
        bars.add_column("bar", width=50)
        bars.add_column("ms", justify="right")
        bars.add_column("matrices", justify="right")
        owned = [0] * plan["world_size"]
        for r in s["assignment"].values():
            owned[r] += 1
        for r, ms in enumerate(s["per_rank_ms"]):
            pad = s["padding_per_rank"][r]
            bars.add_row(f"rank {r}", Bar(top, 0, ms, width=50), f"{ms:.4f}",
                         f"{owned[r]}" + (f" + {pad} pad" if pad else ""))
        console.print(bars)
    for name, why in plan["unavailable"].items():
        console.print(f"{name}: unavailable ({why})")
    if "measured" in plan:
        m = plan["measured"]
        console.print(f"measured ({m['run']}, {m['steps']} steps, median): optimizer makespan "
                      f"{m['measured_makespan_ms']:.4f} ms; predicted for the run's bank layout "
                      f"{m['predicted_bank_makespan_ms']:.4f} ms")
    if "tp" in plan:
        tp = plan["tp"]
        console.print(f"TP {tp['tp']}: {tp['group_count']} micro-groups (capacity {_mb(tp['capacity_bytes'])}), "
                      f"gather {_mb(tp['gather_bytes'])} + scatter {_mb(tp['scatter_bytes'])}, "
                      f"predicted makespan {tp['predicted_makespan_ms']:.4f} ms")
        g = Table(title="micro-groups")
        for h in ("group", "matrices", "hosts", "bytes", "gather", "scatter", "compute ms"):
            g.add_column(h, justify="right")
        for grp in tp["groups"]:
            g.add_row(str(grp["group"]), str(len(grp["matrices"])),
                      " ".join(str(h) for h in sorted(set(grp["hosts"]))), _mb(grp["bytes"]),
                      _mb(grp["gather_bytes"]), _mb(grp["scatter_bytes"]), f"{grp['compute_ms']:.4f}")
        console.print(g)
        console.print("per-rank compute ms: " + ", ".join(f"{x:.4f}" for x in tp["per_rank_ms"]))


def _config(preset: str, world_size: int):
    """The preset's shapes. A world size the trainer cannot shard the banks over is still plannable
    (whole-matrix ownership does not need even bank chunks); the `bank` strategy then reports itself
    unavailable."""
    from instrumented_model.config import make_config

    return make_config(preset, world_size, check_shards=False)


def plan_cmd(
    run: Path = typer.Argument(None, help="With --cost measured: the run directory whose update timings calibrate the cost."),
    preset: str = typer.Option("speedrun", help="Model preset of the reference trainer."),
    world_size: int = typer.Option(8, help="Number of data-parallel ranks."),
    cost: str = typer.Option("flops", help="Balancing cost: numel | flops | measured (then give RUN)."),
    alpha: float = typer.Option(1.0, help="alpha_lpt blend: 0 = even split (bank geometry), 1 = fill deficits."),
    tp: int = typer.Option(None, help="Also plan tensor-parallel micro-groups for T-way sharded matrices."),
    capacity_mb: float = typer.Option(DEFAULT_CAPACITY_BYTES / 2 ** 20, help="Micro-group byte capacity (MiB)."),
    tflops: float = typer.Option(DEFAULT_TFLOPS, help="Assumed sustained TFLOP/s of the flops time model."),
    bytes_per_element: int = typer.Option(4, help="Bytes per element of gradients/weights moved."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Assign the NorMuon matrices to ranks with every strategy and compare load, bytes and makespan."""
    if cost not in COSTS:
        raise UserError(f"--cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if (cost == "measured") != (run is not None):
        raise UserError("give a RUN directory exactly when --cost measured")
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--alpha must be in [0, 1], got {alpha}")
    if tflops <= 0 or bytes_per_element <= 0 or capacity_mb <= 0:
        raise UserError("--tflops, --bytes-per-element and --capacity-mb must be positive")
    if tp is not None and (tp < 1 or world_size % tp):
        raise UserError(f"--tp must divide the world size {world_size}, got {tp}")
    matrices = matrices_for_config(_config(preset, world_size))
    time_model = TimeModel(tflops=tflops)
    calib = None
    if cost == "measured":
        from commscope.plan.measured import calibrate, check_shapes
        calib = calibrate(str(run))
        check_shapes(matrices, calib["ms_per_matrix"], str(run))
        time_model = TimeModel(tflops=tflops, measured_ms=calib["ms_per_matrix"])
    plan = make_plan(matrices, world_size, cost=cost, alpha=alpha, time_model=time_model,
                     bytes_per_element=bytes_per_element)
    plan["preset"] = preset
    if calib is not None:
        run_bank = evaluate_strategy("bank", matrices_for_config(_config(preset, calib["world_size"])),
                                     calib["world_size"], cost=cost, alpha=alpha, time_model=time_model,
                                     bytes_per_element=bytes_per_element)
        plan["measured"] = {
            "run": str(run), "steps": calib["steps"], "run_world_size": calib["world_size"],
            "measured_makespan_ms": calib["measured_makespan_ms"],
            "predicted_bank_makespan_ms": run_bank["predicted_makespan_ms"],
        }
    if tp:
        costs = {m["index"]: m["cost"] for m in plan["matrices"]}  # the costs make_plan balanced
        plan["tp"] = micro_groups(matrices, tp, costs, time_model, bytes_per_element,
                                  int(capacity_mb * 2 ** 20))
    if as_json:
        sys.stdout.write(orjson.dumps(plan, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _render(plan, Console(width=max(Console().width, 120)))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
