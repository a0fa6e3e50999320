"""Who made whom wait: the one model behind the doctor's straggler verdict and the report's straggler table.

A collective instance (process group, sequence number) completes only once its last member is ready, so
every other member waits from its own arrival to the last one. Arrival = when the rank became *ready on
the device*, not when its host queued the call:
- device-timed collectives (timing `kernel`: the NCCL kernel of a Kineto trace; `cuda_event`: a run
  directory's CUDA events): the start on the device (`start_ns`). A kernel starts once the stream reached
  it, i.e. once the work queued before it (the rank's compute) finished; the host often queues it tens of
  ms earlier (docs/analysis.md);
- host-timed collectives (CPU ranks: gloo run directories and traces): the launch call (`call_ns`), which
  on a CPU follows the compute before it, but never before the group's previous instance could begin
  (the latest arrival at any earlier seq of the group): a group's collectives run in order, so a rank that
  launched a whole burst late is charged once, at the first of them, not at every one.

Per instance (`instances`, complete ones only: every member of the group present): skew_ns = last − first arrival, last_rank, `wait_caused_ns` = Σ over the others
(last − arrival_i), `lost_ns` = wait_caused / (n − 1) = how long the others waited on average, `timing`
("device" or "host"). Per rank (`by_rank`, the report's straggler table): times_last, last_share,
wait_caused_ns, score = its share of all waiting caused. Per (step, last rank) (`by_step`, the evidence the
doctor judges): instances, wait_caused_ns, lost_ns. Per member of each instance (`lateness`): how late it
arrived after the first, the input of analyze.lateness's distribution. `unjudged`: why nobody can be
judged where no instance is complete (a partial trace set, one rank, no collectives), the sentence shown
in place of an empty straggler table. `noise_steps`: the steps whose waiting is no ground
for a verdict (warm-up, profiler window and export, steps that not every rank recorded).

Invariant: frames in, frames out; the straggler verdict (analyze.doctor), the report's table
(analyze.summary) and the doctor's evidence all read `instances`, so they cannot disagree. Where the
ranks' clocks disagree (analyze.clocks) `instances` and `lateness` are empty and `unjudged` says why:
arrivals compared across ranks would measure the clocks, not the ranks.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.analyze import clocks
from commscope.analyze.skew import SKEW_COLS, arrival_order, complete, complete_rows, missing_members, spread
from commscope.load.frames import Trace
from commscope.util.ranges import int_ranges
from commscope.util.step_range import parse_step_range

INSTANCE_COLS = SKEW_COLS + ["lost_ns", "timing"]
RANK_COLS = ["rank", "times_last", "last_share", "wait_caused_ns", "score"]
STEP_COLS = ["step", "rank", "instances", "wait_caused_ns", "lost_ns"]
LATENESS_COLS = ["group", "seq", "step", "label", "rank", "lateness_ns"]
DEVICE_TIMING = ("kernel", "cuda_event")
WARMUP_STEPS = 1  # step 0 carries one-time costs: allocator growth, compilation, the first NCCL setup


def device_timed(collectives: pd.DataFrame) -> np.ndarray:
    """Per row: True where the collective's start on the device is known."""
    return (collectives["timing"].isin(DEVICE_TIMING) & collectives["start_ns"].notna()).to_numpy(bool)


def arrival(collectives: pd.DataFrame) -> pd.Series:
    """Each row's own arrival (Int64 ns): device start where known, else the launch call. `instances`
    additionally keeps a host-timed arrival from preceding the group's previous instance."""
    return collectives["start_ns"].where(device_timed(collectives), collectives["call_ns"]).astype("Int64")


def instances(collectives: pd.DataFrame) -> pd.DataFrame:
    """One row per matched instance seen on ≥ 2 ranks, INSTANCE_COLS (module docstring); none where the
    ranks' clocks disagree (analyze.clocks): arrivals compared across ranks would measure the clocks."""
    dev = device_timed(collectives)
    out = spread(collectives, arrival(collectives), floor_rows=~dev)
    if not len(out) or clocks.disagreement(collectives):
        return pd.DataFrame(columns=INSTANCE_COLS)
    host_keys = pd.MultiIndex.from_arrays([collectives["group"].to_numpy()[~dev],
                                           collectives["seq"].to_numpy()[~dev]])
    host = pd.MultiIndex.from_arrays([out["group"].to_numpy(), out["seq"].to_numpy()]).isin(host_keys)
    out["lost_ns"] = out["wait_caused_ns"] / (out["n_ranks"] - 1)
    out["timing"] = np.where(host, "host", "device")
    out = out[complete(collectives, out["group"], out["seq"], out["n_ranks"].to_numpy())].reset_index(drop=True)
    return out[INSTANCE_COLS]


def lateness(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per member of each instance `instances` keeps: how late it arrived after the instance's first
    arrival (`lateness_ns`, int64 ns; 0 for the first), on the same arrivals. LATENESS_COLS, instance by
    instance, each by arrival."""
    dev = device_timed(collectives)
    rows, t, start, end = arrival_order(collectives, arrival(collectives), floor_rows=~dev)
    if not len(rows) or clocks.disagreement(collectives):  # as `instances`
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("rank", "lateness_ns") else object)
                             for c in LATENESS_COLS})
    n = end - start + 1
    seq = collectives["seq"].to_numpy()
    group = collectives["group"].array.take(rows[start])
    keep = (n >= 2) & complete(collectives, group, seq[rows[start]], n)
    member = np.repeat(keep, n)
    first = np.repeat(t[start], n)
    at = rows[member]
    return pd.DataFrame({"group": collectives["group"].array.take(at), "seq": seq[at],
                         "step": collectives["step"].to_numpy()[at], "label": collectives["label"].array.take(at),
                         "rank": collectives["rank"].to_numpy()[at].astype(np.int64),
                         "lateness_ns": (t - first)[member]})


def by_rank(inst: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """Per rank: how often it was last, and the waiting it caused (worst first). No rows without an
    instance: then nobody can be judged, and a row of zeros would read as "measured: made nobody wait"
    (`unjudged` says why instead)."""
    if not len(inst):
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("rank", "times_last") else np.float64)
                             for c in RANK_COLS})
    base = pd.DataFrame({"rank": list(ranks)})
    # per rank by counting in numpy, memory O(ranks + instances) (the waits are whole ns in float64, far
    # below 2⁵³: their sums are exact in any order, so equal to a groupby's)
    last, wait = inst["last_rank"].to_numpy(), inst["wait_caused_ns"].to_numpy(np.float64)
    r = base["rank"].to_numpy()
    at = pd.Index(r).get_indexer(last)
    mine = at >= 0
    times_last = np.bincount(at[mine], minlength=len(r)).astype(np.int64)
    caused = np.bincount(at[mine], weights=wait[mine], minlength=len(r))
    total = caused.sum()
    out = pd.DataFrame({"rank": r, "times_last": times_last, "last_share": times_last / len(inst),
                        "wait_caused_ns": caused, "score": caused / total if total > 0 else 0.0})
    return out.sort_values(["score", "times_last"], ascending=False).reset_index(drop=True)


def unjudged(inst: pd.DataFrame, collectives: pd.DataFrame, n_present: int, world_size: int) -> str | None:
    """Why nobody can be judged (who made whom wait, arrival and launch skew), or None where `inst`
    (instances(collectives)) holds an instance. `n_present` of the job's `world_size` ranks are in the
    input. The sentence replaces the straggler table wherever it is shown, so that its zeros only ever
    mean "measured zero"."""
    if len(inst):
        return None
    if not len(collectives):
        return "cannot be judged: the input holds no collectives"
    clock = clocks.disagreement(collectives)
    if clock:
        return f"cannot be judged: {clocks.disagreement_text(clock)}"
    keyed = (collectives["group"].notna() & collectives["seq"].notna()).any()
    if keyed and not complete_rows(collectives).any():
        return f"cannot be judged: {missing_members(n_present, world_size)}"
    return "cannot be judged: no collective has a known arrival on two or more ranks"


def unjudged_notes(reason: str | None, n_present: int, n_collectives: int) -> list[str]:
    """The report's note for `unjudged`'s reason, or none: the terminal shows no straggler table, so the
    note is where it reads that nobody was judged. None either where the report's notes say it already
    (one rank: no cross-rank comparison; no collectives at all), so the caveats a terminal prints hold
    no sentence twice."""
    if not reason or n_present <= 1 or not n_collectives:
        return []
    return [f"Stragglers, arrival skew and launch skew {reason}."]


def by_step(inst: pd.DataFrame) -> pd.DataFrame:
    """Per (step, last rank): the instances it came last to and the waiting it caused there."""
    i = inst[pd.to_numeric(inst["step"], errors="coerce").fillna(-1) >= 0]
    if not len(i):
        return pd.DataFrame(columns=STEP_COLS)
    g = i.assign(step=i["step"].astype(np.int64), rank=i["last_rank"]).groupby(["step", "rank"])
    out = g.agg(instances=("seq", "size"), wait_caused_ns=("wait_caused_ns", "sum"), lost_ns=("lost_ns", "sum"))
    return out.reset_index()[STEP_COLS]


def step_times(steps: pd.DataFrame) -> pd.Series:
    """Per step, its duration (ns, float): the median over the ranks."""
    s = steps[steps["step"] >= 0]
    if not len(s):
        return pd.Series(dtype=np.float64)
    dur = (s["end_ns"].astype("Int64") - s["start_ns"].astype("Int64")).astype("float64")
    return dur.groupby(s["step"].astype(np.int64)).median()


def profiler_window(trace: Trace) -> tuple[int, int] | None:
    """The steps [first, stop) a run directory's torch.profiler window covered, or None: from the run's
    --profile (config.json), else from its Kineto traces' own ranges mapped onto the recorded steps."""
    if trace.source != "run":
        return None
    args = trace.run_args
    if args.get("profile"):
        try:
            return parse_step_range(str(args["profile"]), "--profile", closed=True)
        except Exception:  # an unreadable spec: fall back to the traces themselves
            pass
    regions = trace.extra.get("kineto_regions")
    if not trace.config.get("files") or regions is None or not len(regions) or not len(trace.steps):
        return None
    lo, hi = regions["start_ns"].min(), regions["end_ns"].max()
    s = trace.steps
    inside = s[(s["end_ns"] >= lo) & (s["start_ns"] <= hi)]["step"]
    return (int(inside.min()), int(inside.max()) + 1) if len(inside) else None


# noise_steps' reason for a step that some ranks did not record, before the ranks ("not recorded by ranks 4-7")
UNRECORDED = "not recorded by "


def noise_steps(trace: Trace, warmup_steps: int = WARMUP_STEPS) -> dict[int, str]:
    """Steps whose waiting is no ground for a straggler verdict, with why: the first `warmup_steps`
    training steps (one-time costs that fall unevenly on the ranks), the profiler window (the profiler's
    own overhead), the step after it (each rank writes its trace between the two, at its own pace), and
    the steps some ranks did not record (`partial_steps`).

    A run directory is recorded from the run's start, so its first `warmup_steps` steps are the warm-up
    whatever their numbers (a script may count from 1); a Kineto trace's window may start late in a run,
    so there the warm-up is the steps numbered below `warmup_steps` (the training step number)."""
    out: dict[int, str] = {}
    steps = sorted(set(int(x) for x in trace.steps["step"] if x >= 0))
    warm = steps[:warmup_steps] if trace.source == "run" else [s for s in steps if s < warmup_steps]
    for s in warm:
        out[s] = "warm-up"
    win = profiler_window(trace)
    if win is not None:
        first, stop = win
        for s in range(first, stop):
            out.setdefault(s, "profiler window")
        out.setdefault(stop, "profiler export")
    for s, missing in partial_steps(trace.steps, trace.ranks).items():
        out.setdefault(s, f"{UNRECORDED}{'rank' if len(missing) == 1 else 'ranks'} {int_ranges(missing)}")
    return out


def partial_steps(steps: pd.DataFrame, ranks=None) -> dict[int, list[int]]:
    """Steps that some of `ranks` (default: the ranks with step records) did not record, with those ranks:
    traces of the ranks cut at different steps, a rank whose records end early, or a rank whose trace holds
    no step at all (no ProfilerStep: its collectives belong to no known step; a trace of another job put in
    the folder). No collective there is known to be reached by every member in that step, so its waiting is
    unknown, not zero: judging it would count a step with no evidence."""
    s = steps[steps["step"] >= 0]
    if not len(s):
        return {}
    have_steps = np.unique(s["rank"].to_numpy(np.int64))
    ranks = have_steps if ranks is None else np.union1d(have_steps, np.asarray(list(ranks), dtype=np.int64))
    by_step = s.groupby(s["step"].astype(np.int64))["rank"].nunique()
    out = {}
    for step in by_step.index[by_step.to_numpy() < len(ranks)]:
        have = s.loc[s["step"] == step, "rank"].to_numpy(np.int64)
        out[int(step)] = [int(r) for r in np.setdiff1d(ranks, have)]
    return out
