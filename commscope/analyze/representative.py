"""Representative ranks: the few ranks a reader of a large job should look at, each with why.

At hundreds or thousands of ranks a report cannot draw or list every rank; what answers "why is the job
slow" is a handful of ranks chosen by the numbers: the ranks that made the others wait most (waiting.by_rank),
the rank with the most exposed communication, and for contrast the rank of median and of least step time.
`representative_ranks(stragglers, breakdown, ranks)` picks them; reports draw their timelines and `report
--json` lists their collectives' placement when the job has more ranks than a page can show.
`culprits_first(reps, ranks, diagnosis)` puts the doctor's culprit ranks before them: the order in which the
page draws them at scale and `report --json` lists them (`representative_ranks_culprits_first`).

Invariants: pure function of its frames; ranks appear once each (the first reason that picked them, the
others appended), in the order of the reasons below; at most `most` ranks; a job with no steps or no
collectives still gets its lowest rank.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze.diagnosis import Diagnosis

STRAGGLERS = 3  # top ranks by waiting caused: the first screen's "Ranks to look at" lists as many (report_overview)


def representative_ranks(stragglers: pd.DataFrame, breakdown: pd.DataFrame, ranks: list[int],
                         most: int = 6, gaps: pd.DataFrame | None = None) -> list[dict]:
    """[{"rank": r, "why": [reasons]}] by: waiting caused (waiting.by_rank's frame, worst first), most
    exposed communication, median and least step time (timeline.step_breakdown's frame, summed per rank,
    plus `gaps`' time between those steps, step_gaps.step_gaps, where given: on a GPU trace a rank whose
    device idles between steps has short step windows and is no faster for it); the lowest rank when
    nothing else picks one."""
    picked: dict[int, list[str]] = {}

    def pick(rank, why: str) -> None:
        rank = int(rank)
        if rank in picked:
            picked[rank].append(why)
        elif len(picked) < most:
            picked[rank] = [why]

    if len(stragglers):
        s = stragglers[stragglers["wait_caused_ns"] > 0].head(STRAGGLERS)
        for r in s.itertuples():
            pick(r.rank, f"made the others wait {r.wait_caused_ns / 1e6:,.1f} ms (last {int(r.times_last)}×)")
    if len(breakdown):
        per = breakdown.groupby("rank")[["step_ns", "exposed_comm_ns"]].sum()
        if len(per) and per["exposed_comm_ns"].max() > 0:
            r = per["exposed_comm_ns"].idxmax()
            pick(r, f"most exposed communication ({per.loc[r, 'exposed_comm_ns'] / 1e6:,.1f} ms)")
        if len(per):
            between = _gaps_between(gaps, breakdown, per.index)
            t = (per["step_ns"] + between).sort_values(kind="stable")
            gapped = ", the gaps between steps included" if between.any() else ""
            med = t.index[(len(t) - 1) // 2]
            if t.loc[med] == t.iloc[0]:  # tied with the least (half the ranks alike): one rank shows both
                pick(t.index[0], f"least and median total step time ({t.iloc[0] / 1e6:,.1f} ms{gapped})")
            else:
                pick(med, f"median total step time ({t.loc[med] / 1e6:,.1f} ms{gapped})")
                pick(t.index[0], f"least total step time ({t.iloc[0] / 1e6:,.1f} ms{gapped})")
    if not picked and len(ranks):
        pick(min(ranks), "lowest rank")
    return [{"rank": r, "why": why} for r, why in picked.items()]


def _gaps_between(gaps: pd.DataFrame | None, breakdown: pd.DataFrame, index: pd.Index) -> pd.Series:
    """Per rank of `index`, the gap time before the steps of `breakdown` (the profiler's own boundaries,
    `excluded`, left out): 0 without gaps."""
    if gaps is None or not len(gaps):
        return pd.Series(0.0, index=index)
    g = gaps[gaps["excluded"].isna() & gaps["step"].isin(breakdown["step"].unique())]
    return g.groupby("rank")["gap_ns"].sum().astype(np.float64).reindex(index, fill_value=0.0).fillna(0.0)


def among(ranks: np.ndarray, chosen: list[dict]) -> np.ndarray:
    """Mask of `ranks` (an array of rank numbers) that are among `chosen` (representative_ranks' list)."""
    return np.isin(ranks, [c["rank"] for c in chosen])


def with_culprits(reps: list[dict], verdict: str, culprits: list[int], most: int = 8) -> list[dict]:
    """`reps` with the doctor's culprit ranks first (why: "the doctor's <verdict> culprit"), each once,
    at most `most` ranks: a hung rank that made nobody wait in a finished step is otherwise in no list."""
    why = f"the doctor's {verdict} culprit"
    out = {int(r): [why] for r in culprits[:most]}
    for r in reps:
        if r["rank"] in out:
            out[r["rank"]] = out[r["rank"]] + list(r["why"])
        elif len(out) < most:
            out[r["rank"]] = list(r["why"])
    return [{"rank": r, "why": why_r} for r, why_r in out.items()]


def culprits_first(reps: list[dict], ranks: list[int], diagnosis: Any) -> list[dict]:
    """The representative ranks as the report shows them: `reps` (representative_ranks' list; the lowest
    of `ranks` when empty, as representative_ranks picks it) with the culprit ranks of `diagnosis` first
    (with_culprits). Anything but a Diagnosis (None, or the exception diagnosing raised) blames no rank."""
    if not reps and len(ranks):
        reps = [{"rank": int(min(ranks)), "why": ["lowest rank"]}]
    if isinstance(diagnosis, Diagnosis):
        return with_culprits(reps, diagnosis.verdict, diagnosis.culprit_ranks)
    return [{"rank": int(r["rank"]), "why": list(r["why"])} for r in reps]
