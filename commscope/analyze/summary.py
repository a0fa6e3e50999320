"""`summarize(trace)`: the `commscope report --json` document, assembled from the analyzers.

Every quantity is defined once, in docs/analysis.md ("The quantities"). Shape (all times in ms, bandwidths
in GB/s to 4 significant digits, percentages 0–100; NaN becomes null):
{"schema_version": SCHEMA_VERSION,
 "ranks": N, "world_size" (the job's), "ranks_present": [ranks loaded], "source", "backend", "device",
 "steps_selected": [a, b] | null, "problems": [...]   the loader's, several ranks' same line as one (analyze.problems)
 "collectives_outside_steps": n              collectives (all ranks) outside every step window of an input
                                             that marks steps (step −1: launched before the first profiled step
                                             or after the last): in the per-label figures and who made whom
                                             wait, not in the per-step ones
 "run_reports": [...]                        ranks that did not complete, as the run's status.json and watchdog.json
                                             say (analyze.problems.run_reports)
 "notes": [...]                              what this input cannot show (missing ranks, ranks whose records cover
                                             fewer steps than the others' (analyze.step_coverage), one rank, no
                                             collectives, an oversubscribed CPU run…)
 "duration_basis": "device kernel (trace)" | ...   what every mean_ms below measures (exposure.duration_basis)
 per-rank communication overlap (analyze.timeline), by input: GPU traces carry
 "hta_comm_overlap_pct_by_rank": {"0": ..}     HTA's get_comm_comp_overlap rule (host launch ops count as compute)
 "device_comm_overlap_pct_by_rank": {"0": ..}  device kernels only
 and inputs without device kernels (CPU traces, run directories without a profiler trace) carry instead
 "recorded_comm_overlap_pct_by_rank": {"0": ..}  the recorded collective spans against the compute set
 "labels": {"<label>": {"op", "label_source", "count", "count_per_rank", "bytes", "bytes_per_rank", "mean_ms", "exposed_ms",
                         "exposed_in_steps_ms", "hidden_pct", "algbw_gbps", "busbw_gbps",
                         "bandwidth_withheld": why the bandwidths are null | null (exposure.bandwidth_withheld),
                         "exposed_ms_by_rank": {"0": ..},
                         "own_exposed_ms", "queued_ms", "queue_charged_ms", "attributed_exposed_ms", "wake_delay_ms",
                                             the queueing split (exposure.label_queueing), and with it
                         "queued_behind_ms": {"<earlier label>": ..}}},  whose queue `queued_ms` was spent in
 "stragglers": [{"rank", "times_last", "last_share", "wait_caused_ms", "score"}, ...] | null   worst first
                                             analyze.waiting: who made whom wait (device-side arrivals);
                                             null where no collective instance is complete, and
 "stragglers_reason": "cannot be judged: ..." | null   says why (waiting.unjudged)
 "skew": {"collectives": n, "mean_ms", "max_ms"},        arrival skew of the same instances
 "launch_skew": {"collectives": n, "mean_ms", "max_ms"}, host side: spread of the launch calls (complete instances)
 "steps": [{"rank", "step", "step_ms", "compute_ms", "exposed_comm_ms", "idle_ms", "compute_pct", ...,
            "gap_before_ms", "start_delay_ms"}],          the last two: analyze.step_gaps (null for a rank's first step)
 "step_boundaries": [{"rank", "steps", "gap_median_ms", "gap_max_ms", "start_delay_median_ms", "host_pct",
                      "excluded_steps"}],  over the steps outside the profiler window and its export
 "profiler_steps": {"<step>": "profiler window" | "profiler export"}   the steps of a run's --profile window
                                             and the one after it (step_gaps.profiler_steps), which `steps`
                                             lists but the headline's mean step and exposed share leave out
 "arrival_lateness": {"arrivals": n, "quantiles": [{"quantile", "lateness_ms"}], "histogram": [{"lo_ms",
                       "hi_ms", "arrivals", "share", "ranks", "worst_rank", "worst_ms", "worst_step", "worst_label"}]}
                                             how late each member of a collective instance arrived (analyze.lateness)
 "representative_ranks": [{"rank", "why": [...]}]  the ranks to look at first (analyze.representative)
 "representative_ranks_culprits_first": [{"rank", "why": [...]}]  the same with the doctor's culprit ranks
                                             first, in the order the page draws them at scale
                                             (representative.culprits_first; no culprits without a verdict)
 "placement_ranks": "all" | [ranks]          whose collectives `placement` lists: all up to PLACEMENT_ALL_RANKS
                                             ranks, the representative ones above
 "placement": [{"rank", "step", "seq", "label", "op", "bytes", "start_vs_backward_end_ms", "exposed_ms", ...}],
                                             per collective in launch order (analyze.placement)
 "step_windows": {"launch-correlation": n, ...}  the per-step rows' windows by basis: device time on GPU
                                             traces ("launch-correlation", "device-annotation"), else "host"
 "hta": {...}}                               commscope.analyze.hta_bridge.compare (or why it did not run)

Per label (see docs/analysis.md): `count` collectives over all ranks (an integer), `count_per_rank` its mean
over the ranks that have the label,
`bytes` full-array bytes of one call (lower median over its calls that move data: barriers left out), `bytes_per_rank` total per rank (mean), `mean_ms` mean
duration (measured as `duration_basis` says), `exposed_ms` exposed time per rank (mean over ranks),
`exposed_in_steps_ms` the part of it launched inside the steps (exposed_in_steps), `hidden_pct` share of all its duration on all ranks that the ranks' compute covered (exposure.hidden_ns), bandwidths the label's total bytes over its total
transfer time (the min-across-ranks duration of each call).
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze import (clocks, exposure, lateness, placement, regions, representative, skew, step_coverage, step_gaps,
                               timeline, waiting)
from commscope.analyze.problems import loading_problems, run_reports
from commscope.load.frames import P2P_MARK, UNPAIRED_MARK, Trace
from commscope.util.num import rounded, rounded_floats, sig, whole
from commscope.util.ranges import int_ranges
from commscope.util.text import counted

# The document's version, raised whenever a key is added with a new meaning, removed or renamed, so that a
# script reading `report --json` can tell which names it holds. A document without the field is version 1.
# 5: labels' queued_behind_ms and wake_delay_ms; unknown busbw and exposure are null; the doctor's pct_of_median_step
# 6: labels' exposed_in_steps_ms
# 7: profiler_steps (the steps the headline aggregates and compare's samples leave out)
# 8: representative_ranks_culprits_first (the doctor's culprits before the representative ranks)
# 9: stragglers null with stragglers_reason where nobody can be judged; labels' bandwidth_withheld, and
#    bandwidths and launch_skew over the collectives with every member of their group present only
# 10: run_reports (ranks that did not complete, as the run's files say), no longer among the problems;
#     hta.kernel_breakdown.kernel_types[].sum is "sum (us)", hta.queue_length[].count is "samples"
# 11: collectives_outside_steps (collectives outside every step window, which per-step figures leave out)
SCHEMA_VERSION = 13

# The per-rank communication overlaps, in the order a reader compares them; a document holds the first two
# (GPU traces) or the last (no device kernels), never both kinds (docs/analysis.md, "The quantities").
# Up to this many ranks `placement` lists every rank's collectives (~700 a rank for 40 steps of the
# reference trainer); above, the representative ranks' only, so the document stays a few MB at any scale.
PLACEMENT_ALL_RANKS = 64
HTA_COMM_OVERLAP = "hta_comm_overlap_pct_by_rank"
DEVICE_COMM_OVERLAP = "device_comm_overlap_pct_by_rank"
RECORDED_COMM_OVERLAP = "recorded_comm_overlap_pct_by_rank"
COMM_OVERLAP_KEYS = (HTA_COMM_OVERLAP, DEVICE_COMM_OVERLAP, RECORDED_COMM_OVERLAP)
COMM_OVERLAP_NAMES = {HTA_COMM_OVERLAP: "HTA's rule", DEVICE_COMM_OVERLAP: "device only",
                      RECORDED_COMM_OVERLAP: "recorded spans"}  # short names for notes and column headers


def _mean(v: np.ndarray) -> float:
    """pandas' Series.mean (skipping NaN): the sum with NaN as 0, over the count of the others."""
    ok = ~np.isnan(v) if v.dtype.kind == "f" else np.ones(len(v), dtype=bool)
    n = int(ok.sum())
    return np.where(ok, v, 0).sum(dtype=np.float64) / np.float64(n) if n else np.nan


def _low_median(v: np.ndarray) -> float:
    """The lower median (skipping NaN): a value of `v` itself, so a label whose calls move two sizes
    gives one of them, not their mean (a size no call moved)."""
    v = np.sort(v[~np.isnan(v)])
    return v[(len(v) - 1) // 2] if len(v) else np.nan


def _label_bytes(sizes: np.ndarray, idx: np.ndarray, moving: np.ndarray, ops: np.ndarray) -> int | None:
    """A label's `bytes` over its calls `idx`: the lower median of those that move data; 0 for barriers
    alone (a barrier moves nothing, whatever its trace says: Kineto records a 1-byte dummy); else the lower
    median of all (null where no size is known)."""
    if moving[idx].any():
        return whole(float(_low_median(sizes[idx[moving[idx]]])))
    if (ops[idx] == "barrier").all():
        return 0
    return whole(float(_low_median(sizes[idx])))


def queued_behind_by_label(table: pd.DataFrame, pairs: list[tuple[int, int, float]]) -> dict[str, dict[str, float]]:
    """Per label that queued, the labels it queued behind: {label: {earlier label: ms}}, most first, each a
    per-rank total averaged over the ranks that have the queued label (as its `queued_ms`, which they add
    up to). `pairs`: exposure.queue_split's charges (queued row, charged row, ns) over `table`, as
    collective_table(queue_pairs=...) gives them with the table."""
    if not pairs:
        return {}
    labels = table["label"].astype(str).to_numpy()
    victim, culprit, ns = (np.array(x) for x in zip(*pairs))
    ms = pd.Series(ns / 1e6).groupby([labels[victim], labels[culprit]]).sum()
    ranks = table.groupby(table["label"].astype(str))["rank"].nunique()
    out: dict[str, dict[str, float]] = {}
    for (v, c), x in sorted(ms.items(), key=lambda kv: -kv[1]):
        out.setdefault(str(v), {})[str(c)] = float(x) / int(ranks[v])
    return out


def exposed_in_steps(table: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
    """Per label, `exposed_in_steps_ms`: the exposed time of its collectives launched inside a step that
    has a step row ((rank, step) of `steps`), as `exposed_ms` a per-rank total over the known ones, mean
    over the ranks with the label. The part of `exposed_ms` that the per-step figures (steps,
    heatmap, headline share) can hold: a collective launched before the first recorded step or after the
    last (step -1 on a Kineto trace, a partial step of a crashed rank) is outside every step's time."""
    if not len(table):
        return {}
    rank = pd.to_numeric(table["rank"], errors="coerce").fillna(-1).to_numpy(np.int64)
    step = pd.to_numeric(table["step"], errors="coerce").fillna(-1).to_numpy(np.int64)
    if len(steps):
        rows = pd.MultiIndex.from_arrays([pd.to_numeric(steps["rank"]).to_numpy(np.int64),
                                          pd.to_numeric(steps["step"]).to_numpy(np.int64)])
        inside = pd.MultiIndex.from_arrays([rank, step]).isin(rows)
    else:
        inside = np.zeros(len(table), dtype=bool)
    exposed = table["exposed_ns"].to_numpy(np.float64)
    ns = pd.Series(np.where(inside, exposed, np.where(np.isnan(exposed), np.nan, 0.0)), index=table.index)
    per_rank = ns.groupby([table["label"].astype(str), rank]).sum(min_count=1) / 1e6
    return {str(k): float(v) for k, v in per_rank.groupby(level=0).mean().items()}


def label_summary(table: pd.DataFrame, per_rank: pd.DataFrame,
                  behind: dict[str, dict[str, float]] | None = None,
                  in_steps: dict[str, float] | None = None, withheld: dict[str, str] | None = None
                  ) -> dict[str, dict]:
    """The document's `labels` (module docstring); `behind`: queued_behind_by_label(), the labels each one's
    `queued_ms` was spent behind (`queued_behind_ms`, beside the queueing split); `in_steps`:
    exposed_in_steps(), the part of each label's exposed time inside the steps; `withheld`:
    exposure.bandwidth_withheld(), why a label's bandwidths are null."""
    out: dict[str, dict] = {}
    behind = behind or {}
    in_steps = in_steps or {}
    withheld = withheld or {}
    totals = exposure.label_totals(table)
    # Per label, positions into whole columns taken once as numpy arrays: sub-frames and pandas reductions
    # per label cost ~10× the arithmetic. The reductions are pandas' own (_mean) or a value of the data (_low_median).
    rows_of = per_rank.groupby("label", sort=False).indices
    ops = table["op"].astype(str).to_numpy(dtype=object)
    sources = table["label_source"].astype(str).to_numpy(dtype=object)
    sizes = table["bytes"].to_numpy(np.float64)
    # a label's size is what its data-moving calls move: a barrier it also holds (0 bytes, or Kineto's
    # 1-byte dummy) is not one of its sizes, or a label of as many barriers as all-reduces would read 0
    moving = exposure.moves_data(table)
    pr_rank, pr_count = per_rank["rank"].to_numpy(), per_rank["count"].to_numpy()
    pr_bytes, pr_exposed = per_rank["bytes"].to_numpy(), per_rank["exposed_ms"].to_numpy(np.float64)
    tot_at = {label: i for i, label in enumerate(totals.index)}
    tot = {c: totals[c].to_numpy(np.float64) for c in ("mean_ms", "hidden_pct", "algbw_gbps", "busbw_gbps")}
    no_rows = np.empty(0, dtype=np.intp)
    by_label = table.groupby("label", sort=False).indices
    queueing = exposure.label_queueing(table)
    for label, idx in sorted(by_label.items(), key=lambda kv: kv[1][0]):  # in order of first appearance
        pr = rows_of.get(label, no_rows)
        t = tot_at[label]
        exposed = pr_exposed[pr]
        out[str(label)] = {
            "op": "+".join(dict.fromkeys(ops[idx])),  # a sharded label: reduce_scatter+all_gather
            "label_source": "+".join(dict.fromkeys(sources[idx])),  # recorder, scope, stack, size or name
            "count": int(pr_count[pr].sum()) if len(pr) else 0,
            "count_per_rank": rounded(float(_mean(pr_count[pr]))) if len(pr) else 0.0,
            "bytes": _label_bytes(sizes, idx, moving, ops),
            "bytes_per_rank": whole(float(_mean(pr_bytes[pr]))),
            "mean_ms": rounded(tot["mean_ms"][t]),
            "exposed_ms": rounded(_mean(exposed)),
            # unknown where exposed_ms is: the in-step part of an unknown total is not known either
            "exposed_in_steps_ms": (None if np.isnan(_mean(exposed)) else
                                    rounded(in_steps.get(str(label), math.nan))),
            "hidden_pct": rounded(tot["hidden_pct"][t], 2),
            "algbw_gbps": sig(tot["algbw_gbps"][t]),
            "busbw_gbps": sig(tot["busbw_gbps"][t]),
            "bandwidth_withheld": withheld.get(str(label)),
            "exposed_ms_by_rank": {str(r): rounded(v) for r, v in zip(pr_rank[pr].tolist(), exposed.tolist())},
            **{k: rounded(v) for k, v in queueing.get(str(label), {}).items()},
        }
        if str(label) in queueing:
            out[str(label)]["queued_behind_ms"] = {k: rounded(v) for k, v in behind.get(str(label), {}).items()}
    # most exposed first: the order a reader cares about
    return dict(sorted(out.items(), key=lambda kv: -(kv[1]["exposed_ms"] or 0.0)))


def _by_rank(frame: pd.DataFrame) -> dict[str, float | None]:
    return {str(r): rounded(v, 2) for r, v in zip(frame["rank"], frame["comm_overlap_pct"])}


def comm_overlaps(trace: Trace, hta_rule: pd.DataFrame) -> dict[str, dict]:
    """The per-rank communication overlaps that apply to `trace` (COMM_OVERLAP_KEYS), from
    timeline.comm_overlap_by_rank(trace, hta_like=True) (`hta_rule`) and, on GPU traces, its device-only
    variant. Without device kernels both rules fall back to the recorded spans, which are neither HTA's
    number nor a device one, so they get their own name."""
    if not timeline.has_device_kernels(trace):
        return {RECORDED_COMM_OVERLAP: _by_rank(hta_rule)}
    return {HTA_COMM_OVERLAP: _by_rank(hta_rule),
            DEVICE_COMM_OVERLAP: _by_rank(timeline.comm_overlap_by_rank(trace, hta_like=False))}


def _step_rows(br: pd.DataFrame, gaps: pd.DataFrame) -> list[dict]:
    """`report --json`'s `steps`: a row per (rank, step) of `br` (timeline.step_breakdown) with its
    gap_before_ms / start_delay_ms from `gaps` (step_gaps.step_gaps; null for a rank's first step). Built
    column by column, as `placement.records`: at 256 ranks × 40 steps a conversion per cell would cost
    ~100k calls of `rounded`."""
    if br.empty:
        return []
    keys = ["rank", "step", "step_ms", "compute_ms", "exposed_comm_ms", "idle_ms", "compute_pct", "exposed_comm_pct",
            "idle_pct", "gap_before_ms", "start_delay_ms"]
    g = gaps.drop_duplicates(["rank", "step"], keep="last").set_index(["rank", "step"])
    at = pd.MultiIndex.from_arrays([br["rank"].astype(np.int64), br["step"].astype(np.int64)])
    g = g.reindex(at)  # rows of br without a gap (a rank's first step): NaN

    def ms(v: Any) -> list:
        return rounded_floats(np.asarray(v, dtype=np.float64) / 1e6)

    cols = [br["rank"].to_numpy(np.int64).tolist(), br["step"].to_numpy(np.int64).tolist(),
            ms(br["step_ns"]), ms(br["compute_ns"]), ms(br["exposed_comm_ns"]), ms(br["idle_ns"]),
            *(rounded_floats(br[c].to_numpy(np.float64), 2)
              for c in ("compute_pct", "exposed_comm_pct", "idle_pct")),
            ms(g["gap_ns"]), ms(g["start_delay_ns"])]
    return [dict(zip(keys, row)) for row in zip(*cols)]


def summarize(trace: Trace, steps: tuple[int, int] | None = None, with_hta: bool = True,
              diagnosis: Any = None) -> dict:
    """The report document for `trace` (optionally restricted to steps a ≤ s < b). `diagnosis`: the doctor's
    verdict the report shows beside it (analyze.doctor.diagnose_trace), whose culprit ranks lead
    `representative_ranks_culprits_first`; None names no culprit."""
    tr = trace.select_steps(steps)
    comp = exposure.compute_sets(tr)
    queue_pairs: list[tuple[int, int, float]] = []
    table = exposure.collective_table(tr, comp, queue_pairs)
    per_rank = exposure.label_stats(table)
    sk = waiting.instances(table)  # who made whom wait: the model the doctor's straggler verdict reads
    strag = waiting.by_rank(sk, tr.ranks)
    unjudged = waiting.unjudged(sk, table, len(tr.ranks), int(tr.world_size))  # None where sk has instances
    launch = skew.launch_skew(table)
    if clocks.disagreement(table):  # launch calls are compared across ranks too: no launch skew either
        launch = launch.iloc[:0]
    withheld = exposure.bandwidth_withheld(table, len(tr.ranks), int(tr.world_size))
    ov = timeline.comm_overlap_by_rank(tr, hta_like=True, comp=comp)
    br = timeline.step_breakdown(tr, comp)
    gaps = step_gaps.step_gaps(tr, comp)
    reps = representative.representative_ranks(strag, br, tr.ranks, gaps=gaps)
    # the profiler's steps among those with rows: only the aggregates leave them out, `steps` keeps them
    prof = {s: why for s, why in step_gaps.profiler_steps(tr).items() if s in set(br["step"].astype(int))}
    every_rank = len(tr.ranks) <= PLACEMENT_ALL_RANKS
    placed = table if every_rank else table[representative.among(table["rank"].to_numpy(), reps)]
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "ranks": len(tr.ranks), "world_size": tr.world_size, "ranks_present": [int(r) for r in tr.ranks],
        "source": tr.source, "backend": tr.backend,
        "device": tr.device, "steps_selected": list(steps) if steps else None, "problems": loading_problems(tr),
        "run_reports": run_reports(tr), "collectives_outside_steps": outside_steps(tr),
        "notes": evidence_notes(tr) + profiler_notes(prof, br) + waiting.unjudged_notes(unjudged, len(tr.ranks), len(table))
                 + exposure.bandwidth_notes(withheld, len(tr.ranks), int(tr.world_size)),
        "duration_basis": exposure.duration_basis(table),
        **comm_overlaps(tr, ov),
        "labels": label_summary(table, per_rank, queued_behind_by_label(table, queue_pairs), exposed_in_steps(table, tr.steps),
                                withheld),
        "stragglers": None if unjudged else [
            {"rank": int(r.rank), "times_last": int(r.times_last), "last_share": rounded(r.last_share),
             "wait_caused_ms": rounded(r.wait_caused_ns / 1e6), "score": rounded(r.score)} for r in strag.itertuples()],
        "stragglers_reason": unjudged,
        "skew": {"collectives": int(len(sk)), "mean_ms": rounded(sk["skew_ns"].mean() / 1e6) if len(sk) else None,
                 "max_ms": rounded(sk["skew_ns"].max() / 1e6) if len(sk) else None},
        "launch_skew": {"collectives": int(len(launch)),
                        "mean_ms": rounded(launch["skew_ns"].mean() / 1e6) if len(launch) else None,
                        "max_ms": rounded(launch["skew_ns"].max() / 1e6) if len(launch) else None},
        "steps": _step_rows(br, gaps),
        "step_boundaries": [{"rank": int(r.rank), "steps": int(r.steps), "gap_median_ms": rounded(r.gap_median_ms),
                             "gap_max_ms": rounded(r.gap_max_ms), "start_delay_median_ms": rounded(r.start_delay_median_ms),
                             "host_pct": rounded(r.host_pct, 2), "excluded_steps": int(r.excluded_steps)}
                            for r in step_gaps.gap_summary(gaps).itertuples()],
        "profiler_steps": {str(s): why for s, why in sorted(prof.items())},
        "arrival_lateness": arrival_lateness(tr),  # analyze.lateness
        "representative_ranks": reps,  # analyze.representative
        "representative_ranks_culprits_first": representative.culprits_first(reps, tr.ranks, diagnosis),
        # every rank's collectives up to PLACEMENT_ALL_RANKS ranks; above, the representative ranks' only
        "placement_ranks": "all" if every_rank else [r["rank"] for r in reps],
        "placement": placement.records(placement.placement(tr, placed, comp)),  # analyze.placement
        # how the windows of the per-step rows were found (load.device_steps): (rank, step) windows per basis
        "step_windows": {str(b): int(n) for b, n in br["basis"].value_counts().sort_index().items()},
    }
    if with_hta:
        from commscope.analyze import hta_bridge  # HTA is optional and slow: only touched when asked for

        # HTA reads the whole files: beside it, commscope's overlaps of the whole trace too, never of the --steps
        # window, or the difference would be the window's
        whole = doc if steps is None else comm_overlaps(trace, timeline.comm_overlap_by_rank(trace, hta_like=True))
        doc["hta"] = hta_bridge.compare(trace, whole)
        if steps is not None and doc["hta"].get("overlap_comparison") is not None:
            doc["hta"]["overlap_scope"] = "the whole trace (HTA reads whole files), not the --steps window"
    else:
        doc["hta"] = {"status": "skipped", "reason": "not requested"}
    return doc


def profiler_notes(prof: dict[int, str], br: pd.DataFrame) -> list[str]:
    """The caveat for the profiler's steps (`profiler_steps`), with their mean step against the others',
    or none. The profiler's start-up and its trace export cost host time that is no training: with
    `--profile 2:4` on the tiny preset step 2 took ~1,000 ms against ~80 ms, which made the headline's
    mean step 3× the others'. Every step being the profiler's leaves nothing to compare: then none is left
    out (report_overview.highlights) and the note says so."""
    if not prof or not len(br):
        return []
    step_ms = pd.to_numeric(br["step_ns"], errors="coerce") / 1e6
    inside = br["step"].astype(int).isin(list(prof)).to_numpy()
    which = step_gaps.profiler_steps_text(prof)
    if inside.all():
        return [f"Every step is the profiler's ({which}): the mean step and the exposed share include the "
                "profiler's start-up and trace export."]
    return [f"Steps {which} are left out of the headline's mean step and exposed share and of compare's "
            f"per-step samples: the profiler starting, recording and writing its trace takes host time there "
            f"(mean step {step_ms[inside].mean():,.3f} ms against {step_ms[~inside].mean():,.3f} ms over the "
            "other steps). The per-step rows (`steps`, the heatmap) keep them."]


# A step's device window under this share of its host range: the step's figures measure a device that was
# mostly idle while the host spent the step elsewhere (launching, loading data, Python).
DEVICE_SHARE_NOTED = 0.01


def _idle_device_notes(steps: pd.DataFrame) -> list[str]:
    """The note for profiler steps whose device window (load.device_steps) covers under DEVICE_SHARE_NOTED of
    their host range: their step time is the device's busy span, not what the step took."""
    if not len(steps) or "host_start_ns" not in steps or steps["basis"].isna().all():
        return []
    dev = (steps["end_ns"].astype("float64") - steps["start_ns"].astype("float64")).to_numpy()
    host = (steps["host_end_ns"].astype("float64") - steps["host_start_ns"].astype("float64")).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        small = (steps["basis"] != "host").to_numpy() & (host > 0) & (dev < DEVICE_SHARE_NOTED * host)
    if not small.any():
        return []
    i = int(np.flatnonzero(small)[0])
    r, s = int(steps["rank"].iloc[i]), int(steps["step"].iloc[i])
    return [f"{int(small.sum())} of {len(steps)} steps keep the device busy for under "
            f"{DEVICE_SHARE_NOTED:.0%} of their host range (e.g. rank {r} step {s}: {dev[i] / 1e6:,.3f} ms of kernels "
            f"in a {host[i] / 1e6:,.1f} ms step): their step times and breakdowns are the device's busy span, "
            "while the host spent the step elsewhere (launching, loading data, Python)."]


def outside_steps(trace: Trace) -> int:
    """Collectives (all ranks) outside every step window, in an input that marks steps; 0 in one that
    marks none (where no figure is per step)."""
    if not len(trace.steps) or not len(trace.collectives):
        return 0
    return int((pd.to_numeric(trace.collectives["step"], errors="coerce").fillna(-1) < 0).sum())


def evidence_notes(trace: Trace) -> list[str]:
    """What the input cannot tell, one sentence each: the figures that are left out or limited because
    ranks, collectives, sizes, steps (of every rank, or of some ranks: step_coverage) or device activity are
    missing from it, or because a CPU run had more ranks on a host than cores (oversubscribed_hosts)."""
    if trace.run_args.get("trace") == "off":
        # no rank is missing and none stopped early: nothing was recorded, by the run's choice
        return ["Recorded with --trace off: the ranks wrote their status only, no step, collective or hook "
                "record, so every figure here is empty. Run with --trace light (the default) to record them."]
    notes = []
    running = trace.config.get("launcher_running")
    if running:  # as the doctor says: every figure is of what the ranks have written so far
        notes.append(f"In progress: the run's `commscope run` launcher (pid {running}) still runs on this host, "
                     "so every figure here is of the steps written so far.")
    ranks, ws = list(trace.ranks), int(trace.world_size)
    c = trace.collectives
    if len(ranks) < ws:
        notes.append(f"Partial: {len(ranks)} of the job's {ws} ranks are present. Skew, stragglers and "
                     "bandwidths count only the collectives whose group's members are all among these; a late, "
                     "missing or desynchronized rank among the others cannot be seen.")
    if len(ranks) == 1:
        notes.append("One rank: no cross-rank comparison (arrival skew, stragglers, desync) is possible.")
    if not len(c):
        what = ("no collective records in events.jsonl: the run ended before its first collective, or its "
                "script records none (rec.collective records one)" if trace.source == "run"
                else "no NCCL/RCCL kernels, record_param_comms or gloo ops")
        seen = trace.config.get("profiler_collectives") or 0
        read = (f" The rank folders' profiler traces hold {seen} collective(s): copy each rank's trace.json.gz "
                "into one folder as rank<N>.json.gz and report that folder to read them." if seen else "")
        dropped = (" The loader left out events it could not read (see the problems): collectives among them "
                   "are not counted." if trace.config.get("events_left_out") else "")
        notes.append(f"No collectives in this trace ({what}): communication figures (labels, overlap, skew) "
                     f"are empty.{read}{dropped}")
    else:
        sizeless = pd.to_numeric(c["bytes"], errors="coerce").isna().to_numpy()
        unknown = int(sizeless.sum())
        if unknown:
            # gloo's sizes come from its c10d ops' Input Dims, which the profiler records with record_shapes
            gloo = int((sizeless & (c["timing"].astype(str).to_numpy() == "gloo_thread")).sum())
            why = ("recorded without record_shapes=True: gloo's sizes come from the ops' input shapes"
                   if gloo == unknown else "older trace format or launched before the profiling window"
                   + (f"; {gloo} of them gloo's, recorded without record_shapes=True" if gloo else ""))
            notes.append(f"{unknown} of {len(c)} collectives have no recorded size ({why}): no bandwidth for them.")
        outside = outside_steps(trace)
        if outside:
            when = ("launched before the first profiled step or after the last" if trace.source != "run" else
                    "recorded outside every `rec.step(...)`")
            notes.append(f"{outside} of {len(c)} collectives fall outside every step window ({when}): the "
                         "per-label figures and who made whom wait "
                         "include them; placement, the per-step figures (headline share, heatmap, steps) and a "
                         "label's share of the step time do not.")
        # the distinct groups are few: test their names, not every row's (10⁶ rows at 1024 ranks)
        codes, groups = pd.factorize(c["group"])
        marked = [i for i, g in enumerate(groups) if UNPAIRED_MARK in str(g)]
        unpaired = int(np.isin(codes, marked).sum()) if marked else 0
        if unpaired:
            notes.append(f"{unpaired} collectives could not be paired across ranks (the problems say why: op, "
                         "dtype or size differ at the same group and sequence, or a rank's window cannot be "
                         "lined up with the others'): they take no part in skew or stragglers.")
        p2p = [i for i, g in enumerate(groups) if P2P_MARK in str(g)]
        if p2p:
            notes.append(f"{int(np.isin(codes, p2p).sum())} point-to-point ops (send, recv) are not matched to "
                         "their peers: they count toward each rank's communication time and overlap, not toward "
                         "skew, stragglers, bandwidth or the doctor's rules.")
        notes += _recording_notes(trace)
    if not len(trace.steps):
        notes.append("No step records (no rank finished a step): per-step breakdowns and step gaps are empty."
                     if trace.source == "run" else
                     "No ProfilerStep annotations: per-step breakdowns and step gaps are empty.")
    # ranks whose records stop early (a cut events.jsonl, a crashed rank): their figures count fewer steps
    notes += step_coverage.coverage_notes(trace.steps, ranks)
    notes += _idle_device_notes(trace.steps)
    if trace.source == "kineto" and not len(trace.kernels):
        # Kineto writes deviceProperties, the GPUs the process saw, into every trace (an empty list on a CPU
        # job): GPUs listed make it a host-side trace of a GPU job; without the field it could be either
        props = trace.config.get("deviceProperties")
        what = (f"the trace holds no device events (host side only; the process saw {len(props)} GPU(s))" if props
                else "a CPU-only trace: the process saw no GPU" if props is not None
                else "the trace has no deviceProperties to say whether the process saw a GPU: a CPU-only job, "
                     "or a GPU job's host side")
        notes.append(f"No GPU activity ({what}): HTA's analyses, and its rule and the device-only one "
                     "for communication overlap, do not apply; the overlap by rank is over the recorded spans.")
    notes += _hta_unseen_comm_notes(trace.kernels)
    assumed = [r for r, how in (trace.config.get("rank_from") or {}).items() if how == "assumed"]
    if assumed:
        notes.append(f"Rank(s) {int_ranges(assumed, sep=', ', most=16)} assumed: the trace names no rank (no distributedInfo "
                     "and none in the file name).")
    crowded = oversubscribed_hosts(trace)
    if crowded:
        # the host is named where the run spans several
        several = len({str(m.get("hostname")) for m in (trace.config.get("meta") or {}).values()}) > 1
        alike: dict[tuple[int, int], list[str]] = {}  # hosts with the same ranks and cores: one clause each
        for host, n, cores in crowded:
            alike.setdefault((n, cores), []).append(host)
        where = "; ".join(f"{n} CPU ranks on {counted(cores, 'CPU core')}" + (_hosts_text(hosts) if several else "")
                          for (n, cores), hosts in alike.items())
        notes.append(f"Oversubscribed CPU run: {where}. The ranks took turns on the cores, so its step times and "
                     "communication waits (exposed communication, skew, stragglers) measure the OS scheduler as "
                     "much as the program; a run with at most one rank per core times the training itself.")
    return notes


def _hosts_text(hosts: list[str], most: int = 3) -> str:
    """" of node0", or " on each of 128 hosts (node0, node1, node2, …, node127)": a note stays one line."""
    if len(hosts) == 1:
        return f" of {hosts[0]}"
    names = hosts if len(hosts) <= most + 1 else [*hosts[:most], "…", hosts[-1]]
    return f" on each of {len(hosts)} hosts ({', '.join(names)})"


def _natural(name: str) -> list:
    """Sort key: node2 before node10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def oversubscribed_hosts(trace: Trace) -> list[tuple[str, int, int]]:
    """(host, CPU ranks, cores) for each host of a run directory whose CPU ranks outnumber the cores
    they could run on (meta.json's `hostname`, `device` and `cpu_cores`, the fewest any of its ranks had);
    [] where meta.json does not record the cores."""
    hosts: dict[str, list[int]] = {}
    for m in (trace.config.get("meta") or {}).values() if trace.source == "run" else ():
        cores = m.get("cpu_cores")
        if str(m.get("device") or "").split(":")[0] == "cpu" and isinstance(cores, int) and cores >= 1:
            hosts.setdefault(str(m.get("hostname") or "?"), []).append(cores)
    return [(host, len(cores), min(cores)) for host, cores in sorted(hosts.items(), key=lambda h: _natural(h[0]))
            if len(cores) > min(cores)]


def _hta_unseen_comm_notes(kernels: pd.DataFrame) -> list[str]:
    """Communication kernels HTA does not recognize (load.kineto.hta_unseen_comm_kernels): what commscope's
    overlap by HTA's rule counts them as, and what HTA's own figures make of them."""
    from commscope.load.kineto import hta_unseen_comm_kernels

    total, unseen, example = hta_unseen_comm_kernels(kernels)
    if not unseen:
        return []
    return [f"{unseen:,} of the {total:,} communication kernels are named as HTA does not recognize (e.g. "
            f"'{example}'; HTA matches ^nccl.*Kernel): commscope counts them as communication in both "
            "overlaps, so the overlap by HTA's rule here is HTA's rule with RCCL kernels as communication; "
            "HTA's own overlap leaves them out, and its kernel breakdown counts them as computation."]


def _recording_notes(trace: Trace) -> list[str]:
    """What a run directory's records leave the figures unable to tell: collectives nobody waited on
    through their handle, and host work in regions that do not count as compute (analyze.regions)."""
    if trace.source != "run":
        return []
    notes = []
    c = trace.collectives
    unwaited = int((c["wait_ns"].isna() & c["end_ns"].notna()).sum())
    if unwaited:
        notes.append(f"{unwaited} of {len(c)} collectives had not been waited on through their handle "
                     "(handle.wait()) when the step they completed in ended, where their records were written: "
                     "their exposed time is taken as 0 (a wait in a later step blocks on nothing, they had "
                     "completed). If the program blocked on them another way (DDP waits for its buckets inside "
                     "backward: record them with commscope.ddp_comm_hook, docs/recording.md), that wait counts as "
                     "whatever region it fell in.")
    leaves = regions.uncounted_leaf_regions(trace)
    if len(leaves):
        shown = ", ".join(f"'{n}' ×{k}" for n, k in zip(leaves["name"][:5], leaves["count"][:5]))
        more = f" and {len(leaves) - 5} more" if len(leaves) > 5 else ""
        notes.append(f"Regions not counted as compute: {shown}{more}. Only forward, backward, update:* and "
                     "compute:* regions, or rec.region(name, compute=True), are compute: the time in these counts "
                     "as neither compute nor communication (overlap, hidden % and the steps' compute share).")
    return notes


def arrival_lateness(trace: Trace) -> dict:
    """`report --json`'s `arrival_lateness`: the quantiles and the 1-2-5 histogram of how late each member
    of a collective instance arrived after its first member (analyze.lateness), in ms."""
    late = waiting.lateness(trace.collectives)
    hist, q = lateness.histogram(late), lateness.quantiles(late)
    return {
        "arrivals": int(len(late)),
        "quantiles": [{"quantile": float(r.quantile),
                       "lateness_ms": None if pd.isna(r.lateness_ns) else float(r.lateness_ns) / 1e6}
                      for r in q.itertuples()],
        "histogram": [{"lo_ms": r.lo_ns / 1e6, "hi_ms": r.hi_ns / 1e6, "arrivals": int(r.arrivals),
                       "share": sig(r.share), "ranks": int(r.ranks),
                       "worst_rank": None if pd.isna(r.worst_rank) else int(r.worst_rank),
                       "worst_ms": None if pd.isna(r.worst_ns) else float(r.worst_ns) / 1e6,  # exact: ns
                       "worst_step": None if pd.isna(r.worst_step) else int(r.worst_step),
                       "worst_label": None if pd.isna(r.worst_label) else str(r.worst_label)}
                      for r in hist.itertuples()],
    }


def hta_note(doc: dict) -> str | None:
    """One sentence when HTA's analyses were asked for (`--hta`, the default) but HTA could not be
    imported, else None: `report --json` says so in `hta`, the terminal and the page print this line."""
    hta = doc.get("hta") or {}
    if hta.get("status") != "unavailable":
        return None
    return (f"HTA's analyses were asked for (--hta, the default) but did not run: {hta.get('reason')}; "
            "--no-hta leaves them out.")


def comm_overlap_rows(doc: dict) -> list[dict]:
    """A summarize() document's per-rank communication overlaps as one row per rank, a column per key
    present (`hta_comm_overlap_pct_by_rank` → `hta_comm_overlap_pct`): the shape both the terminal and the
    page show them in."""
    present = [k for k in COMM_OVERLAP_KEYS if doc.get(k)]
    ranks = list(dict.fromkeys(r for k in present for r in doc[k]))
    return [{"rank": r, **{k.removesuffix("_by_rank"): doc[k].get(r) for k in present}} for r in ranks]


def comm_overlap_note(doc: dict) -> str:
    """What the per-rank communication overlaps of a summarize() document are, and, without device kernels,
    which ones do not apply (one sentence for the terminal and the page alike)."""
    if doc.get(RECORDED_COMM_OVERLAP):
        return ("Share of each rank's communication time during which it also computed, over the collectives' "
                "recorded spans (launch or start to end) and its compute regions or ops. No device kernels in "
                "this input: HTA's rule and the device-only overlap do not apply.")
    return ("Share of each rank's communication time during which it also computed. HTA's rule: HTA's "
            "get_comm_comp_overlap, which counts host-side launch ops (Triton) as compute and leaves out the "
            "last step; device only: communication kernels against the compute kernels (memcpy, memset and "
            "syncs left out).")


def undefined_overlap_note(doc: dict) -> str | None:
    """Why a per-rank communication overlap (COMM_OVERLAP_KEYS) is null for some ranks of a summarize()
    document, or None if none is.

    Each divides the communication time hidden by compute by the communication time, so a rank whose
    input shows none has no value. The usual case is NCCL at world size 1, which runs collectives without
    launching kernels."""
    missing = {k: [r for r, v in (doc.get(k) or {}).items() if v is None] for k in COMM_OVERLAP_KEYS}
    missing = {k: ranks for k, ranks in missing.items() if ranks}
    if not missing:
        return None
    device = doc.get(DEVICE_COMM_OVERLAP) or {}
    hta_only = [r for r in missing.get(HTA_COMM_OVERLAP, []) if device.get(r) is not None]
    if hta_only:  # the device saw communication: HTA's rule has left it out, it did not find none
        rest = {k: [r for r in rs if r not in hta_only] for k, rs in missing.items()}
        note = (f"HTA's rule is undefined for rank(s) {', '.join(hta_only)} where the device-only overlap is not: "
                "HTA leaves out the last profiled step (kernels launched after the last ProfilerStep began), "
                "which holds all of these ranks' communication in the steps selected.")
        other = undefined_overlap_note({**doc, **{k: {r: None for r in rs} for k, rs in rest.items()},
                                        **{k: {} for k, rs in rest.items() if not rs}})
        return note + (" " + other if other else "")
    ranks = list(dict.fromkeys(r for rs in missing.values() for r in rs))
    which = " and ".join(COMM_OVERLAP_NAMES[k] for k in missing)
    why = ("; NCCL at world size 1 launches no communication kernels"
           if doc.get("world_size") == 1 and doc.get("backend") == "nccl" else "")
    return (f"Communication overlap ({which}) is undefined for rank(s) {', '.join(ranks)}: their input shows "
            f"no communication time to divide by{why}.")
