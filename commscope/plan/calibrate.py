"""The planner's time model calibrated from a recorded run's `update:<label>` region timings.

An optimizer that times each bank's update inside `recorder.region("update:attn")` / `("update:mlp")`
(the reference trainer's does) says how long one matrix of each shape takes: a rank's update of a label
took its duration / the matrices it updated. How many that is depends on the run's partition: in the bank
layout every rank updates bank_size / world_size matrices (padding included); a run whose matrices were
assigned per owner (`--optimizer-partition alpha-lpt`) records each rank's count of the label's matrices
(config.json `shards.<label>.counts`), and a rank that owned none gives no sample. The median over (rank,
step) is used, the first step dropped when there are more (it carries warm-up and compilation). The run's
measured optimizer makespan is, per step, the slowest rank's summed matrix-update time; its median over
steps is what the plan's prediction for the run's own partition is compared against.

Invariants: a pure function of the regions frame (docs/frames.md), the run's matrix banks and its per-rank
counts; calibration is per matrix shape, and a plan for shapes the run never timed is a UserError
(`check_shapes`) rather than an extrapolation.
"""
from __future__ import annotations

import pandas as pd

from commscope.errors import UserError
from commscope.plan.matrices import Matrix

UPDATE = "update:"


def calibrate(regions: pd.DataFrame, banks: list[list[Matrix]], world_size: int, where: str,
              counts: dict[str, list[int]] | None = None) -> dict:
    """→ {"ms_per_matrix": {(rows, cols): ms}, "measured_makespan_ms": float, "steps": n, "labels": [...]};
    `counts`: label → matrices each rank updated, where the run assigned them per owner (else the bank
    layout's even split); `where` names the run in errors."""
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
        label = bank[0].label
        rows = upd[upd["label"] == label]
        if rows.empty:
            continue
        # several regions of one label in a step (e.g. micro-batched updates) add up
        per = rows.groupby(["rank", "step"])["ms"].sum()
        owned = (counts or {}).get(label)
        if owned is None:
            per = per / (len(bank) / world_size)
        else:
            if len(owned) != world_size:
                raise UserError(f"{where}: config.json gives {len(owned)} matrix counts for {label}, not one per "
                                f"rank of {world_size}")
            n = pd.Series(owned, dtype="float64").reindex(per.index.get_level_values("rank")).to_numpy()
            per = (per / n)[n > 0]  # a rank that owned none of the label's matrices times no matrix
        if per.empty:
            continue
        ms_per_matrix[bank[0].shape] = float(per.median())
        labels.append(label)
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
