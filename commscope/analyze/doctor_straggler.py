"""The doctor's straggler rule (rule 7 of commscope.analyze.doctor, checked when no crash, hang, desync
or missing rank explains the run): `check_straggler(trace)` gives the straggler verdict, or the ok /
insufficient one that says what was judged.

Who made whom wait comes from analyze.waiting (the same `instances` as the report's straggler table), on
device-side arrivals where the trace has them, else on host launch times. A step is judged unless it is
noise (warm-up, the profiler window or its export). In a judged step a rank is flagged when the others
waited for it at least the bar: a share of the run's median step (STRAGGLER_PCT_DEVICE for device-timed
arrivals, STRAGGLER_PCT_HOST for host-timed ones, whose speed varies with OS scheduling, and then never
below STRAGGLER_FLOOR_MS_HOST), or the user's `straggler_pct` / `straggler_ms`, and never below three
times the ranks' clock-alignment error. A rank that made the others wait at least 30 % of a default bar
(the share, or the host floor) in most judged steps is flagged in those steps, though few or none reach the
bar (a steady lag: it lengthens the median step the share is of, and millisecond steps stay under the
floor). The culprits are the flagged ranks that caused at least
half as much waiting as the worst; the confidence says how persistent (most judged steps) or how far over
the bar (STRAGGLER_MARGIN_HIGH) that was. docs/faults.md has the measurements behind the bars.

Invariants: a pure function of the trace's frames; the evidence lists at most MAX_INSTANCES collectives
per flagged (step, rank) and MAX_INSTANCES_TOTAL in all, so a long run's verdict stays small.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from commscope.analyze import clocks, skew, waiting
from commscope.analyze.diagnosis import Diagnosis, iso_ns, ranks_text
from commscope.load.frames import Trace
from commscope.rundir.schema import EVENTS
from commscope.util.ranges import int_ranges

# Default bars for the waiting a rank causes in one step, as a share (%) of the run's median step time.
# Device-timed arrivals (GPU kernels) vary by well under a percent between healthy ranks; host-timed ones
# (CPU ranks) vary with OS scheduling: healthy 2- and 4-rank tiny-preset runs on a busy 2-core machine
# showed a rank making the others wait up to 0.97x the median step in one step (docs/faults.md).
STRAGGLER_PCT_DEVICE = 10.0
STRAGGLER_PCT_HOST = 100.0
# A share of a millisecond step is below what OS scheduling alone costs a host-timed arrival on a loaded
# machine (a runnable rank waits for a core): healthy 2-rank runs of examples/plain_loop.py (3-12 ms steps)
# beside two busy processes on a 2-core machine went over the 100 % share (bench/doctor_healthy.py
# --busy 2, docs/faults.md). The default host bar is never below this floor, 9x the most waiting seen
# there and still 30x under the README's 1.5 s delay drill.
STRAGGLER_FLOOR_MS_HOST = 50.0
# A step in which a rank caused at least this many times the bar of waiting is unmistakable on its own:
# healthy runs stay about at the bar or under it (CPU ranks: up to 0.97× the 100 % share, 0.28× the host
# floor, in docs/faults.md's runs; GPU ranks: about 0.1×), so one such stall rates confidence high even when
# it happened once (an episode, not persistent).
STRAGGLER_MARGIN_HIGH = 5.0
# Why the profiler's steps are no evidence either way, and what judges them, for the verdict that says a
# rank made the others wait there past the bar. (Warm-up is left out of it: a compiled run's first step
# stalls ranks unevenly by design, and the summary already says it was not judged.)
NOT_JUDGED = {
    "profiler window": ("the profiler's own start and overhead delay the ranks there",
                        "a run profiled in other steps judges it"),
    "profiler export": ("each rank writes its trace there, at its own pace", "a run profiled in other steps judges it"),
}
# A rank under the default bar, where that is a share of the median step, but at least STEADY_SHARE of it in
# at least STEADY_OF_JUDGED of the judged steps (and STEADY_MIN_STEPS) is a straggler, a steady lag
# (_steady_under_bar): medium confidence, high from STEADY_SHARE_HIGH. Healthy runs' largest waiting in a step
# comes from a different rank or step each time: the most any rank reached in three quarters of the judged
# steps was 0.11x the bar in healthy 2-, 4- and 8-rank runs on a busy 2-core machine, 0.03x the host floor
# in healthy millisecond-step runs (details.steadiest, bench/doctor_healthy.py; docs/faults.md)
STEADY_SHARE = 0.3
STEADY_SHARE_HIGH = 0.5
# The bars a steady lag is read under: the default ones. On host-timed arrivals a rank slow in every step
# stays under both: the share because it lengthens the median step, the floor because millisecond steps are
# shorter than it.
STEADY_BARS = ("share of median step", "host scheduling floor")
STEADY_OF_JUDGED = 0.75
STEADY_MIN_STEPS = 3
MAX_INSTANCES = 20  # per flagged (step, rank) in the evidence: the ones that caused the most waiting
MAX_INSTANCES_TOTAL = 200  # and in all, so a long run's evidence stays small


def _bar(inst: pd.DataFrame, trace: Trace, straggler_ms: float | None, straggler_pct: float | None,
         median_step_ns: float) -> tuple[float, dict]:
    """The least waiting (ns, mean per waiting rank) in one step that is evidence, and how it was set
    (`set_by`: "--straggler-ms", "--straggler-pct", "share of median step", "host scheduling floor" or
    "clock-alignment error")."""
    host = bool(len(inst)) and bool((inst["timing"] == "host").any())
    err = max((m.get("clock", {}).get("error_ns", 0) or 0 for m in trace.config.get("meta", {}).values()), default=0)
    if straggler_ms is not None:
        bar, how = straggler_ms * 1e6, {"kind": "absolute", "ms": straggler_ms, "set_by": "--straggler-ms"}
    else:
        pct = straggler_pct if straggler_pct is not None else (STRAGGLER_PCT_HOST if host else STRAGGLER_PCT_DEVICE)
        bar = pct / 100 * median_step_ns
        how = {"kind": "relative", "pct_of_median_step": pct, "arrivals": "host" if host else "device",
               "set_by": "--straggler-pct" if straggler_pct is not None else "share of median step"}
        # the floor calibrates the default; a bar the user gives is theirs to set, below the noise if they wish
        if host and straggler_pct is None:
            how["host_floor_ms"] = STRAGGLER_FLOOR_MS_HOST
            if STRAGGLER_FLOOR_MS_HOST * 1e6 > bar:
                bar, how["set_by"] = STRAGGLER_FLOOR_MS_HOST * 1e6, "host scheduling floor"
    how["clock_error_ms"] = float(err) / 1e6
    if 3 * float(err) > bar:  # arrivals compared across ranks are only as good as their clocks
        bar, how["set_by"] = 3 * float(err), "clock-alignment error"
    how["ms"] = bar / 1e6
    return bar, how


def _confidence(flagged: int, judged: int, margin: float = 0.0) -> str:
    """`margin`: the most waiting the culprit caused in one step, as a multiple of the bar."""
    if flagged >= 2 and 2 * flagged >= judged:
        return "high"  # persistent: most judged steps, and more than one
    if margin >= STRAGGLER_MARGIN_HIGH:
        return "high"  # unmistakable: far beyond what healthy runs show, even once
    if 2 * flagged >= judged:
        return "medium"  # as persistent as the data can show (one or two judged steps)
    return "low"  # an episode: fewer than half of the judged steps, none far over the bar


def _instance_records(inst: pd.DataFrame, launches: pd.DataFrame) -> list[dict]:
    out = []
    for r in inst.itertuples():
        ls = launches.get((r.group, r.seq))
        out.append({"group": str(r.group), "sequence": int(r.seq), "label": r.label, "op": r.op, "step": int(r.step),
                    "ranks": int(r.n_ranks), "last_rank": int(r.last_rank), "first_arrival_ns": iso_ns(r.first_ns),
                    "last_arrival_ns": iso_ns(r.last_ns), "arrival_skew_ms": r.skew_ns / 1e6,
                    "waiting_caused_ms": r.wait_caused_ns / 1e6, "mean_wait_ms": r.lost_ns / 1e6,
                    "arrival": r.timing,
                    # host side, for reference: when the hosts queued it (on GPUs long before the device ran it)
                    "launch_skew_ms": None if ls is None else ls[0] / 1e6,
                    "launched_last_rank": None if ls is None else ls[1]})
    return out


@dataclass(frozen=True)
class _Yardstick:
    """What a step's waiting is judged against: the run's median step, over which steps, and the bar."""
    median_step: float          # ns
    median_steps: list[int]     # the steps the median is over
    scope: str                  # those steps in words, for the summary
    bar: float                  # ns of waiting per step
    how: dict                   # how the bar was set (_bar)
    judged_steps: list[int]


def check_straggler(trace: Trace, *, straggler_ms: float | None = None, straggler_pct: float | None = None,
                    warmup_steps: int = waiting.WARMUP_STEPS) -> Diagnosis:
    """The straggler verdict, or the ok/insufficient one that says what was judged (module docstring)."""
    inst = waiting.instances(trace.collectives)
    noise = waiting.noise_steps(trace, warmup_steps)
    times = waiting.step_times(trace.steps)
    judged_steps = [int(s) for s in times.index if int(s) not in noise]
    src = [EVENTS if trace.source == "run" else "trace"]
    excluded = {str(k): v for k, v in sorted(noise.items())}
    if trace.world_size == 1:
        return _one_rank(trace, src)
    clock = clocks.disagreement(trace.collectives)
    if clock:
        return Diagnosis("insufficient", sources=src, details={"clock_offsets_ms": {str(r): ms for r, ms in clock.items()}},
                         summary=(f"insufficient: no crash, hang or desync found in {trace.world_size} rank(s), but "
                                  f"stragglers cannot be judged: {clocks.disagreement_text(clock)}."))
    if not judged_steps or not len(inst):
        why = ("the input holds no collectives" if not len(trace.collectives) else
               "no collective reached by every member" if not len(inst) else
               "no step left to judge" + (f" (excluded: {_noise_text(noise)})" if noise else " (no steps)"))
        return Diagnosis("insufficient", sources=src, details={"excluded_steps": excluded}, summary=(
            f"insufficient: no crash, hang or desync found in {trace.world_size} rank(s), but stragglers cannot "
            f"be judged: {why}."))
    # The yardstick: the median over every step outside the profiler window, warm-up included, so that
    # with few steps the straggler's own (lengthened) step does not set the bar it is judged by.
    median_steps = [int(s) for s in times.index if noise.get(int(s)) in (None, "warm-up")]
    median_step = float(np.median(times.loc[median_steps]))
    steps_of = pd.to_numeric(inst["step"], errors="coerce")
    unjudged = inst[steps_of.isin([s for s in noise if noise[s] in NOT_JUDGED])]
    inst = inst[steps_of.isin(judged_steps)]
    bar, how = _bar(inst, trace, straggler_ms, straggler_pct, median_step)
    y = _Yardstick(median_step, median_steps, _median_scope(median_steps, {s: why for s, why in noise.items()
                                                                          if s in times.index}),
                   bar, how, judged_steps)
    per = waiting.by_step(inst)
    per["pct"] = 100 * per["lost_ns"] / median_step
    flagged = per[per["lost_ns"] >= bar]
    details = {"threshold": how, "median_step_ms": median_step / 1e6, "median_step_steps": median_steps,
               "judged_steps": judged_steps, "excluded_steps": excluded}
    # a steady lag is a straggler too, though few or none of its steps reach the bar (_steady_under_bar): read
    # under the default bars only; one the user set is theirs, and one set by the clocks' error would read a
    # constant offset as a steady lag
    steady = _steady_under_bar(per, y) if how["set_by"] in STEADY_BARS else None
    if steady is not None:
        details["steady_under_bar"] = steady
        mine = per[(per["rank"] == steady["rank"]) & per["step"].isin(steady["steps"])]
        flagged = pd.concat([flagged, mine]).drop_duplicates(["step", "rank"]) if len(flagged) else mine
    if not len(flagged):
        if how["set_by"] in STEADY_BARS:  # how far healthy noise stayed from a steady lag
            details["steadiest"] = steadiest(per, y)
        return _no_straggler(trace, src, per, unjudged, noise, y, details)
    return _straggler(trace, src, flagged, inst, times, y, details)


def _no_straggler(trace: Trace, src: list[str], per: pd.DataFrame, unjudged: pd.DataFrame, noise: dict,
                  y: _Yardstick, details: dict) -> Diagnosis:
    """The ok verdict: what was judged, the bar, and how close the most waiting came to it."""
    top = per.sort_values("lost_ns", ascending=False).head(1)
    worst = ""
    if len(top):
        # How close a healthy run came to the bar: what says whether the bar has margin over noise.
        most = {"rank": int(top["rank"].iloc[0]), "step": int(top["step"].iloc[0]),
                "mean_wait_ms": float(top["lost_ns"].iloc[0]) / 1e6,
                "pct_of_median_step": float(top["pct"].iloc[0]),
                "bar_multiple": float(top["lost_ns"].iloc[0]) / y.bar if y.bar > 0 else None}
        details["most_waiting"] = most
        worst = (f"; the most any rank made the others wait in a step: rank {most['rank']}, "
                 f"{most['mean_wait_ms']:,.1f} ms in step {most['step']} "
                 f"({most['pct_of_median_step']:.1f} % of the median step)")
    return Diagnosis("ok", sources=src, details=details, summary=(
        f"ok: no crash, hang, desync or straggler in {trace.world_size} rank(s); judged steps "
        f"{int_ranges(y.judged_steps)}{_excluded_text(noise)}, straggler bar {y.how['ms']:,.1f} ms of waiting per "
        f"step{_bar_text(y.how, f'{y.median_step / 1e6:,.1f} ms median step{y.scope}')}{worst}"
        f"{_unjudged_text(unjudged, noise, y.bar, details)}."))


def steadiest(per: pd.DataFrame, y: _Yardstick) -> dict | None:
    """The rank that kept the others waiting longest in three quarters of the judged steps (STEADY_OF_JUDGED,
    at least STEADY_MIN_STEPS): {"rank", "bar_multiple"}, the waiting it caused in the least of its steps
    that many, as a multiple of the bar. None with too few judged steps or no bar. What a steady lag is
    measured by, and what an ok verdict says of how far healthy noise stayed from one."""
    n = max(STEADY_MIN_STEPS, int(np.ceil(STEADY_OF_JUDGED * len(y.judged_steps))))
    if y.bar <= 0 or not len(per) or len(y.judged_steps) < STEADY_MIN_STEPS:
        return None
    best = None
    for rank, lost in per.groupby("rank", sort=True)["lost_ns"]:
        v = np.sort(lost.to_numpy(np.float64))[::-1]  # a step without a row: this rank caused no waiting there
        least = float(v[n - 1]) if len(v) >= n else 0.0
        if best is None or least > best[1]:
            best = (int(rank), least)
    return {"rank": best[0], "bar_multiple": best[1] / y.bar} if best else None


def _steady_under_bar(per: pd.DataFrame, y: _Yardstick) -> dict | None:
    """The rank that made the others wait at least STEADY_SHARE of the bar in most judged steps (at least
    STEADY_MIN_STEPS, and STEADY_OF_JUDGED of them), else None: a straggler though no step reaches the bar;
    `strong` where that was STEADY_SHARE_HIGH of it. A rank slow in every step lengthens the median step it
    is measured against, so on host-timed arrivals, whose bar is a whole median step, its waiting stays under
    the bar however steady it is; healthy runs' noise moves from rank to rank and step to step
    (docs/faults.md)."""
    top = steadiest(per, y)
    if top is None or top["bar_multiple"] < STEADY_SHARE:
        return None
    mine = per[(per["rank"] == top["rank"]) & (per["lost_ns"] >= STEADY_SHARE * y.bar)]
    return {"rank": top["rank"], "steps": sorted(int(s) for s in mine["step"].unique()), "judged": len(y.judged_steps),
            "mean_pct_of_median_step": float(mine["pct"].mean()), "bar_multiple": top["bar_multiple"],
            "strong": top["bar_multiple"] >= STEADY_SHARE_HIGH}


def _straggler(trace: Trace, src: list[str], flagged: pd.DataFrame, inst: pd.DataFrame, times: pd.Series,
               y: _Yardstick, details: dict) -> Diagnosis:
    """The straggler verdict on the flagged (step, rank)s: the culprits, their evidence and persistence."""
    totals = flagged.groupby("rank")["wait_caused_ns"].sum().sort_values(ascending=False, kind="stable")
    culprits = [int(r) for r, w in totals.items() if w >= 0.5 * totals.iloc[0]]
    worst = culprits[0]
    mine = flagged[flagged["rank"].isin(culprits)].sort_values(["step", "rank"])
    evidence, based_on = _evidence(trace, mine, inst, times)
    persistence = {str(c): _persistence(mine[mine["rank"] == c], float(totals.loc[c]), y) for c in culprits}
    top = max((b for b in based_on if b["last_rank"] == worst), key=lambda b: b["waiting_caused_ms"])
    p = persistence[str(worst)]
    # where the worst culprit's waiting went, per label: the longest single wait (`top`, the verdict's
    # label/step/sequence) may be on a label that holds less of it than another label's many shorter waits
    by_label = _waiting_by_label(inst, worst, p["steps"])
    details["waiting_by_label_ms"] = by_label
    others = [r for r in totals.index if int(r) not in culprits]
    details.update(persistence=persistence, labels=list(dict.fromkeys(b["label"] for b in sorted(
        based_on, key=lambda b: -b["waiting_caused_ms"]))), instances=based_on,
        also_late={str(int(r)): float(totals.loc[r]) / 1e6 for r in others})
    who = f"rank {worst}" if len(culprits) == 1 else f"ranks {ranks_text(culprits)} (worst: rank {worst})"
    arrivals = ("communication kernel (NCCL, RCCL) / CUDA event starts on the device"
                if y.how.get("arrivals") != "host" else "launch calls, each after the group's previous collective")
    mean_lost = float(mine.loc[mine["rank"] == worst, "lost_ns"].mean()) / 1e6
    n, judged = len(p["steps"]), len(y.judged_steps)
    # with few steps the culprit's own lengthened steps weigh in the median it is measured against: said
    # right after the steps the median is of, before the steps it leaves out, which "them" must not name
    own = [s for s in p["steps"] if s in y.median_steps]
    of = f" of steps {int_ranges(y.median_steps)}"
    scope = y.scope
    if own and 2 * len(own) >= len(y.median_steps) and scope.startswith(of):
        scope = of + (", one of them the late step itself, whose delay weighs in so short a median" if len(own) == 1
                      else f", {len(own)} of them the late steps themselves, whose delays weigh in so short a "
                      "median") + scope[len(of):]
    # the waiting is averaged over the steps where the culprit was late, not over every judged step
    when = (f"in the 1 step where it was late (step {p['steps'][0]}, of {judged} judged)" if n == 1 else
            f"on average over the {n} steps where it was late ({int_ranges(p['steps'])}, of {judged} judged)")
    steady = details.get("steady_under_bar")
    over = int((mine.loc[mine["rank"] == worst, "lost_ns"] >= y.bar).sum())  # its steps at or over the bar
    # the steady lag is the evidence where the worst culprit is that rank and its steps over the bar are not
    # persistent by themselves: high only for a large share of the bar, or one stall far over it
    steady = steady if steady and steady["rank"] == worst and not (over >= 2 and 2 * over >= judged) else None
    if steady:
        p["confidence"] = persistence[str(worst)]["confidence"] = (
            "high" if steady["strong"] or p["max_bar_multiple"] >= STRAGGLER_MARGIN_HIGH else "medium")
    lengthens = ("a rank slow in every step lengthens the median step the bar is a share of"
                 if y.how["set_by"] == "share of median step" else
                 "the floor is above what one step of this length can show")
    why = (f"steady: {n} of {judged} judged steps at {100 * STEADY_SHARE:.0f} % of the bar or more (at least "
           f"{100 * steady['bar_multiple']:.0f} % in three quarters of them), "
           f"{'though none reaches it' if not over else f'{over} of them over it'}, as {lengthens}" if steady else
           "persistent: most judged steps" if n >= 2 and 2 * n >= judged else
           f"one stall {p['max_bar_multiple']:.1f}× the bar, far beyond healthy noise"
           if p["max_bar_multiple"] >= STRAGGLER_MARGIN_HIGH else
           "as persistent as so few judged steps can show" if 2 * n >= judged else
           f"an episode: {n} of {judged} judged steps, at most {p['max_bar_multiple']:.1f}× the bar")
    return Diagnosis(
        "straggler", culprits, label=top["label"], step=top["step"], sequence=top["sequence"], group=top["group"],
        evidence=evidence, sources=src, confidence=p["confidence"], details=details,
        summary=(f"straggler: {who} made the other ranks wait {mean_lost:,.1f} ms each "
                 f"({p['mean_pct_of_median_step']:,.1f} % of the {y.median_step / 1e6:,.1f} ms median step{scope}) "
                 f"{when}; "
                 f"{p['waiting_caused_ms']:,.1f} ms of waiting in all{_by_label_text(by_label)}; the longest at "
                 f"'{top['label']}' (step {top['step']}, seq {top['sequence']}, {top['mean_wait_ms']:,.1f} ms per "
                 f"waiting rank). Confidence {p['confidence']} "
                 f"({why}); found by arrival ({arrivals}), bar {y.how['ms']:,.1f} ms per step{_bar_text(y.how)}."))


def _waiting_by_label(inst: pd.DataFrame, rank: int, steps: list[int]) -> dict[str, float]:
    """ms of waiting `rank` caused per label over `steps` (the collectives it came last to), most first."""
    steps_of = pd.to_numeric(inst["step"], errors="coerce")
    mine = inst[(inst["last_rank"] == rank) & steps_of.isin(steps) & (inst["wait_caused_ns"] > 0)]
    per = mine.groupby(mine["label"].astype(str), sort=False)["wait_caused_ns"].sum()
    per = per.sort_values(ascending=False, kind="stable")
    return {str(k): float(v) / 1e6 for k, v in per.items()}


def _by_label_text(by_label: dict[str, float], most: int = 3) -> str:
    """", most at 'a' (52.6 ms), then 'b' (36.3 ms)": the labels that hold the waiting, most first."""
    if not by_label:
        return ""
    if len(by_label) == 1:
        return f", all of it at '{next(iter(by_label))}'"
    said = [f"'{k}' ({v:,.1f} ms)" for k, v in list(by_label.items())[:most]]
    more = len(by_label) - most
    return (f", most at {said[0]}" + (f", then {', '.join(said[1:])}" if len(said) > 1 else "")
            + (f" and {more} more label{'s' if more > 1 else ''}" if more > 0 else ""))


def _evidence(trace: Trace, mine: pd.DataFrame, inst: pd.DataFrame, times: pd.Series) -> tuple[list, list]:
    """Per flagged (step, culprit): its evidence row, and the collectives it came last to that caused the
    most waiting (at most MAX_INSTANCES each, MAX_INSTANCES_TOTAL in all, most waiting first)."""
    launches = {(g, q): (sk, int(lr)) for g, q, sk, lr in skew.launch_skew(trace.collectives)[
        ["group", "seq", "skew_ns", "last_rank"]].itertuples(index=False)}
    evidence, based_on = [], []
    for r in mine.itertuples():
        evidence.append({"rank": int(r.rank), "step": int(r.step), "instances": int(r.instances),
                         "waiting_caused_ms": r.wait_caused_ns / 1e6, "mean_wait_ms": r.lost_ns / 1e6,
                         "pct_of_median_step": r.pct, "step_ms": float(times.loc[r.step]) / 1e6})
        rows = inst[(inst["step"] == r.step) & (inst["last_rank"] == r.rank) & (inst["wait_caused_ns"] > 0)]
        based_on += _instance_records(rows.sort_values("wait_caused_ns", ascending=False).head(MAX_INSTANCES),
                                      launches)
    return evidence, sorted(based_on, key=lambda b: -b["waiting_caused_ms"])[:MAX_INSTANCES_TOTAL]


def _persistence(f: pd.DataFrame, caused_ns: float, y: _Yardstick) -> dict:
    """How persistent a culprit's lateness was (`f`: its flagged steps) and how far over the bar."""
    margin = float(f["lost_ns"].max()) / y.bar if y.bar > 0 else float("inf")
    judged = len(y.judged_steps)
    return {"steps": [int(x) for x in f["step"]], "judged_steps": judged, "share_of_judged_steps": len(f) / judged,
            "mean_pct_of_median_step": float(f["pct"].mean()), "max_pct_of_median_step": float(f["pct"].max()),
            "waiting_caused_ms": caused_ns / 1e6, "max_bar_multiple": margin,
            "confidence": _confidence(len(f), judged, margin)}


def _one_rank(trace: Trace, src: list[str]) -> Diagnosis:
    """The verdict on a job of one rank: ok, unless nothing was recorded, or the world size is only the
    count of traces read ("taken as 1") while the trace shows communication, the sign of a job with peers
    whose traces are missing. The GPUs listed in deviceProperties alone are no such sign: it lists every
    device the process could see, on an 8-GPU machine also for a one-GPU job."""
    recorded = {"steps": len(trace.steps), "collectives": len(trace.collectives), "kernels": len(trace.kernels),
                "compute": len(trace.compute), "regions": len(trace.regions)}
    if not any(recorded.values()):
        return Diagnosis("insufficient", sources=src, details={"recorded": recorded}, summary=(
            "insufficient: nothing recorded: the input holds no steps, collectives, kernels or ops, so there is "
            "nothing to judge."))
    guessed = trace.config.get("world_size_from") == "ranks read"
    devices = trace.config.get("deviceProperties")
    n_dev = len(devices) if isinstance(devices, list) else 0
    on = f" on a machine with {n_dev} GPUs (deviceProperties)" if n_dev > 1 else ""
    if guessed and len(trace.collectives):
        return Diagnosis("insufficient", sources=src,
                         details={"world_size": "unknown", "collectives": len(trace.collectives), "devices": n_dev},
                         summary=(
            f"insufficient: the job's world size is unknown (no distributedInfo, no process-group sizes; taken "
            f"as 1 from the one trace read), but this rank ran {len(trace.collectives)} collective(s){on}: a job "
            "that communicates has peers, and without their traces who waited for whom cannot be judged. Load "
            "every rank's trace, recorded with a process group (distributedInfo) or named rank<N>."))
    if guessed:
        return Diagnosis("ok", sources=src, details={"world_size": "unknown", "devices": n_dev}, summary=(
            "ok: one trace read, with no collectives and no distributedInfo (world size unknown, taken as 1): "
            "nothing shows a job of several ranks, and with one rank nobody waits for anybody, so there is no "
            "straggler or desync to find."))
    return Diagnosis("ok", sources=src, summary="ok: no crash or hang in the job's one rank; with one rank "
                     "nobody waits for anybody, so there is no straggler or desync to find.")


def _unjudged_text(unjudged: pd.DataFrame, noise: dict[int, str], bar: float, details: dict) -> str:
    """What the verdict cannot conclude: the most a rank made the others wait in a step left out, when it
    is over the bar (also `details["unjudged_most_waiting"]`); "" otherwise. Such a step is no evidence
    either way: the stall may be the rank's or the reason the step is left out."""
    per = waiting.by_step(unjudged)
    if not len(per) or float(per["lost_ns"].max()) < bar:
        return ""
    top = per.loc[per["lost_ns"].idxmax()]
    step, rank, ms = int(top["step"]), int(top["rank"]), float(top["lost_ns"]) / 1e6
    why = noise.get(step, "")
    cause, judge = NOT_JUDGED.get(why, ("", ""))
    details["unjudged_most_waiting"] = {"rank": rank, "step": step, "excluded": why, "mean_wait_ms": ms}
    return (f"; not judged: in step {step} ({why}) rank {rank} made the others wait {ms:,.1f} ms, over the bar, "
            f"but {cause}, so that step is no evidence either way ({judge})")


def _bar_text(how: dict, median: str = "") -> str:
    """`median`: what the median step is ("41.8 ms median step of steps 10-11"), where the text has not
    said it yet."""
    share = f"{how.get('pct_of_median_step', 0):g} % of the {median or 'median step'}"
    if how["set_by"] == "host scheduling floor":
        return f" (the {how['host_floor_ms']:g} ms floor of host-timed arrivals, above OS scheduling noise; {share} is less)"
    if how["set_by"] == "clock-alignment error":
        return f" (3× the {how['clock_error_ms']:,.2f} ms clock-alignment error)"
    if how["kind"] != "relative":
        return " (--straggler-ms)"
    return f" ({share})"


def _median_scope(steps: list[int], noise: dict[int, str]) -> str:
    """Which steps the median step time covers (`noise`: the recorded steps left out, with why), for the
    verdict's text: `run`, `report` and `compare` print other step-time figures of the same run."""
    left = {s: why for s, why in noise.items() if why != "warm-up"}
    return f" of steps {int_ranges(steps)}" + (f", not {_noise_text(left)}" if left else "")


def _noise_text(noise: dict[int, str]) -> str:
    by: dict[str, list[int]] = {}
    for s, why in sorted(noise.items()):
        by.setdefault(why, []).append(s)
    def said(why: str, steps: list[int]) -> str:
        these = f"step{'s' if len(steps) > 1 else ''} {int_ranges(steps)}"
        if why.startswith(waiting.UNRECORDED):  # "steps 12-13, which ranks 4-7 did not record"
            return f"{these}, which {why[len(waiting.UNRECORDED):]} did not record"
        return f"{why} {these}"  # "warm-up steps 0-1"

    return ", ".join(said(k, v) for k, v in by.items())


def _excluded_text(noise: dict[int, str]) -> str:
    return f" (not judged: {_noise_text(noise)})" if noise else ""
