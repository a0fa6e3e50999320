"""The planner's time model calibrated from a recorded run's `update:<label>` region timings.

An optimizer that times each bank's update inside `recorder.region("update:attn")` / `("update:mlp")`
(the reference trainer's does) says how long one matrix of each shape takes: a rank's update of a label
took its duration / the matrices it updated. How many that is depends on the run's partition: in the bank
layout every rank updates bank_size / world_size matrices (padding included); a run whose matrices were
assigned per owner (`--optimizer-partition alpha-lpt`) records the owner of each matrix (config.json
`shards.<label>.owners`, -1 for padding nobody updates), so a rank updated the matrices it owns, and a rank
that owned none gives no sample. The median over (rank,
step) is used, the first step dropped when there are more (it carries warm-up and compilation). The run's
measured optimizer makespan is, per step, the slowest rank's summed matrix-update time; its median over
steps is what the plan's prediction for the run's own partition is compared against; a step that not every
updating rank recorded (a crashed run's last) has no slowest rank and is left out of it (`partial_steps`).

Invariants: a pure function of the regions frame (docs/frames.md), the run's matrix banks and its recorded
owners; calibration is per matrix shape, and a plan for shapes the run never timed is a UserError
(`check_shapes`) rather than an extrapolation.
"""
from __future__ import annotations

import pandas as pd

from commscope.errors import UserError
from commscope.plan.matrices import Matrix

UPDATE = "update:"


def calibrate(regions: pd.DataFrame, banks: list[list[Matrix]], world_size: int, where: str,
              owners: dict[str, list[int]] | None = None) -> dict:
    """→ {"ms_per_matrix": {(rows, cols): ms}, "measured_makespan_ms": float, "steps": n, "labels": [...]};
    `owners`: label → the rank that updated each matrix, in bank order (-1: nobody), where the run assigned
    them per owner (else the bank layout's even split); `where` names the run in errors."""
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
        owner = (owners or {}).get(label)
        if owner is None:
            per = per / (len(bank) / world_size)
        else:
            n = pd.Series(_owned_counts(owner, len(bank), world_size, label, where), dtype="float64")
            n = n.reindex(per.index.get_level_values("rank")).to_numpy()
            per = (per / n)[n > 0]  # a rank that owned none of the label's matrices times no matrix
        if per.empty:
            continue
        ms_per_matrix[bank[0].shape] = float(per.median())
        labels.append(label)
    if not ms_per_matrix:
        raise UserError(f"{where}: no update regions for the matrix banks (attn, mlp)")
    mat = upd[upd["label"].isin(labels)]
    # A step's makespan is its slowest rank's: a step some rank recorded no update of (the last step of a
    # crashed or interrupted run) has no slowest rank, and its max over the others would read fast.
    by_rank = mat.groupby(["step", "rank"])["ms"].sum()
    ranks_in = by_rank.groupby(level="step").size()
    whole = ranks_in.index[ranks_in == ranks_in.max()]
    per_step = by_rank.groupby(level="step").max().loc[whole]
    return {"ms_per_matrix": ms_per_matrix, "measured_makespan_ms": float(pd.Series(per_step).median()),
            "steps": int(per_step.size), "labels": labels,
            "partial_steps": [int(s) for s in ranks_in.index if s not in set(whole)]}


def _owned_counts(owner: list, bank_size: int, world_size: int, label: str, where: str) -> list[int]:
    """Matrices of the label each rank owned, from the recorded owner of each matrix; UserError where the
    record cannot be the label's (another length than its bank, an owner that is no rank)."""
    if len(owner) != bank_size:
        raise UserError(f"{where}: config.json gives {len(owner)} matrix owners for {label}, whose bank holds "
                        f"{bank_size} matrices")
    bad = [o for o in owner if isinstance(o, bool) or not isinstance(o, int) or not -1 <= o < world_size]
    if bad:
        raise UserError(f"{where}: config.json names owner {bad[0]!r} for a {label} matrix, not a rank of "
                        f"{world_size} (or -1)")
    return [sum(1 for o in owner if o == r) for r in range(world_size)]


def check_shapes(matrices: list[Matrix], ms_per_matrix: dict[tuple[int, int], float], where: str) -> None:
    """UserError when the plan's matrices have a shape the calibration never timed."""
    missing = sorted({m.shape for m in matrices} - set(ms_per_matrix))
    if missing:
        have = ", ".join(f"{r}x{c}" for r, c in ms_per_matrix) or "none"
        raise UserError(f"{where} timed matrix shapes {have} but the plan needs "
                        f"{', '.join(f'{r}x{c}' for r, c in missing)}: plan the run's own preset (leave --preset out)")
