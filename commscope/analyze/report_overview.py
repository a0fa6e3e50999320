"""The numbers of the report's first screen: the headline, the top exposed labels and ranks with the reason
each is listed, and the ranks × steps heatmap of exposed communication.

`highlights(summary, diagnosis)` reads summarize()'s document (and the doctor's verdict) and picks what a
reader should look at first:
- labels: the most exposed (summary `exposed_ms`, per rank), each with its share of the step time (of
  the part launched inside the steps, `exposed_in_steps_ms`: what lies outside every step is no step
  time), how much of it compute hid (`hidden_pct`), how much is queueing behind earlier collectives of
  its group and behind which labels (`queued_ms`, `queued_behind_ms`), and the rank where it is most
  exposed;
- cause: the label most responsible for the exposed time (summary `attributed_exposed_ms`: its own
  exposure plus the queueing it caused later collectives of its group) when it is not the most exposed
  one: a straggler's delayed collective is hardly exposed itself, the next collective of its group waits
  behind it and tops the list (a 1,500 ms delay of ve0 on rank 1: smear_gate 784 ms per rank exposed, all
  of it queued behind ve0, itself exposed 0.2 ms). `cause_sentence` words it; the most exposed label's
  bullets carry it too;
- ranks: the doctor's culprit ranks first (_culprits_first), then the stragglers that made others wait
  (skew.stragglers: `times_last`, `wait_caused_ms`) and the rank with the most exposed communication;
- headline: exposed communication as a share of all step time, over all ranks and steps, and the mean
  step time with the ranks and steps it is over (`step_scope`: every step of the summary, warm-up
  included unless --steps left it out; the doctor leaves warm-up out, so its median step differs), both
  without the profiler's steps (summary `profiler_steps`: a --profile window and the step after it, the
  trace export, whose host time is the profiler's), unless every step is one of them. The per-step rows,
  the heatmap and the labels' share of the step time keep every step.
`heatmap(summary, trace, bars)` pivots the step breakdown's `exposed_comm_ms` into ranks × steps (steps
binned into at most `max_cols` columns of consecutive steps, mean per step) and gives each cell the
time range of that rank's steps on the timeline's axis (ms since TimelineBars.t0), or None when the
timeline does not draw them.

Invariant: pure functions of their inputs; every value is one of the summary's numbers or a sum, mean
or ratio of them, named in the field it lands in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, ranks_text
from commscope.analyze.step_gaps import left_out, step_list
from commscope.analyze.timeline_inflight import steps_without_end
from commscope.util.text import counted, steps_said


# A label's queueing is worth a line of its own when it is at least this share of its exposed time.
QUEUED_SHARE = 0.5

@dataclass
class Finding:
    """One listed label or rank: its name, the number it is listed for, and why (plain sentences)."""
    name: str
    exposed_ms: float | None
    why: list[str] = field(default_factory=list)


@dataclass
class Highlights:
    verdict: str                       # the doctor's verdict ("ok", "straggler", ...) or "unknown"
    verdict_summary: str
    also: list[tuple[str, str]]        # (verdict, summary) of faults beside the verdict (Diagnosis.also)
    exposed_pct: float | None          # Σ exposed_comm_ms / Σ step_ms over the (rank, step) rows counted, percent
    step_ms_mean: float | None         # mean step_ms over the same rows: warm-up included, profiler steps not
    n_steps: int
    n_ranks: int
    labels: list[Finding]
    ranks: list[Finding]
    step_range: tuple[int, int] | None = None  # first and last step of the rows step_ms_mean is over
    step_ranks: int = 0                # ranks with step rows: the ranks step_ms_mean is over
    steps_selected: bool = False       # the summary covers the --steps selection, not every step
    # labels with collectives whose exposed time is unknown (no end time in the trace): the headline share
    # and the "nothing exposed" statements are then not known either
    exposed_unknown: list[str] = field(default_factory=list)
    # the label most responsible for the exposed time where it is not the most exposed (cause_sentence)
    cause: Finding | None = None
    # the steps exposed_pct and step_ms_mean leave out, with why ("profiler window", "profiler export")
    steps_left_out: dict[int, str] = field(default_factory=dict)
    # what step_ms_mean and exposed_pct are over, to print beside them: " (over 2 ranks, steps 0–5, not
    # 2–4: profiler window and its export; step 0 included)"
    step_scope: str = ""


@dataclass
class Heatmap:
    ranks: list[int]
    columns: list[tuple[int, int]]        # steps [first, last] of each column (both inclusive)
    exposed_ms: np.ndarray                # ranks × columns, mean exposed ms per step (NaN: no step there)
    step_ms: np.ndarray                   # ranks × columns, mean step ms
    window_ms: list[list[tuple[float, float] | None]]  # per cell: its steps on the timeline axis, or None
    scale_ms: float = 0.0                 # the colour ramp's top (colour_top); cells above it are drawn apart
    above_scale: int = 0                  # cells above scale_ms (0: the ramp spans every cell)
    max_ms: float = 0.0                   # the largest known cell
    no_end: dict = field(default_factory=dict)  # step → ranks with records of it but no end (not a column:
                                                # timeline_inflight.steps_without_end)


SCALE_QUANTILE = 0.95  # the ramp tops out here when the largest cells are outliers (colour_top)
OUTLIER_FACTOR = 3.0


def colour_top(values: np.ndarray) -> float:
    """The top of a heatmap's colour ramp over its known cells: the largest, unless it is more than
    OUTLIER_FACTOR × the SCALE_QUANTILE quantile, and then that quantile. One step in which every rank
    waited on a straggler (1.5 s against tens of ms elsewhere) would otherwise give every other cell the
    palest colour, and a rank that is late every step by a little would not show; the cells above the top
    take a colour off the ramp (reports.overview_section.ABOVE) and the legend says how many there are and
    how large."""
    v = values[~np.isnan(values)]
    if not v.size:
        return 0.0
    top, q = float(v.max()), float(np.quantile(v, SCALE_QUANTILE))
    return q if q > 0 and top > OUTLIER_FACTOR * q else top


def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


BEHIND_NAMED = 3  # labels named in a queueing line; the rest are summed


@dataclass
class QueuedBehind:
    """The labels a label's queueing was charged to (summary `queued_behind_ms`): the cause of its wait
    rather than the wait. `named`: the BEHIND_NAMED most, (label, ms) most first; the rest counted and summed."""
    named: list[tuple[str, float]]
    more: int = 0
    more_ms: float = 0.0


def queued_behind(by_label: Any) -> QueuedBehind | None:
    """`queued_behind_ms` of a label split into the labels named and the rest; None without any."""
    items = [(str(k), x) for k, x in ((k, _f(x)) for k, x in (by_label or {}).items()) if x]
    if not items:
        return None
    items.sort(key=lambda kv: -kv[1])
    rest = items[BEHIND_NAMED:]
    return QueuedBehind(items[:BEHIND_NAMED], len(rest), float(sum(x for _, x in rest)))


def _behind(by_label: Any) -> str:
    """' (behind attn: 2,541.000 ms, ...)' (queued_behind); '' without them."""
    q = queued_behind(by_label)
    if q is None:
        return ""
    named = ", ".join(f"{k}: {x:,.3f} ms" for k, x in q.named)
    more = f", {q.more} more label(s): {q.more_ms:,.3f} ms" if q.more else ""
    return f" (behind {named}{more})"


def _exposed_in_steps(label: dict) -> float:
    """The part of a label's exposed time launched inside the steps (summary `exposed_in_steps_ms`; a
    document without it: all of `exposed_ms`): its collectives outside every step spend no step time, so
    relating them to it would overstate a share of the step time, or invent one."""
    inside = _f(label.get("exposed_in_steps_ms"))
    return inside if inside is not None else (_f(label.get("exposed_ms")) or 0.0)


def _step_share(ms: float, label: dict, per_rank_step_ms: float) -> list[str]:
    """The label's share of the step time, from its exposed time inside the steps (_exposed_in_steps)."""
    inside = _exposed_in_steps(label)
    op = label.get("op") or "collective"
    if inside <= 0:
        return ["all of it outside every step (launched before the first step or after the last): not part "
                "of the step time"]
    line = f"{100 * inside / per_rank_step_ms:.1f}% of the step time per rank is spent waiting on this {op}"
    outside = ms - inside
    if outside >= 0.0005:  # the document's precision: 4 decimals
        line += f" ({inside:,.3f} ms inside the steps; {outside:,.3f} ms outside every step)"
    return [line]


def left_out_steps(summary: dict, steps: pd.DataFrame) -> dict[int, str]:
    """The steps the headline aggregates leave out (summary `profiler_steps`), with why; none when they
    are every step with a row (nothing would be left to average)."""
    prof = {int(k): str(v) for k, v in (summary.get("profiler_steps") or {}).items()}
    return left_out(prof, steps["step"]) if len(steps) else {}


def step_scope(step_range: tuple[int, int] | None, step_ranks: int, selected: bool,
               left_out: dict[int, str]) -> str:
    """Highlights.step_scope: the ranks and steps the headline's mean step and share are over, and the
    steps they leave out and why."""
    if step_range is None:
        return ""
    a, b = step_range
    steps = steps_said(a, b)
    ranks = counted(step_ranks, "rank")
    if left_out:
        whys = list(dict.fromkeys(left_out.values()))
        why = ("profiler window and its export" if whys == ["profiler window", "profiler export"] else
               " and ".join(whys))
        steps += f", not {step_list(left_out)}: {why}"
    if selected:
        return f" (over {ranks}, {steps} selected)"
    # step 0 carries one-time costs (compilation, allocator warm-up) that the doctor's median leaves out
    sep = "; " if left_out else ", "
    return f" (over {ranks}, {steps}" + (f"{sep}step 0 included)" if a == 0 and b > 0 else ")")


def cause(summary: dict) -> Finding | None:
    """The label with the most `attributed_exposed_ms` (own exposure plus the queueing it caused), as a
    Finding (exposed_ms: that attributed time per rank; why: cause_sentence), when it is not the most
    exposed label and caused exposure of others; None otherwise (the list's top is its own cause)."""
    labels = summary.get("labels") or {}
    if not labels:
        return None
    most = max(labels, key=lambda k: _f(labels[k].get("exposed_ms")) or 0.0)
    by = max(labels, key=lambda k: _f(labels[k].get("attributed_exposed_ms")) or 0.0)
    v = labels[by]
    attributed, charged = _f(v.get("attributed_exposed_ms")) or 0.0, _f(v.get("queue_charged_ms")) or 0.0
    if by == most or charged <= 0 or attributed <= (_f(labels[most].get("attributed_exposed_ms")) or 0.0):
        return None
    return Finding(str(by), attributed, [cause_sentence(summary, str(by), str(most))])


def cause_sentence(summary: dict, by: str, most: str) -> str:
    """'most of it is caused by ve0 (784.549 ms per rank attributed: its own exposure 0.209 ms plus the
    waits queued behind it 784.340 ms)': "most of it" where over half of the most exposed label's exposed
    time queued behind `by`, else "the label most responsible for exposed time is ve0 (…)"."""
    labels = summary.get("labels") or {}
    v, top = labels.get(by) or {}, labels.get(most) or {}
    attributed = _f(v.get("attributed_exposed_ms")) or 0.0
    own, charged = _f(v.get("own_exposed_ms")) or 0.0, _f(v.get("queue_charged_ms")) or 0.0
    behind = _f((top.get("queued_behind_ms") or {}).get(by)) or 0.0
    lead = ("most of it is caused by" if behind > 0.5 * (_f(top.get("exposed_ms")) or 0.0) else
            "the label most responsible for exposed time is")
    return (f"{lead} {by} ({attributed:,.3f} ms per rank attributed: its own exposure {own:,.3f} ms plus the "
            f"waits queued behind it {charged:,.3f} ms)")


CULPRITS_LISTED = 3  # the doctor's culprit ranks listed one by one in "Ranks to look at"; the rest on one line


def _culprits_first(ranks: list[Finding], diagnosis: Any) -> list[Finding]:
    """`ranks` with the doctor's culprit ranks first, in its order: a hung, crashed or desynchronized rank
    may cause no measured waiting and expose nothing (a hang leaves its peers' waits unfinished), yet it
    is the first rank to look at. A culprit already listed moves up and gains the verdict's line."""
    if not isinstance(diagnosis, Diagnosis) or not diagnosis.culprit_ranks:
        return ranks
    by_label = (diagnosis.details or {}).get("waiting_by_label_ms") or {}
    most = next(iter(by_label), None)
    step = "" if diagnosis.step is None or diagnosis.step < 0 else f", step {diagnosis.step}"
    if not diagnosis.label:
        where = ""
    elif most in (None, diagnosis.label):
        where = f" ({diagnosis.label}{step})"
    else:  # a straggler whose many shorter waits on one label outweigh its longest, on another
        where = f" (most of its waiting at {most}; the longest at {diagnosis.label}{step})"
    line = f"the doctor's {diagnosis.verdict} culprit{where}"  # the words of representative.culprits_first
    by_name = {f.name: f for f in ranks}
    first = []
    culprits = list(diagnosis.culprit_ranks)
    for r in culprits[:CULPRITS_LISTED]:
        f = by_name.pop(f"rank {r}", None) or Finding(f"rank {r}", None, [])
        first.append(Finding(f.name, f.exposed_ms, [line, *f.why]))
    rest = culprits[CULPRITS_LISTED:]
    if rest:  # one line for the others: a hang may name hundreds of ranks that never launched
        for r in rest:
            by_name.pop(f"rank {r}", None)
        first.append(Finding(f"{counted(len(rest), 'more rank')}: {ranks_text(rest)}", None, [line]))
    return first + [f for f in ranks if f.name in by_name]


def highlights(summary: dict, diagnosis: Any = None, top: int = 3) -> Highlights:
    steps = pd.DataFrame(summary.get("steps") or [])
    left_out = left_out_steps(summary, steps)
    exposed_pct, step_mean, n_steps, per_rank_step_ms, step_range, step_ranks = _step_totals(steps, left_out)
    ranked = sorted((summary.get("labels") or {}).items(), key=lambda kv: -(_f(kv[1].get("exposed_ms")) or 0.0))
    labels = [_label_finding(str(lab), v, per_rank_step_ms, diagnosis) for lab, v in ranked[:top]
              if _f(v.get("exposed_ms"))]
    overlap = _shares_overlap(ranked, per_rank_step_ms, exposed_pct)
    if overlap and labels:
        labels[-1].why.append(overlap)
    culprit = cause(summary)
    if culprit is not None and labels and labels[0].name == str(ranked[0][0]):
        # the first label read is the victim: its cause goes right under its share of the step time
        labels[0].why[1:1] = culprit.why
    ranks = _culprits_first(_rank_findings(summary, steps, step_range, diagnosis, top), diagnosis)
    also: list[tuple[str, str]] = []
    if diagnosis is None or isinstance(diagnosis, Exception):
        verdict, vsum = "unknown", (f"diagnosis failed: {diagnosis}" if diagnosis is not None else "not diagnosed")
    else:
        verdict, vsum = diagnosis.verdict, diagnosis.summary
        also = [(a["verdict"], a["summary"]) for a in getattr(diagnosis, "also", None) or []]
    # collectives ran (count) but none has a known exposed time (no end time in the trace)
    unknown = [str(lab) for lab, v in (summary.get("labels") or {}).items()
               if _f(v.get("exposed_ms")) is None and (_f(v.get("count")) or 0) > 0]
    return Highlights(verdict=verdict, verdict_summary=vsum, also=also, exposed_pct=exposed_pct,
                      step_ms_mean=step_mean, exposed_unknown=unknown,
                      n_steps=n_steps, n_ranks=int(summary.get("ranks") or 0), labels=labels, ranks=ranks,
                      step_range=step_range, step_ranks=step_ranks,
                      steps_selected=bool(summary.get("steps_selected")), steps_left_out=left_out, cause=culprit,
                      step_scope=step_scope(step_range, step_ranks, bool(summary.get("steps_selected")), left_out))


def _step_totals(steps: pd.DataFrame, left_out: dict[int, str]) -> tuple:
    """(exposed share %, mean step ms, steps, step ms summed per rank, (first, last step), ranks) of the
    per-step rows; the share and mean leave the profiler's steps (`left_out`) out."""
    if not len(steps):
        return None, None, 0, 0.0, None, 0
    step_sum = pd.to_numeric(steps["step_ms"], errors="coerce").sum()
    # the headline's rows: the profiler's steps time the profiler (left_out_steps)
    counted = steps[~steps["step"].astype(int).isin(list(left_out))]
    counted_sum = pd.to_numeric(counted["step_ms"], errors="coerce").sum()
    exposed = pd.to_numeric(counted["exposed_comm_ms"], errors="coerce")
    # a step holding a collective of unknown exposure has no exposed total: no share rather than a low one
    exposed_pct = float(100 * exposed.sum() / counted_sum) if counted_sum > 0 and not exposed.isna().any() else None
    step_mean = _f(pd.to_numeric(counted["step_ms"], errors="coerce").mean())
    n_ranks = int(steps["rank"].nunique())
    return (exposed_pct, step_mean, int(steps["step"].nunique()), float(step_sum / max(n_ranks, 1)),
            (int(steps["step"].min()), int(steps["step"].max())), n_ranks)


def _shares_overlap(ranked: list, per_rank_step_ms: float, exposed_pct: float | None) -> str | None:
    """Where the labels' shares of the step time add up to more than the exposed share of the headline:
    collectives in flight together (gloo runs them side by side; waits on several handles at once) each
    count the same wait, so a label's share is its own wait, and they do not add up. None otherwise."""
    if per_rank_step_ms <= 0 or exposed_pct is None:
        return None
    total = 100 * sum(_exposed_in_steps(v) for _lab, v in ranked) / per_rank_step_ms
    if total <= exposed_pct * 1.1 + 0.5:
        return None
    return (f"the labels' shares add up to {total:.1f}% of the step time, more than the {exposed_pct:.1f}% exposed "
            "in all: collectives in flight together each count the same wait, so each share is that label's own "
            "and they do not add up")


def _label_finding(lab: str, v: dict, per_rank_step_ms: float, diagnosis: Any) -> Finding:
    """Why a label's exposed time is what it is: its share of the step, how much compute hides, its
    queueing, its worst rank, and whether the verdict is about it."""
    ms = _f(v.get("exposed_ms"))
    why = []
    if per_rank_step_ms > 0:
        why += _step_share(ms, v, per_rank_step_ms)
    hidden = _f(v.get("hidden_pct"))
    if hidden is not None:
        why.append("compute never hides it (0% hidden)" if hidden == 0 else
                   f"compute hides only {hidden:.1f}% of its running time" if hidden < 50 else
                   f"compute hides {hidden:.1f}% of its running time")
    queued, own = _f(v.get("queued_ms")), _f(v.get("own_exposed_ms"))
    if queued and queued >= QUEUED_SHARE * ms:  # waiting behind its group's earlier collectives, not its own
        why.append(f"{queued:,.3f} ms of it ({100 * queued / ms:.0f}%) is queueing behind earlier collectives "
                   f"of its process group{_behind(v.get('queued_behind_ms'))}; its own transfer is exposed "
                   f"{own or 0.0:,.3f} ms")
    charged = _f(v.get("queue_charged_ms"))
    if charged and charged >= QUEUED_SHARE * ms:
        why.append(f"later collectives of its process group queue behind it for {charged:,.3f} ms more")
    by_rank = {k: _f(x) for k, x in (v.get("exposed_ms_by_rank") or {}).items() if _f(x) is not None}
    if len(by_rank) > 1:
        worst = max(by_rank, key=lambda k: by_rank[k])
        lo = min(by_rank.values())
        why.append(f"most exposed on rank {worst} ({by_rank[worst]:,.3f} ms; least {lo:,.3f} ms)")
    why += _verdict_pointers(lab, diagnosis)
    return Finding(lab, ms, why)


def _verdict_pointers(lab: str, diagnosis: Any) -> list[str]:
    """What the doctor's verdict says of label `lab`, as pointers (the verdict, whole, heads the page: not its
    text a second time). A straggler verdict names the label holding most of the waiting its culprit caused
    and, apart, the collective of its longest wait (its label/step/sequence): the two differ where many
    shorter waits on one label outweigh one long wait on another."""
    if diagnosis is None or isinstance(diagnosis, Exception):
        return []
    out = []
    by_label = (getattr(diagnosis, "details", None) or {}).get("waiting_by_label_ms") or {}
    if by_label and next(iter(by_label)) == lab:
        out.append(f"the doctor's {diagnosis.verdict} culprit caused most of its waiting here "
                   f"({by_label[lab]:,.1f} of {sum(by_label.values()):,.1f} ms)")
    if getattr(diagnosis, "label", None) == lab:
        at = _at_collective(diagnosis)
        out.append(f"the longest wait the doctor's {diagnosis.verdict} culprit caused is here{at}" if by_label else
                   f"the doctor's verdict ({diagnosis.verdict}) names this label{at}")
    return out


def _at_collective(diagnosis: Any) -> str:
    """" (step 11, seq 8)": the collective the verdict names, as far as it says."""
    step = getattr(diagnosis, "step", None)
    parts = ([] if step is None or step < 0 else [f"step {step}"]) + (
        [] if getattr(diagnosis, "sequence", None) is None else [f"seq {diagnosis.sequence}"])
    return f" ({', '.join(parts)})" if parts else ""


def _rank_findings(summary: dict, steps: pd.DataFrame, step_range: tuple[int, int] | None, diagnosis: Any,
                   top: int) -> list[Finding]:
    """The ranks that made the others wait most (the `top` first), and the rank with the most exposed
    communication over the steps."""
    ranks = []
    stragglers = [s for s in summary.get("stragglers") or [] if (_f(s.get("wait_caused_ms")) or 0) > 0]
    n_coll = (summary.get("skew") or {}).get("collectives")
    # The stragglers' waits are over every collective of the summary, warm-up and profiler steps included,
    # and those outside every step; the doctor's totals ("ms of waiting in all", "also over the bar") count
    # only the judged steps in which the rank was over the straggler bar, so the two totals differ: say which.
    over = ""
    if step_range is not None:
        which = "" if step_range[0] == step_range[1] else "the selected " if summary.get("steps_selected") else "all "
        over = f" over {which}{steps_said(*step_range)}"
        if summary.get("collectives_outside_steps"):
            over += " and the collectives outside every step"
    judged = (getattr(diagnosis, "details", None) or {}).get("judged_steps") if diagnosis is not None else None
    # only a verdict that judged stragglers has such totals: beside a crash or a hang they would be no one's
    doctor = ("" if getattr(diagnosis, "verdict", None) not in ("straggler", "ok") else
              f"; the doctor's totals count only the steps it judges, {step_list(judged)}, in which a rank "
              "was over its straggler bar" if judged else
              "; the doctor's totals count only the steps it judges in which a rank was over its straggler bar")
    for s in stragglers[:top]:
        why = [f"arrives last in {s.get('times_last')}" + (f" of {n_coll}" if n_coll else "") +
               " collectives it shares with other ranks",
               f"the other ranks wait {_f(s.get('wait_caused_ms')) or 0:,.3f} ms for it in total{over} "
               f"({100 * (_f(s.get('score')) or 0):.0f}% of all such waiting"
               + (f"{doctor})" if over else ")")]
        if getattr(diagnosis, "verdict", None) == "insufficient":
            # the table measures waiting without steps; the doctor judges it against the step time, and says
            # at the top of the page why it could not: ranked here is not judged a straggler there
            why.append("measured, not judged: the doctor could not judge stragglers (its verdict above says why)")
        ranks.append(Finding(f"rank {s.get('rank')}", _f(s.get("wait_caused_ms")), why))
    if len(steps):
        per_rank = steps.groupby("rank")["exposed_comm_ms"].sum()
        if len(per_rank) and per_rank.max() > 0:
            r = int(per_rank.idxmax())
            mean = float(per_rank.mean())
            listed = [f.name for f in ranks]
            why = [f"{per_rank.max():,.3f} ms of exposed communication over the steps, mean over ranks {mean:,.3f} ms"]
            if f"rank {r}" in listed:
                ranks[listed.index(f"rank {r}")].why += why
            else:
                ranks.append(Finding(f"rank {r}", float(per_rank.max()), why))
    return ranks


def heatmap(summary: dict, trace: Any = None, bars: Any = None, max_cols: int = 60) -> Heatmap | None:
    """Ranks × steps of exposed communication ms (module docstring); None without step rows."""
    steps = pd.DataFrame(summary.get("steps") or [])
    if steps.empty:
        return None
    ranks = sorted(int(r) for r in steps["rank"].unique())
    known = sorted(int(s) for s in steps["step"].unique())
    per_col = max(1, math.ceil(len(known) / max_cols))
    cols = [known[i:i + per_col] for i in range(0, len(known), per_col)]
    col_of = {s: i for i, c in enumerate(cols) for s in c}
    steps = steps.assign(col=steps["step"].map(col_of))
    grid = pd.MultiIndex.from_product([ranks, range(len(cols))], names=["rank", "col"])
    agg = steps.groupby(["rank", "col"])[["exposed_comm_ms", "step_ms"]].mean().reindex(grid)
    shape = (len(ranks), len(cols))
    exposed = agg["exposed_comm_ms"].to_numpy(np.float64).reshape(shape)
    step_ms = agg["step_ms"].to_numpy(np.float64).reshape(shape)
    win: list[list[tuple[float, float] | None]] = [[None] * len(cols) for _ in ranks]
    if trace is not None and bars is not None and not isinstance(bars, Exception) and len(trace.steps):
        w = getattr(bars, "window", None)
        drawn = [w is None or all(w[0] <= s < w[1] for s in c) for c in cols]  # columns the timeline draws
        st = trace.steps
        col = st["step"].map(col_of)
        row = st["rank"].map({r: i for i, r in enumerate(ranks)})
        keep = col.notna() & row.notna()
        keep &= col.map(lambda j: drawn[int(j)] if pd.notna(j) else False).astype(bool)
        sel = pd.DataFrame({"i": row[keep].astype(np.int64), "j": col[keep].astype(np.int64),
                            "lo": pd.to_numeric(st["start_ns"][keep]), "hi": pd.to_numeric(st["end_ns"][keep])})
        span = sel.groupby(["i", "j"]).agg(lo=("lo", "min"), hi=("hi", "max")).dropna()
        for (i, j), lo, hi in zip(span.index, span["lo"].to_numpy(), span["hi"].to_numpy()):
            win[i][j] = ((int(lo) - bars.t0) / 1e6, (int(hi) - bars.t0) / 1e6)
    scale = colour_top(exposed)
    known_cells = exposed[~np.isnan(exposed)]
    begun = getattr(bars, "begun", None) if not isinstance(bars, Exception) else None  # found once, by the timeline
    no_end = steps_without_end(trace, begun) if trace is not None else {}
    return Heatmap(ranks=ranks, columns=[(c[0], c[-1]) for c in cols], exposed_ms=exposed, step_ms=step_ms,
                   window_ms=win, scale_ms=scale, above_scale=int((known_cells > scale).sum()),
                   max_ms=float(known_cells.max()) if known_cells.size else 0.0,
                   no_end={s: n for s, n in no_end.items() if s not in col_of})
