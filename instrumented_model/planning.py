"""What `commscope plan` needs from the trainer: a preset's matrix shapes, and the planner's time model
calibrated from a recorded run's `update:<label>` region timings.

`commscope plan` reaches this module through its command module only (the profiler never imports the
trainer elsewhere); the planning algorithms themselves are the library `commscope.plan`, which the
trainer imports and which knows nothing of the trainer.

The calibration reads the reference optimizer's own timings, so it lives with the trainer. The optimizer
times each bank's update inside `recorder.region("update:attn")` /
`("update:mlp")`; in the run's bank layout every rank updates bank_size / world_size matrices of one
shape (padding included), so one matrix of that shape takes duration / matrices_per_rank. The median over
(rank, step) is used (the first step is dropped when there are more: it carries warm-up and compilation).

The run's measured optimizer makespan is, per step, the slowest rank's summed matrix-update time; its
median over steps is what the bank plan's prediction is compared against.

Invariant: calibration is per matrix shape; a plan for a model whose shapes the run never timed is a
UserError rather than an extrapolation.
"""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from commscope.errors import UserError
from commscope.plan.matrices import Matrix, buckets, matrices_for_config
from instrumented_model.config import make_config


def preset_matrices(preset: str, world_size: int) -> list[Matrix]:
    """The preset's NorMuon matrices. A world size the trainer cannot shard the banks over is still
    plannable (whole-matrix ownership does not need even bank chunks); the `bank` strategy then reports
    itself unavailable."""
    return matrices_for_config(make_config(preset, world_size, check_shards=False))


def _run_matrices(trace) -> list[Matrix]:
    cfg = trace.config.get("config", {}) or {}
    model = cfg.get("model") or {}
    needed = ("model_dim", "num_layers", "attn_layers", "mlp_layers_padded")
    if all(k in model for k in needed):
        return matrices_for_config(SimpleNamespace(**{k: model[k] for k in needed}))
    preset = (cfg.get("args") or {}).get("preset") or (trace.config.get("summary") or {}).get("preset")
    if not preset:
        raise UserError(f"{trace.path}: config.json has no model dimensions or preset to calibrate from")
    return matrices_for_config(make_config(preset, trace.world_size))


def calibrate(run_path: str) -> dict:
    """→ {"ms_per_matrix": {(rows, cols): ms}, "measured_makespan_ms": float, "steps": n, "world_size": R,
    "labels": [...], "preset": the run's preset from its config.json (None if it names none)}."""
    from commscope.load import load_path  # the loader is only needed for this cost model

    trace = load_path(str(run_path))
    if trace.source != "run":
        raise UserError(f"{run_path} holds profiler traces: --cost measured needs a run directory of "
                        "`commscope run` (its update:<label> regions time each matrix's update)")
    regions = trace.regions
    upd = regions[regions["name"].astype(str).str.startswith("update:")].copy()
    if upd.empty:
        raise UserError(f"{run_path}: no update:<label> regions recorded (a run with --trace off records none)")
    upd["label"] = upd["name"].str.slice(len("update:"))
    upd["ms"] = (upd["end_ns"] - upd["start_ns"]) / 1e6
    if upd["step"].nunique() > 1:
        upd = upd[upd["step"] != upd["step"].min()]
    world_size = int(trace.world_size)
    ms_per_matrix: dict[tuple[int, int], float] = {}
    labels = []
    for bank in buckets(_run_matrices(trace)):
        rows = upd[upd["label"] == bank[0].label]
        if rows.empty:
            continue
        per_rank = len(bank) / world_size
        # several regions of one label in a step (e.g. micro-batched updates) add up
        per = rows.groupby(["rank", "step"])["ms"].sum()
        ms_per_matrix[bank[0].shape] = float(per.median() / per_rank)
        labels.append(bank[0].label)
    if not ms_per_matrix:
        raise UserError(f"{run_path}: no update regions for the matrix banks (attn, mlp)")
    mat = upd[upd["label"].isin(labels)]
    per_step = mat.groupby(["step", "rank"])["ms"].sum().groupby(level="step").max()
    return {"ms_per_matrix": ms_per_matrix, "measured_makespan_ms": float(pd.Series(per_step).median()),
            "steps": int(per_step.size), "world_size": world_size, "labels": labels,
            "preset": ((trace.config.get("config") or {}).get("args") or {}).get("preset")}


def check_shapes(matrices: list[Matrix], ms_per_matrix: dict[tuple[int, int], float], run_path: str) -> None:
    missing = sorted({m.shape for m in matrices} - set(ms_per_matrix))
    if missing:
        have = ", ".join(f"{r}x{c}" for r, c in ms_per_matrix) or "none"
        raise UserError(f"{run_path} timed matrix shapes {have} but the plan needs "
                        f"{', '.join(f'{r}x{c}' for r, c in missing)}: plan the run's own preset (leave --preset out)")
