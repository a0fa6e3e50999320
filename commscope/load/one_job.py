"""That the rank folders of a run directory were recorded by one job.

A rank folder copied in from another run (a rerun's rank1/ over the first run's) reads as one job whose
ranks disagree: a straggler, a hang, a desync that never happened. Two records say which job a folder
belongs to, both written by the recorder in meta.json at the clock alignment, the collective every rank
of a job passes together:
- `clock.job`, the job's identity, which every rank of a job receives from the group's first rank
  (commscope.recording.clock): folders naming different jobs are refused;
- in recordings without `clock.job` (an older recorder's), `started_ns` on the common axis where
  the clock was aligned in a collective (`clock.rounds` > 0): one job's ranks start within seconds of one
  another, so folders started further apart than START_SPREAD_NS are refused. A folder aligned in a
  collective without a job beside folders naming one was recorded by another recorder: refused too.

Invariant: a pure check of the meta.json documents; nothing is dropped, the whole input is refused
(UserError), since which folders are the job's is for the user to say.
"""
from __future__ import annotations

from commscope.errors import UserError
from commscope.util.ranges import int_ranges

# one job's ranks leave the clock alignment together and create their folders right after; minutes
# apart is two launches
START_SPREAD_NS = 10 * 60 * 1_000_000_000


def check_one_job(path: str, metas: dict[int, dict]) -> None:
    """UserError where the rank folders' meta.json documents (`metas`, rank → document) say they were
    recorded by different jobs (module docstring)."""
    jobs: dict[str, list[int]] = {}
    aligned = [r for r, m in sorted(metas.items()) if ((m.get("clock") or {}).get("rounds") or 0) > 0]
    for r, m in sorted(metas.items()):
        job = (m.get("clock") or {}).get("job")
        if isinstance(job, str):
            jobs.setdefault(job, []).append(r)
    if len(jobs) > 1:
        said = "; ".join(f"rank(s) {int_ranges(rs, sep=', ', most=8)} job {job}" for job, rs in list(jobs.items())[:3])
        raise UserError(f"{path}: its rank folders were recorded by {len(jobs)} different jobs (meta.json "
                        f"clock.job: {said}{'; …' if len(jobs) > 3 else ''}): a rank folder copied from another "
                        "run? Give each run a directory of its own")
    if jobs:
        named = next(iter(jobs.values()))
        other = [r for r in aligned if r not in named]
        if other:
            raise UserError(f"{path}: rank(s) {int_ranges(other, sep=', ', most=8)} name no job in meta.json "
                            f"clock.job, while rank(s) {int_ranges(named, sep=', ', most=8)} do: recorded by "
                            "another recorder, so by another run? Give each run a directory of its own")
        return
    started = sorted((metas[r]["started_ns"], r) for r in aligned if isinstance(metas[r].get("started_ns"), int))
    groups: list[list[tuple[int, int]]] = []  # starts in time order, split where they lie the spread apart
    for t, r in started:
        if groups and t - groups[-1][-1][0] <= START_SPREAD_NS:
            groups[-1].append((t, r))
        else:
            groups.append([(t, r)])
    if len(groups) > 1:
        first = groups[0][0][0]
        said = "; ".join(f"rank(s) {int_ranges([r for _, r in g], sep=', ', most=8)}"
                         + (f" {_duration(g[0][0] - first)} later" if i else " first")
                         for i, g in enumerate(groups[:3]))
        raise UserError(f"{path}: its rank folders started recording far apart ({said}{'; …' if len(groups) > 3 else ''};"
                        " meta.json started_ns), where one job's ranks start together, at the clock alignment: a "
                        "rank folder copied from another run? Give each run a directory of its own")


def _duration(ns: int) -> str:
    s = ns / 1e9
    if s < 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"
