"""Per collective: duration, exposed time, hidden share, bandwidth — and their per (rank, label) totals.

The quantities are defined once, in docs/analysis.md ("The quantities"); this module computes them.

`collective_table(trace)` adds to each row of `trace.collectives` (a collective without a label, a run
directory's `"label": null`, takes labels.NO_LABEL: every per-label figure counts it, under that name):
- `duration_ns`: execution time when the collective's start is known (kernel / gloo thread / CUDA events),
  else launch → completion (`end_ns − call_ns`, CPU run directories); `duration_basis(table)` names which.
- `exposed_ns`: the part of it during which the rank's computation was stalled:
  * with a recorded wait (`wait_ns`…`wait_end_ns`, run directories): the time the caller was blocked
    until the collective completed, [wait_ns, min(wait_end_ns, end_ns)) on host-timed (`wall`)
    collectives, whose end_ns is the completion the host saw (exposed_until); a collective never waited
    on exposes nothing;
  * otherwise (Kineto): the part of [start, end) not covered by the rank's compute intervals
    (GPU: non-communication kernels on any stream; CPU: top-level ops of the caller thread), nor by a
    collective of the rank that started before it (unshared_starts: collectives in flight together stall
    the rank once, charged to the first);
  * NaN where neither applies (exposure_unknown: a Kineto collective without a start or end).
- `wake_delay_ns` (`wall` collectives; NaN on the others): the rest of the blocked wait, after the
  collective had completed: the caller waking up and getting the interpreter back (an oversubscribed
  CPU, the GIL), host scheduling rather than communication; 0 if never waited on. The whole wait is
  still no compute (blocked_spans).
- `hidden_ns`: the part of its duration span (the [start, or launch where the start is unknown, end) its
  duration measures) covered by the rank's compute set, the per-collective form of the per-rank
  communication overlap (timeline.comm_overlap_by_rank). On Kineto traces that is duration − exposed,
  except where another collective in flight with it was charged part of its span. On run directories the
  exposed time is a blocked wait instead, so the two do not add up to the duration: the rest of the span
  is time the rank neither computed nor waited on this collective (waiting on another one, Python between
  regions).
- `hidden_pct`: hidden share of the duration, 100 · hidden_ns / duration.
- `transfer_ns`: the minimum `duration_ns` over the ranks of the same (group, seq): the one rank that
  arrived last did not wait, so its time is closest to the pure transfer time (nccl-tests convention).
  NaN (with the bandwidths below) where a member of the group is absent from the input
  (`group_complete` False, skew.complete): the last arriver may be the absent one, and then every
  present duration includes waiting for it (one rank of the 8×H100 fixture reads 76 GB/s busbw where
  the eight give 286). `bandwidth_withheld` says which labels lost their bandwidth so, and why.
  Rows whose end is their wait's return (`end_at_wait`: the recorder's mark on a work without a completion
  callback, gloo's `reduce_scatter_tensor`) take no part:
  their duration runs to whenever the caller waited, compute before the wait included (a 16 KB
  reduce-scatter waited after a 60 ms region read 60 ms, 0.0001 GB/s, "slow link").
- `algbw_gbps` = bytes / transfer_ns (bytes per ns = GB/s), `busbw_gbps` = algbw · nccl-tests factor for
  the op and group size n: all_reduce 2(n−1)/n; reduce_scatter, all_gather, all_to_all (n−1)/n; else 1.
  NaN (unknown) where n is unknown, and where n = 1 (bus_factors); both NaN where a collective moves no
  data (moves_data: a barrier, whatever bytes its trace gives it), and a label's totals leave such calls
  out.
- Queueing (`queue_split`): a process group runs its collectives one after another in launch order, so
  part of a collective's exposed time can be spent waiting for *earlier* collectives of the same group on
  the same rank to finish. `queued_ns` is the part of its exposed spans during which an earlier one
  (lower `seq`, same rank and group) was in flight (launch → end, the end bounded by the earliest end of
  any later collective of the group: launch order is completion order); each instant of it is charged to the
  head of the queue then, the earliest such collective, whose `queue_charged_ns` it adds to.
  `own_exposed_ns = exposed_ns − queued_ns`. Per rank, Σ own + Σ charged = Σ exposed: nothing is lost or
  counted twice. A collective whose start is its measured execution start (timing `kernel`, `gloo_thread`:
  Kineto traces) is never queued: its exposed spans lie in its own execution, the queueing before it, and
  an earlier collective in flight then ran beside it, not ahead of it. The split matters where the exposed
  time is a blocked host wait (run directories).
"""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from commscope.analyze import intervals as iv
from commscope.analyze.labels import NO_LABEL, missing_labels
from commscope.analyze.skew import complete_rows, ranks_present
from commscope.load.frames import P2P_MARK, Trace, origin_ns, rel


def bus_factors(op: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per collective, nccl-tests' bus bandwidth factor of its `op` in a group of `n` ranks: 2(n-1)/n for
    all_reduce, (n-1)/n for reduce_scatter, all_gather and all_to_all, 1 for the rest; NaN where `n` is
    unknown, and at n = 1, where no byte crosses between ranks (nccl-tests' factors give 0 for all_reduce
    and the like, 1 for broadcast: a number that reads as a link's speed without any link in use).
    Vectorized: ~10⁶ collectives at 1024 ranks."""
    op = np.asarray(op, dtype=object)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(op == "all_reduce", 2.0 * (n - 1) / n,
                       np.where(np.isin(op, ["reduce_scatter", "all_gather", "all_to_all"]), (n - 1) / n, 1.0))
    out[~(n > 1)] = np.nan  # NaN compares False
    return out


def _compute_sets_rel(trace: Trace, o: int) -> dict[int, iv.Intervals]:
    # Whole columns are converted once and split per rank by row positions (iv.rows_by_rank): filtering
    # the frames per rank copied every column (names included) once per rank.
    c = trace.compute
    c_rank, c_start, c_end = c["rank"].to_numpy(), rel(c["start_ns"], o), rel(c["end_ns"], o)
    w_rank, w_start, w_end = blocked_spans(trace.collectives, o)
    c_rows, w_rows = iv.rows_by_rank(c_rank), iv.rows_by_rank(w_rank)
    out = {}
    for rank in trace.ranks:
        m = c_rows.get(rank, iv.NO_ROWS)
        comp = iv.merge(c_start[m], c_end[m])
        wm = w_rows.get(rank)
        if wm is not None:
            comp = iv.subtract(comp, (w_start[wm], w_end[wm]))
        out[rank] = comp
    return out


def blocked_spans(coll: pd.DataFrame, o: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, wait, wait_end) of the collectives with a recorded wait (both ends known), ns since `o`: the
    whole time the caller was blocked, wake-up delay included (none of it is compute)."""
    wait, wait_end = rel(coll["wait_ns"], o), rel(coll["wait_end_ns"], o)
    m = ~np.isnan(wait) & ~np.isnan(wait_end)
    return coll["rank"].to_numpy()[m], wait[m], wait_end[m]


def wait_spans(coll: pd.DataFrame, o: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, wait, exposed_until) of the collectives with a recorded wait, ns since `o`: the exposed
    part of each blocked wait (module docstring), empty spans left out."""
    wait = rel(coll["wait_ns"], o)
    until = exposed_until(coll, rel(coll["wait_end_ns"], o), rel(coll["end_ns"], o))
    with np.errstate(invalid="ignore"):
        m = ~np.isnan(wait) & ~np.isnan(until) & (until > wait)
    return coll["rank"].to_numpy()[m], wait[m], until[m]


def exposed_until(coll: pd.DataFrame, wait_end: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, where the exposed part of its recorded wait ends: the wait's end, or the collective's end
    where that came first on a host-timed collective (`wall`: its end is the completion the host saw),
    since what the caller waited after completion is host scheduling (wake_delay_ns), not communication.
    NaN where the wait's end is unknown."""
    wall = (coll["timing"] == "wall").to_numpy() & ~np.isnan(end)
    with np.errstate(invalid="ignore"):
        return np.where(wall, np.fmin(wait_end, end), wait_end)


def compute_sets(trace: Trace) -> dict[int, iv.Intervals]:
    """Per rank, the normalized set of intervals during which it computed (waits removed for run dirs),
    in absolute int64 ns."""
    o = origin_ns(trace)
    return {r: (s.astype(np.int64) + o, e.astype(np.int64) + o)
            for r, (s, e) in _compute_sets_rel(trace, o).items()}


def to_rel(sets: dict[int, iv.Intervals], o: int) -> dict[int, iv.Intervals]:
    return {r: (rel(s, o), rel(e, o)) for r, (s, e) in sets.items()}


def collective_span(coll: pd.DataFrame, origin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch, start, end) in ns since `origin`: `start` is the measured execution start (kernel, gloo
    thread), else the launch (a wall clock only knows launch → completion). NaN where unknown."""
    launch = rel(coll["call_ns"], origin)
    start = rel(coll["start_ns"], origin)
    return launch, np.where(np.isnan(start), launch, start), rel(coll["end_ns"], origin)


def spanless(coll: pd.DataFrame) -> int:
    """How many collectives of `coll` have no execution span (collective_span's start or end is NaN: no
    end, or neither a measured start nor a launch), e.g. a host-side trace of a GPU job's: a timeline has
    nothing to draw for them, though every table counts them."""
    if not len(coll):
        return 0
    _, start, end = collective_span(coll, 0)
    return int((np.isnan(start) | np.isnan(end)).sum())


# What a collective's duration measures, by how it was timed (`collectives.timing`, docs/frames.md) when its
# execution start is known. The same word "duration" is a device kernel on one input and a host-side launch →
# completion on another, so `summarize()["duration_basis"]` says which one every mean_ms of a report is.
DURATION_BASES = {
    "kernel": "device kernel (trace)",
    "gloo_thread": "gloo execution on its worker thread (trace)",
    "cuda_event": "CUDA events on the calling stream, inputs ready to result usable (run directory)",
}
LAUNCH_TO_COMPLETION = "launch to completion (run directory)"


def duration_basis(coll: pd.DataFrame) -> str | None:
    """What `duration_ns` measures on the collectives `coll` (a value of DURATION_BASES, or
    LAUNCH_TO_COMPLETION where the start is unknown); several joined by "; " in order of first appearance
    when the input mixes them; None when no collective has a duration."""
    if not len(coll):
        return None
    start, end, call = (pd.to_numeric(coll[c], errors="coerce").notna().to_numpy()
                        for c in ("start_ns", "end_ns", "call_ns"))
    ok = end & (start | call)
    # the distinct (timing, start known) pairs first: a large job has millions of rows and a handful of pairs
    kinds = pd.DataFrame({"t": coll["timing"].astype(object).to_numpy()[ok], "s": start[ok]}).drop_duplicates()
    bases = [DURATION_BASES.get(t, f"timed as {t!r}") if s else LAUNCH_TO_COMPLETION
             for t, s in zip(kinds["t"], kinds["s"])]
    return "; ".join(dict.fromkeys(bases)) or None


def _exposure_rule(c: pd.DataFrame, start, end, wait, wait_end) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which rule sets each collective's exposed time (module docstring): `waited` (a recorded wait),
    `unwaited` (a run-directory collective never waited on: nothing), `todo` (Kineto: start→end minus
    compute). Rows in none of them (no start or end) have no exposed time."""
    waited = ~np.isnan(wait) & ~np.isnan(wait_end)
    recorded = c["timing"].isin(["wall", "cuda_event"]).to_numpy()
    todo = ~waited & ~recorded & ~np.isnan(start) & ~np.isnan(end)
    return waited, ~waited & recorded, todo


def exposure_unknown(coll: pd.DataFrame) -> np.ndarray:
    """Per row of `coll` (a collectives frame), whether its exposed time is unknown (NaN in
    collective_table): a Kineto collective whose execution start or end the trace does not hold (its
    kernel ran outside the profiling window, or none was matched to its launch). Sums over such rows are
    lower bounds, and unknown where every row is."""
    start, end = rel(coll["start_ns"], 0), rel(coll["end_ns"], 0)
    wait, wait_end = rel(coll["wait_ns"], 0), rel(coll["wait_end_ns"], 0)
    waited, unwaited, todo = _exposure_rule(coll, start, end, wait, wait_end)
    return ~(waited | unwaited | todo)


def exposed_spans(coll: pd.DataFrame, comp: iv.Intervals, origin: int) -> list[list[tuple[float, float]]]:
    """Per row of one rank's collectives, the exposed sub-intervals in ns since `origin` (`comp`: that
    rank's compute set on the same axis, see to_rel). Their lengths sum to `collective_table`'s
    exposed_ns: the same rule, kept as intervals so a timeline can draw them."""
    start, end = rel(coll["start_ns"], origin), rel(coll["end_ns"], origin)
    wait, wait_end = rel(coll["wait_ns"], origin), rel(coll["wait_end_ns"], origin)
    waited, _, todo = _exposure_rule(coll, start, end, wait, wait_end)
    rows = np.flatnonzero(todo)
    start[rows] = unshared_starts(start[rows], end[rows])
    return _spans(start, end, wait, exposed_until(coll, wait_end, end), waited, todo, comp)


def moves_data(c: pd.DataFrame) -> np.ndarray:
    """Per row: whether the collective moves data, so has a bandwidth. A barrier does not, whatever bytes
    its trace gives it (Kineto records c10d::barrier's 1-byte dummy tensor; a run directory 0): a
    bandwidth near 0 would read as a broken link."""
    with np.errstate(invalid="ignore"):
        return (c["bytes"].to_numpy(np.float64) > 0) & (c["op"].astype(str).to_numpy() != "barrier")


def unshared_starts(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per execution-timed collective of one rank (Kineto: [start, end) of its kernel or gloo thread), where
    its exposed time may begin: its start, or the latest end of the collectives that started before it
    (in row order on equal starts) where that is later. Collectives in flight together (gloo's two worker
    threads, NCCL kernels on two streams) stall the rank once: each instant is charged to the one that
    started first, as a run directory charges a wait to the collective waited on, so that a rank's
    collectives' exposed times add up to the time it was exposed, not to a multiple of it."""
    if len(start) < 2:
        return start
    order = np.argsort(start, kind="stable")
    ends = end[order]
    before = np.concatenate([[-np.inf], np.fmax.accumulate(ends)[:-1]])  # NaN ends (unknown) claim nothing
    out = start.copy()
    out[order] = np.fmax(start[order], before)
    return out


def _spans(start, end, wait, until, waited, todo, comp: iv.Intervals) -> list[list[tuple[float, float]]]:
    """exposed_spans on columns: a waited row's [wait, until) (`until`: exposed_until), a `todo` row's
    [start, end) minus `comp`.

    The rows' [start, end) are cut by the gaps of `comp` all at once (two searchsorted calls delimit the
    gaps each can meet, as in intervals.intersect): one interval-set operation per row cost ~50 µs, most
    of `collective_table` on a trace of a few thousand collectives. Each piece is the same max/min of the
    same values as intervals.subtract of the row alone, so the spans are equal to the last bit."""
    out: list[list[tuple[float, float]]] = [[] for _ in range(len(start))]
    with np.errstate(invalid="ignore"):
        w = np.flatnonzero(waited & (until > wait))
    for j, s, e in zip(w.tolist(), wait[w].tolist(), until[w].tolist()):
        out[j] = [(s, e)]
    rows = np.flatnonzero(todo & (end > start))
    if not len(rows):
        return out
    qs, qe = start[rows], end[rows]
    gs, ge = iv.complement(comp, qs.min(), qe.max())
    which, gap = iv.expand(np.searchsorted(ge, qs, side="right"), np.searchsorted(gs, qe, side="left"))
    ps, pe = np.maximum(gs[gap], qs[which]), np.minimum(ge[gap], qe[which])
    keep = pe > ps
    for j, s, e in zip(rows[which[keep]].tolist(), ps[keep].tolist(), pe[keep].tolist()):
        out[j].append((s, e))
    return out


# timings whose start is the collective's own execution start (a kernel, a gloo worker thread's execution)
EXECUTION_TIMED = ("kernel", "gloo_thread")


def queue_split(c: pd.DataFrame, comp: dict[int, iv.Intervals], o: int,
                pairs: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(queued_ns, queue_charged_ns) per row of the collectives `c` (module docstring). `comp`: per rank
    compute set in ns since `o` (to_rel), the same the exposed time was computed against. `pairs`: if a
    list, each charge is appended to it as (queued row, charged row, ns), rows as positions in `c`."""
    queued, charged = np.zeros(len(c)), np.zeros(len(c))
    launch, start, end = collective_span(c, o)
    busy_from = np.where(np.isnan(launch), start, launch)  # in the group's queue from its launch
    seq = pd.to_numeric(c["seq"], errors="coerce").to_numpy(np.float64)
    ok = ~np.isnan(busy_from) & ~np.isnan(end) & ~np.isnan(seq)
    idx = np.flatnonzero(ok)
    # the exposure rule's columns once for all rows; each group's rows are taken from them
    x_start, x_end = rel(c["start_ns"], o), end
    wait, wait_end = rel(c["wait_ns"], o), rel(c["wait_end_ns"], o)
    waited, _, todo = _exposure_rule(c, x_start, x_end, wait, wait_end)
    wait_end = exposed_until(c, wait_end, x_end)
    # Exposure of a collective with a measured execution start counts from that start, and whatever queue
    # delayed it lies before: an earlier collective still in flight during its exposed spans ran at the same
    # time, not ahead of it (gloo runs a group's collectives on a pool of worker threads; a gloo trace with
    # several groups cannot tell them apart; NCCL's point-to-point ops have streams of their own).
    executed = c["timing"].isin(EXECUTION_TIMED).to_numpy(bool) & ~np.isnan(x_start)
    for (rank, _), pos in c.iloc[idx].groupby(["rank", "group"], sort=False, dropna=False).indices.items():
        rows = idx[pos]
        rows = rows[np.argsort(seq[rows], kind="stable")]
        spans = _spans(x_start[rows], x_end[rows], wait[rows], wait_end[rows], waited[rows], todo[rows],
                       comp.get(int(rank), iv.empty()))
        b = busy_from[rows]
        # A recorded end is an upper bound (a wall clock may only see completion when it is waited on);
        # the group runs in launch order, so a collective was done once any later one of its group was.
        # The bounded ends are nondecreasing: the collectives still in flight at t are a suffix.
        e = np.minimum.accumulate(end[rows][::-1])[::-1]
        bl, el = b.tolist(), e.tolist()
        ran = executed[rows]
        for j, sp in enumerate(spans):
            if not sp or j == 0 or ran[j]:
                continue
            for i in range(bisect.bisect_right(el, sp[0][0], 0, j), j):
                n, sp = _take(sp, bl[i], el[i])
                if n > 0:
                    queued[rows[j]] += n
                    charged[rows[i]] += n
                    if pairs is not None:
                        pairs.append((int(rows[j]), int(rows[i]), n))
                    if not sp:
                        break
    return queued, charged


def _take(spans: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, list[tuple[float, float]]]:
    """How much of the sorted, disjoint `spans` lies in [lo, hi), and what is left of them outside it.
    Plain floats: the sets here hold one or two intervals, where numpy's per-call cost would dominate."""
    taken, rest = 0.0, []
    for s, t in spans:
        a, z = max(s, lo), min(t, hi)
        if z > a:
            taken += z - a
            if s < a:
                rest.append((s, a))
            if z < t:
                rest.append((z, t))
        else:
            rest.append((s, t))
    return taken, rest


def collective_table(trace: Trace, comp: dict[int, iv.Intervals] | None = None,
                     queue_pairs: list | None = None) -> pd.DataFrame:
    """`trace.collectives` plus the columns in the module docstring. `comp`: compute_sets(trace), if
    already computed. `queue_pairs`: if a list, queue_split's charges are appended to it as (queued row,
    charged row, ns), rows as positions in the table (what summary.queued_behind_by_label reads)."""
    c = trace.collectives.copy()
    if "label" in c:
        missing = missing_labels(c["label"])
        if missing.any():
            c.loc[missing, "label"] = NO_LABEL
    if not len(c):
        for col in ("duration_ns", "exposed_ns", "wake_delay_ns", "hidden_ns", "hidden_pct", "queued_ns",
                    "queue_charged_ns", "own_exposed_ns",
                    "transfer_ns", "algbw_gbps", "busbw_gbps"):
            c[col] = pd.Series(dtype=np.float64)
        c["group_complete"] = pd.Series(dtype=bool)
        return c
    o = origin_ns(trace)
    comp = _compute_sets_rel(trace, o) if comp is None else to_rel(comp, o)
    _, span_start, end = collective_span(c, o)
    start = rel(c["start_ns"], o)  # measured execution start only: exposure by subtraction needs it
    wait, wait_end = rel(c["wait_ns"], o), rel(c["wait_end_ns"], o)
    c["duration_ns"] = end - span_start
    exposed = np.full(len(c), np.nan)
    waited, unwaited, todo = _exposure_rule(c, start, end, wait, wait_end)
    until = exposed_until(c, wait_end, end)
    exposed[waited] = (until - wait)[waited]  # clipped at 0 below: completed before the wait began
    exposed[unwaited] = 0.0  # run-dir collectives never waited on (the recorder saw no wait) block nothing
    ranks = c["rank"].to_numpy()
    todo_rows = np.flatnonzero(todo)
    for rank, pos in iv.rows_by_rank(ranks[todo_rows]).items():
        rows = todo_rows[pos]
        qs, qe = unshared_starts(start[rows], end[rows]), end[rows]
        exposed[rows] = np.maximum(qe - qs, 0.0) - iv.covered(qs, np.maximum(qe, qs), comp.get(int(rank), iv.empty()))
    c["exposed_ns"] = np.clip(exposed, 0.0, None)
    wake = np.full(len(c), np.nan)
    wall = (c["timing"] == "wall").to_numpy()
    wake[wall & unwaited] = 0.0
    wake[wall & waited] = (wait_end - wait)[wall & waited] - c["exposed_ns"].to_numpy()[wall & waited]
    c["wake_delay_ns"] = np.clip(wake, 0.0, None)
    dur = c["duration_ns"].to_numpy(np.float64)
    c["hidden_ns"] = _hidden(c, ranks, span_start, end, dur, comp)
    with np.errstate(invalid="ignore", divide="ignore"):
        c["hidden_pct"] = np.where(dur > 0, 100.0 * np.minimum(c["hidden_ns"], dur) / dur, np.nan)
    c["queued_ns"], c["queue_charged_ns"] = queue_split(c, comp, o, queue_pairs)
    c.loc[c["exposed_ns"].isna(), "queued_ns"] = np.nan  # part of an exposed time that is unknown
    c["own_exposed_ns"] = c["exposed_ns"] - c["queued_ns"]
    # the transfer time needs the last arriver, whose duration alone holds no waiting: only an instance
    # with every member present is sure to have it
    c["group_complete"] = complete_rows(c)
    at_wait = (c["end_at_wait"] == True).to_numpy(bool)  # noqa: E712 (None where not said: a completion)
    measured = c["duration_ns"].where(~at_wait)
    c["transfer_ns"] = measured.groupby([c["group"], c["seq"]]).transform("min").where(c["group_complete"])
    with np.errstate(invalid="ignore", divide="ignore"):
        nbytes = c["bytes"].astype(np.float64)
        c["algbw_gbps"] = np.where((c["transfer_ns"] > 0) & moves_data(c), nbytes / c["transfer_ns"], np.nan)
    c["busbw_gbps"] = c["algbw_gbps"] * bus_factors(c["op"].to_numpy(object), c["group_size"].astype(np.float64))
    return c


# why a bandwidth over an incomplete group would mislead: the label's reason and the report's note end alike
_WITHHELD_BECAUSE = "so the shortest duration over the ranks present includes waiting for the absent ones"
# why one whose ends are the waits' returns would
_ENDS_AT_WAIT = ("their ends are the waits' returns (the backend gives no completion for this op, e.g. gloo's "
                 "reduce_scatter_tensor), so a duration includes whatever the caller did before waiting")


def bandwidth_withheld(table: pd.DataFrame, n_present: int, world_size: int) -> dict[str, str]:
    """Per label whose bandwidth is withheld, why: it has collectives of known size, and none of them has a
    transfer time: none has every member of its group in the input (`group_complete`), or those that do
    end at their waits' returns (`end_at_wait`). A label with some measured collectives keeps the bandwidth
    over those and is not listed; a label of unknown sizes has no bandwidth for that reason, not this one.
    `n_present` of the job's `world_size` ranks are in the input."""
    if not len(table) or "group_complete" not in table:
        return {}
    # a send or recv is never complete (its peer is not matched): the summary's note says so, not this one
    sized = (pd.to_numeric(table["bytes"], errors="coerce").notna().to_numpy()
             & ~table["group"].astype(str).str.contains(P2P_MARK, regex=False).to_numpy(bool))
    done = table["group_complete"].to_numpy(bool)
    timed = table["transfer_ns"].notna().to_numpy()
    labels = table["label"].astype(str).to_numpy(dtype=object)
    lacking = set(labels[sized]) - set(labels[sized & timed])
    incomplete = (f"no collective of the label has every member of its group in the input"
                  f"{ranks_present(n_present, world_size)}, {_WITHHELD_BECAUSE}")
    at_wait = f"the collectives of the label with every member of their group in the input: {_ENDS_AT_WAIT}"
    complete = set(labels[sized & done])
    return {lab: at_wait if lab in complete else incomplete for lab in sorted(lacking)}


def bandwidth_notes(withheld: dict[str, str], n_present: int, world_size: int) -> list[str]:
    """The report's notes naming the labels whose bandwidth is withheld (bandwidth_withheld), one per reason,
    or none: the tables show a dash there, as for any unknown number, and the note says it is no unknown size."""
    def shown(names: list[str]) -> str:
        return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")

    incomplete = [lab for lab, why in withheld.items() if why.endswith(_WITHHELD_BECAUSE)]
    at_wait = [lab for lab in withheld if lab not in incomplete]
    out = []
    if incomplete:
        out.append(f"Bandwidth withheld for {shown(incomplete)}: none of {'its' if len(incomplete) == 1 else 'their'} "
                   f"collectives has every member of its group in the input{ranks_present(n_present, world_size)}, "
                   f"{_WITHHELD_BECAUSE}.")
    if at_wait:
        out.append(f"Bandwidth withheld for {shown(at_wait)}: {_ENDS_AT_WAIT}; their mean ms is launch to the "
                   "wait's return.")
    return out


def _hidden(c: pd.DataFrame, ranks: np.ndarray, span_start: np.ndarray, end: np.ndarray, dur: np.ndarray,
            comp: dict[int, iv.Intervals]) -> np.ndarray:
    """hidden_ns per row (module docstring): the duration span intersected with the compute set. Neither
    kind of exposed time is the rest of it: a run directory's is a blocked wait on this collective alone,
    and a Kineto collective's leaves out what an earlier one in flight with it was charged (unshared_starts),
    so duration − exposed would count time spent on other collectives as hidden by compute. NaN where the
    exposed time is unknown (a Kineto collective without a start or end)."""
    exposed = c["exposed_ns"].to_numpy(np.float64)
    # the rows the cover below leaves out: an empty span hides nothing; an unknown time stays unknown
    hidden = np.where(np.isnan(exposed) | np.isnan(dur), np.nan, 0.0)
    recorded = (c["timing"].isin(["wall", "cuda_event"]).to_numpy() | ~np.isnan(exposed)) & (dur > 0)
    rec_rows = np.flatnonzero(recorded)
    for rank, pos in iv.rows_by_rank(ranks[rec_rows]).items():
        rows = rec_rows[pos]
        hidden[rows] = iv.covered(span_start[rows], end[rows], comp.get(int(rank), iv.empty()))
    return hidden


def group_rows(table: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per row its group of `keys` (0…G−1 in sorted key order; −1 where a key is missing, a row
    groupby drops), and per group its first row."""
    code = np.zeros(len(table), dtype=np.int64)
    for k in keys:
        c, uniques = pd.factorize(table[k], sort=True)
        code = np.where((code < 0) | (c < 0), -1, code * len(uniques) + c)
    rows = np.flatnonzero(code >= 0)
    _, first, inverse = np.unique(code[rows], return_index=True, return_inverse=True)
    group = np.full(len(table), -1, dtype=np.int64)
    group[rows] = inverse
    return group, rows[first]


def _grouped_totals(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of `keys` (sorted): op, count, bytes, mean duration, exposed time, hidden % and
    algbw / busbw as total bytes over total transfer time (over collectives with known bytes and transfer
    time: each call weighs by its transfer time, so the figure is what the label's bytes moved at overall).

    Columns are numpy; the sums are one pandas groupby-sum of a float matrix: its compensated (Kahan)
    summation is what makes them equal per-column groupby sums (the bus-byte products
    are not whole numbers), and a mean is that sum over the count of values present, as groupby's mean."""
    group, first = group_rows(table, keys)
    n_groups, rows = len(first), group >= 0
    col = {c: table[c].to_numpy(np.float64) for c in ("bytes", "duration_ns", "exposed_ns", "hidden_ns",
                                                         "transfer_ns")}
    nbytes, dur, exposed, transfer = col["bytes"], col["duration_ns"], col["exposed_ns"], col["transfer_ns"]
    with np.errstate(invalid="ignore"):
        ok = moves_data(table) & (transfer > 0)  # known, moving data, with a transfer time
    bus = table["busbw_gbps"].to_numpy(np.float64) * transfer  # bus bytes, NaN where the group size is unknown
    with np.errstate(invalid="ignore"):
        bus_ok = ok & ~np.isnan(bus)
    # The hidden share sums what compute left uncovered of each collective, duration − hidden_ns (_hidden:
    # the span's cover by compute; not the exposed time, which leaves out waits on other collectives). A row
    # whose hidden time is unknown (its exposed time is) adds nothing (NaN is skipped by the sum).
    with np.errstate(invalid="ignore"):
        uncovered = np.maximum(dur - col["hidden_ns"], 0.0)
    parts = [dur, exposed, uncovered, np.where(ok, nbytes, np.nan), np.where(ok, transfer, np.nan),
             np.where(bus_ok, bus, np.nan), nbytes, np.where(bus_ok, transfer, np.nan)]
    g = group[rows]
    sums = pd.DataFrame(np.column_stack(parts)[rows]).groupby(g).sum().to_numpy().reshape(n_groups, len(parts))
    dur_sum, exp_sum, uncovered_sum, b, t, bb, bytes_sum, bt = sums.T
    present = np.column_stack([~np.isnan(dur[rows]), ~np.isnan(nbytes[rows]), np.isnan(exposed[rows])])
    n_dur, n_bytes, n_unknown = (np.bincount(g, weights=present[:, i], minlength=n_groups) for i in (0, 1, 2))
    out = {k: table[k].array.take(first) for k in keys}
    out["op"] = _first_present(table["op"].array, group, n_groups)
    out["count"] = np.bincount(g, minlength=n_groups).astype(np.int64)
    if table["bytes"].dtype.kind in "iu":  # all known (gloo traces): an exact integer sum, as groupby's
        out["bytes"] = np.zeros(n_groups, dtype=table["bytes"].dtype)
        np.add.at(out["bytes"], g, table["bytes"].to_numpy()[rows])
    else:
        out["bytes"] = np.where(n_bytes > 0, bytes_sum, np.nan)  # sum(min_count=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean_ms"] = np.where(n_dur > 0, dur_sum / n_dur, np.nan) / 1e6
        # a total over the collectives whose exposed time is known; unknown (NaN) when none is
        out["exposed_ms"] = np.where(out["count"] > n_unknown, exp_sum, np.nan) / 1e6
        out["hidden_pct"] = np.where(dur_sum > 0, 100.0 * (1 - uncovered_sum / dur_sum), np.nan)
        out["algbw_gbps"] = np.where(t > 0, b / t, np.nan)
        # over the collectives whose bus factor is known: none known (group size unknown or 1) is unknown
        out["busbw_gbps"] = np.where(bt > 0, bb / bt, np.nan)
    out["exposed_unknown"] = n_unknown.astype(np.int64)  # collectives whose exposed time is unknown
    return pd.DataFrame(out)


def _first_present(values, group: np.ndarray, n_groups: int):
    """Per group, its first value in row order that is not missing (groupby.first); missing if none."""
    n = len(values)
    pos = np.where((group >= 0) & ~pd.isna(values), np.arange(n), n)
    first = np.full(n_groups, n, dtype=np.int64)
    np.minimum.at(first, np.maximum(group, 0), pos)
    return values.take(np.where(first < n, first, -1), allow_fill=True)


def label_stats(table: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, label): count, total bytes, mean duration, total exposed, hidden %, algbw/busbw, and
    `exposed_unknown`, how many of its collectives have no known exposed time (exposure_unknown):
    `exposed_ms` totals the others, and is NaN when all of them are unknown."""
    cols = ["rank", "label", "op", "count", "bytes", "mean_ms", "exposed_ms", "hidden_pct", "algbw_gbps",
            "busbw_gbps", "exposed_unknown"]
    if not len(table):
        return pd.DataFrame(columns=cols)
    return _grouped_totals(table, ["rank", "label"])[cols]


def label_totals(table: pd.DataFrame) -> pd.DataFrame:
    """Per label over all ranks, indexed by label: mean duration, hidden % and bandwidths by the same
    rules as label_stats (its sums, taken over every rank)."""
    cols = ["mean_ms", "hidden_pct", "algbw_gbps", "busbw_gbps"]
    if not len(table):
        return pd.DataFrame(columns=cols)
    return _grouped_totals(table, ["label"]).set_index("label")[cols]


QUEUE_FIELDS = {"own_exposed_ms": "own_exposed_ns", "queued_ms": "queued_ns",
                "queue_charged_ms": "queue_charged_ns", "wake_delay_ms": "wake_delay_ns"}


def label_queueing(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per label, the queueing split of its exposed time, each a per-rank total averaged over the ranks
    that have the label (as `exposed_ms`): `own_exposed_ms`, `queued_ms` (behind earlier collectives of
    its group), `queue_charged_ms` (later collectives' waits spent behind it) and
    `attributed_exposed_ms = own + charged`, the stall this label is responsible for, and `wake_delay_ms`
    (the blocked time after its collectives had completed, host-timed run directories only: NaN
    elsewhere). A rank's totals are NaN where none of its collectives of the label has a known exposed
    time."""
    if not len(table) or "queued_ns" not in table:
        return {}
    cols = list(QUEUE_FIELDS.values())
    # a rank's total is unknown (NaN) where none of its collectives of the label has a known exposed time
    per_rank = table.groupby(["label", "rank"], sort=False)[cols].sum(min_count=1) / 1e6
    unknown = table["exposed_ns"].isna().groupby([table["label"], table["rank"]], sort=False).all()
    per_rank.loc[unknown[unknown].index] = np.nan
    mean = per_rank.groupby(level="label", sort=False).mean()
    out = {}
    for label, r in mean.iterrows():
        d = {k: float(r[v]) for k, v in QUEUE_FIELDS.items()}  # NaN: no rank's exposed time known
        d["attributed_exposed_ms"] = d["own_exposed_ms"] + d["queue_charged_ms"]
        out[str(label)] = d
    return out
