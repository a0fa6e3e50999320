"""The planner's time model calibrated from a recorded run's `update:<label>` region timings.

An optimizer that times each bank's update inside `recorder.region("update:attn")` / `("update:mlp")`
(the reference trainer's does) says how long one matrix of each shape takes: in the bank layout every rank
updates bank_size / world_size matrices of one shape (padding included), so one matrix takes duration /
matrices_per_rank. The median over (rank, step) is used, the first step dropped when there are more (it
carries warm-up and compilation). The run's measured optimizer makespan is, per step, the slowest rank's
summed matrix-update time; its median over steps is what the bank plan's prediction is compared against.

Invariants: a pure function of the regions frame (docs/frames.md) and the run's matrix banks;
calibration is per matrix shape, and a plan for shapes the run never timed is a UserError
(`check_shapes`) rather than an extrapolation.
"""
from __future__ import annotations

import pandas as pd

from commscope.errors import UserError
from commscope.plan.matrices import Matrix

UPDATE = "update:"


def calibrate(regions: pd.DataFrame, banks: list[list[Matrix]], world_size: int, where: str) -> dict:
    """→ {"ms_per_matrix": {(rows, cols): ms}, "measured_makespan_ms": float, "steps": n, "labels": [...]};
    `where` names the run in errors."""
    upd = regions[regions["name"].astype(str).str.startswith(UPDATE)].copy()
    if upd.empty:
        raise UserError(f"{where}: no {UPDATE}<label> regions recorded (a run with --trace off records none)")
    upd["label"] = upd["name"].str.slice(len(UPDATE))
    upd["ms"] = (upd["end_ns"] - upd["start_ns"]) / 1e6
    if upd["step"].nunique() > 1:
        upd = upd[upd["step"] != upd["step"].min()]
    ms_per_matrix: dict[tuple[int, int], float] = {}
    labels = []
    for bank in banks:
        rows = upd[upd["label"] == bank[0].label]
        if rows.empty:
            continue
        per_rank = len(bank) / world_size
        # several regions of one label in a step (e.g. micro-batched updates) add up
        per = rows.groupby(["rank", "step"])["ms"].sum()
        ms_per_matrix[bank[0].shape] = float(per.median() / per_rank)
        labels.append(bank[0].label)
    if not ms_per_matrix:
        raise UserError(f"{where}: no update regions for the matrix banks (attn, mlp)")
    mat = upd[upd["label"].isin(labels)]
    per_step = mat.groupby(["step", "rank"])["ms"].sum().groupby(level="step").max()
    return {"ms_per_matrix": ms_per_matrix, "measured_makespan_ms": float(pd.Series(per_step).median()),
            "steps": int(per_step.size), "labels": labels}


def check_shapes(matrices: list[Matrix], ms_per_matrix: dict[tuple[int, int], float], where: str) -> None:
    """UserError when the plan's matrices have a shape the calibration never timed."""
    missing = sorted({m.shape for m in matrices} - set(ms_per_matrix))
    if missing:
        have = ", ".join(f"{r}x{c}" for r, c in ms_per_matrix) or "none"
        raise UserError(f"{where} timed matrix shapes {have} but the plan needs "
                        f"{', '.join(f'{r}x{c}' for r, c in missing)}: plan the run's own preset (leave --preset out)")
