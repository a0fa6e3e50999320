"""Placement: where each collective of a step starts relative to the end of the backward pass.

Why: what makes a collective exposed is usually where it starts. A reduce-scatter launched after the last
backward kernel has nothing left to hide behind; one launched from a gradient hook inside the backward
pass can run under the remaining backward compute. `placement(trace, table)` lists, per (rank, step), the
collectives in launch order with their label, bytes, start relative to the end of backward (negative:
inside it), duration, exposed time (and its queueing split, analyze.exposure), hidden time and the compute
they overlapped.

Hidden time is exposure.collective_table's `hidden_ns`, and the overlapped names are measured against the
same compute set (exposure.compute_sets: compute regions and ops minus the blocked waits): a wait on a
collective inside a `backward` region (DDP blocks on its buckets there) is no compute, so a collective
is not hidden by the time its own rank spent waiting on it or another one. With the waits counted as
compute, placement said DDP's buckets were hidden for their whole duration while the label table said
12 %, and hidden + exposed exceeded the duration.

End of backward per (rank, step), the first rule that applies (`backward_end_source`):
1. `backward region`: the latest end of a region named `backward` in the step (run directories: the
   recorder's `rec.region("backward")`, one per micro-step; Kineto: a `record_function("backward")`
   scope). On a GPU trace the end is the latest end of the compute kernels launched inside such a
   region (device time), else the region's own (host) end.
2. `last hook` (run directories): the latest post-accumulate-grad hook of the step: the last gradient
   autograd produced, on the host.
3. `backward-named compute` (Kineto): the latest end of a compute event of the step whose name marks
   backward work (`BACKWARD_NAME`: autograd's `evaluate_function`, `…Backward…`, Triton/flash kernels
   compiled from backward graphs carry `backward`/`bwd`). A lower bound: backward kernels not named so
   (cuBLAS GEMMs of weight gradients, AccumulateGrad additions) may run later, so a collective that
   starts "after the end of backward" by this rule may still overlap backward work.
4. none: `start_vs_backward_end_ms` is null; order, exposure and overlap are still listed.

Start: the measured execution start (kernel, gloo thread, CUDA event) when known, else the launch
(`start_basis` says which): CPU run directories only know launch → completion. Steps and the per-step
launch order follow the frames' `step` column; `seq` is the position in that order (0, 1, …),
`group_seq` the process group's sequence number (the cross-rank key).

Invariants: pure function of the frames and exposure.collective_table; every collective with a step ≥ 0
appears exactly once; times in ms.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from commscope.analyze import exposure
from commscope.analyze import intervals as iv
from commscope.analyze.exposure import collective_table
from commscope.load.frames import Trace, origin_ns, rel
from commscope.util.num import rounded_floats, whole, whole_floats

BACKWARD_NAME = re.compile(r"autograd::engine::evaluate_function|Backward|backward|(?:^|_)bwd(?:_|$)")
MAX_OVERLAPPED = 3  # compute names listed per collective, most overlap first

COLUMNS = ["rank", "step", "seq", "group", "group_seq", "label", "phase", "op", "bytes", "start_basis",
           "start_ms", "start_vs_backward_end_ms", "backward_end_source", "duration_ms", "exposed_ms",
           "queued_ms", "own_exposed_ms", "hidden_ms", "overlapped"]


def short_name(name: str) -> str:
    """A kernel or op name without return type, namespaces, arguments and long template arguments:
    `void at::native::elementwise_kernel<128, 4, …>(…)` → `elementwise_kernel<128, 4, …>`."""
    n = re.sub(r"^void ", "", name)
    n = re.sub(r"^(?:[A-Za-z_]\w*::|\(anonymous namespace\)::)+", "", n)
    depth, cut = 0, len(n)
    for i, ch in enumerate(n):  # drop the argument list: the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i and n[i - 1] != " ":
            cut = i
            break
    n = n[:cut]
    m = re.match(r"([^<]*<[^,<>]*(?:,\s*[^,<>]*)?)", n)
    if "<" in n and m and len(n) > 48:
        n = m.group(1) + ", …>"
    return n.strip()[:64]


def backward_ends(trace: Trace, factorized: tuple[np.ndarray, pd.Index] | None = None) -> pd.DataFrame:
    """Per (rank, step): `backward_end_ns` (absolute, int) and `source` by the rules of the module
    docstring; (rank, step) pairs without evidence are absent. `factorized`: _compute_names(trace), if
    already computed."""
    rows: dict[tuple[int, int], tuple[int, str]] = {}
    reg = trace.regions
    bw = reg[(reg["name"] == "backward") & (reg["step"] >= 0)] if len(reg) else reg
    k = trace.kernels
    on_gpu = len(k) > 0 and "launch_ns" in k
    if on_gpu and len(bw):
        k = k[~k["is_comm"].astype(bool) & k["launch_ns"].notna()]
        k_rows = iv.rows_by_rank(k["rank"].to_numpy())
        k_launch, k_end = k["launch_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    if len(bw):
        # one groupby for every (rank, step): iterating pandas groups cost ~60 µs each (2,560 at 64 ranks)
        grouped = bw.groupby(["rank", "step"])
        ends = grouped["end_ns"].max()
        if on_gpu:
            at = grouped.indices
            b_start, b_end = bw["start_ns"].to_numpy(np.int64), bw["end_ns"].to_numpy(np.int64)
        for (rank, step), end in ends.items():
            end = int(end)
            if on_gpu:
                m = k_rows.get(rank, iv.NO_ROWS)
                launch = k_launch[m]
                inside = np.zeros(len(m), dtype=bool)
                g = at[(rank, step)]
                for s, e in zip(b_start[g], b_end[g]):
                    inside |= (launch >= s) & (launch < e)
                if inside.any():
                    end = int(k_end[m][inside].max())
            rows[(int(rank), int(step))] = (end, "backward region")
    h = trace.hooks
    if len(h):
        for (rank, step), t in h[h["step"] >= 0].groupby(["rank", "step"])["t_ns"].max().items():
            rows.setdefault((int(rank), int(step)), (int(t), "last hook"))
    if trace.source != "run":
        c = trace.compute
        codes, uniques = _compute_names(trace) if factorized is None else factorized
        is_bw = np.array([bool(BACKWARD_NAME.search(n)) for n in uniques], dtype=bool)
        named = c[(c["step"] >= 0).to_numpy() & (codes >= 0) & is_bw[np.maximum(codes, 0)]]
        for (rank, step), t in named.groupby(["rank", "step"])["end_ns"].max().items():
            rows.setdefault((int(rank), int(step)), (int(t), "backward-named compute"))
    return pd.DataFrame([(r, s, e, src) for (r, s), (e, src) in sorted(rows.items())],
                        columns=["rank", "step", "backward_end_ns", "source"])


def _compute_names(trace: Trace) -> tuple[np.ndarray, pd.Index]:
    """The compute events' names factorized (~10⁶ events, a few hundred distinct names): codes, names."""
    return pd.factorize(trace.compute["name"].astype(str), sort=False)


def _overlapped(trace: Trace, coll: pd.DataFrame, o: int, factorized: tuple[np.ndarray, pd.Index] | None = None,
                comp: dict[int, iv.Intervals] | None = None) -> list[list[str]]:
    """Per collective: the names of the compute events that overlap its [start, end) most (summed per
    name, short_name), each event's overlap taken inside its rank's compute set (`comp`, ns since `o`,
    exposure.to_rel of exposure.compute_sets; computed if None): the part of a `backward` region spent
    blocked in a wait hides nothing, so it names nothing.

    Vectorized per rank: every (collective, compute event) pair that can overlap, found by two searchsorted calls
    over the events sorted by start (those starting before the collective ends, from the first whose
    running maximum end passes its start). Pairs are made in blocks of at most _PAIR_BLOCK, so memory
    stays bounded when one long compute event makes every later collective a candidate of it.
    `factorized`: _compute_names(trace), if already computed."""
    n = len(coll)
    names: list[list[str]] = [[] for _ in range(n)]
    comp, sets = trace.compute, comp
    if not n or not len(comp):
        return names
    c_rank = comp["rank"].to_numpy()
    c_s, c_e = rel(comp["start_ns"], o), rel(comp["end_ns"], o)
    sets = exposure._compute_sets_rel(trace, o) if sets is None else sets
    codes, uniques = _compute_names(trace) if factorized is None else factorized
    start = np.where(coll["start_ns"].isna(), rel(coll["call_ns"], o), rel(coll["start_ns"], o))
    end = rel(coll["end_ns"], o)
    q_rank = coll["rank"].to_numpy()
    ok = ~(np.isnan(start) | np.isnan(end)) & (end > start)
    hits: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (collective, name code, overlap) pairs
    held = 0
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    ok_rows = np.flatnonzero(ok)
    nonempty = np.flatnonzero(c_e > c_s)
    c_rows = iv.rows_by_rank(c_rank[nonempty])
    for r, at in iv.rows_by_rank(q_rank[ok_rows]).items():
        qi = ok_rows[at]
        ci = nonempty[c_rows.get(r, iv.NO_ROWS)]
        if not len(ci):
            continue
        ci = ci[np.argsort(c_s[ci], kind="stable")]
        rset = sets.get(int(r), iv.empty())
        lo = np.searchsorted(np.maximum.accumulate(c_e[ci]), start[qi], side="right")
        hi = np.searchsorted(c_s[ci], end[qi], side="left")
        cnt = np.maximum(hi - lo, 0)
        for block in np.array_split(np.arange(len(qi)), max(1, int(cnt.sum()) // _PAIR_BLOCK + 1)):
            which, pos = iv.expand(lo[block], hi[block])
            q, c = qi[block][which], ci[pos]
            ov = iv.covered(np.maximum(c_s[c], start[q]), np.minimum(c_e[c], end[q]), rset)
            hit = ov > 0
            if hit.any():
                hits.append((q[hit], codes[c[hit]], ov[hit]))
                held += int(hit.sum())
            if held >= _PAIR_BLOCK:
                pairs.append(_most_overlapped(hits))
                hits, held = [], 0
    if hits:
        pairs.append(_most_overlapped(hits))
    short = {}
    for q, name in pairs:
        for j, code in zip(q.tolist(), name.tolist()):
            if code not in short:
                short[code] = short_name(str(uniques[code]))
            names[j].append(short[code])
    return names


def _most_overlapped(hits: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Of (collective, name code, overlap) pairs, per collective the MAX_OVERLAPPED names with the most
    overlap summed, most first (ties: first met first), as (collective, name code) arrays.

    Every collective's pairs are in one block of `hits` (blocks split by collective), so the pairs of
    all ranks go through one groupby: per rank, pandas' fixed cost per call outweighed the work."""
    q, name, ov = (np.concatenate(a) for a in zip(*hits))
    d = pd.DataFrame({"q": q, "name": name, "ov": ov})
    d = d.groupby(["q", "name"], sort=False)["ov"].sum().reset_index()
    d = d.sort_values(["q", "ov"], ascending=[True, False], kind="stable")
    d = d[d.groupby("q").cumcount() < MAX_OVERLAPPED]
    return d["q"].to_numpy(), d["name"].to_numpy()


_PAIR_BLOCK = 2_000_000  # (collective, compute event) pairs made at once


def placement(trace: Trace, table: pd.DataFrame | None = None,
              comp: dict[int, iv.Intervals] | None = None) -> pd.DataFrame:
    """One row per collective with a step (COLUMNS), ordered by rank, step and launch order. `table`:
    exposure.collective_table(trace, comp), if already computed; `comp`: exposure.compute_sets(trace),
    the compute set `table` was computed against, if already computed."""
    comp = exposure.compute_sets(trace) if comp is None else comp
    table = collective_table(trace, comp) if table is None else table
    t = table[table["step"] >= 0] if len(table) else table
    if not len(t):
        return pd.DataFrame(columns=COLUMNS)
    o = origin_ns(trace)
    launch, start = rel(t["call_ns"], o), rel(t["start_ns"], o)
    measured = ~np.isnan(start)
    first = np.where(measured, start, launch)
    key = np.where(np.isnan(launch), first, launch)  # launch order; pre-window kernels by their start
    t = t.assign(_key=key, _start=first, _basis=np.where(measured, "start", "launch"))
    t = t.sort_values(["rank", "step", "_key"], kind="stable")
    factorized = _compute_names(trace)  # both backward_ends and _overlapped read them
    ends = {(r, s): (int(e) - o, src) for r, s, e, src in backward_ends(trace, factorized).itertuples(index=False)}
    found = [ends.get((int(r), int(s)), (np.nan, None)) for r, s in zip(t["rank"], t["step"])]
    bw = np.array([f[0] for f in found], dtype=np.float64)  # exact: a difference of ints first
    t = t.assign(source=[f[1] for f in found])
    overlapped = _overlapped(trace, t, o, factorized, exposure.to_rel(comp, o))
    hidden = t["hidden_ns"].to_numpy(np.float64) / 1e6  # the table's: one definition (module docstring)
    out = pd.DataFrame({
        "rank": t["rank"].astype(int), "step": t["step"].astype(int),
        "seq": t.groupby(["rank", "step"]).cumcount().to_numpy(), "group": t["group"],
        "group_seq": t["seq"], "label": t["label"], "phase": t["phase"], "op": t["op"], "bytes": t["bytes"],
        "start_basis": t["_basis"], "start_ms": t["_start"].to_numpy() / 1e6,
        "start_vs_backward_end_ms": (t["_start"].to_numpy() - bw) / 1e6,
        "backward_end_source": t["source"],
        "duration_ms": t["duration_ns"].to_numpy(np.float64) / 1e6,
        "exposed_ms": t["exposed_ns"].to_numpy(np.float64) / 1e6,
        "queued_ms": t["queued_ns"].to_numpy(np.float64) / 1e6,
        "own_exposed_ms": t["own_exposed_ns"].to_numpy(np.float64) / 1e6,
        "hidden_ms": hidden, "overlapped": overlapped,
    })
    return out[COLUMNS].reset_index(drop=True)


def records(df: pd.DataFrame) -> list[dict]:
    """`report --json`'s `placement`: the rows as JSON objects (ms rounded as the rest of the document,
    NaN → null, `start_ms` dropped: it is on the loader's internal axis). Built column by column: at 64
    ranks the rows number tens of thousands, and a conversion per cell through pandas' row dicts took
    most of `report --json`'s analysis time."""
    keys = [k for k in COLUMNS if k != "start_ms"]
    cols = []
    for k in keys:
        v = df[k]
        if k in ("rank", "step", "seq"):
            cols.append(v.to_numpy(np.int64).tolist())
        elif k == "group_seq":
            cols.append(v.tolist() if v.dtype.kind in "iu" else
                        [None if x != x else int(x) for x in v.tolist()] if v.dtype.kind == "f" else
                        [None if pd.isna(x) else int(x) for x in v.tolist()])
        elif k == "bytes":
            cols.append(v.tolist() if v.dtype.kind in "iu" else
                        whole_floats(v.to_numpy(np.float64)) if v.dtype.kind == "f" else [whole(x) for x in v.tolist()])
        elif k.endswith("_ms"):
            cols.append(rounded_floats(v.to_numpy(np.float64)))
        elif k == "overlapped":
            cols.append(v.tolist())
        else:  # group, label, phase, op, start_basis, backward_end_source: a string or null
            cols.append(_strings(v))
    return [dict(zip(keys, row)) for row in zip(*cols)]


def _strings(v: pd.Series) -> list:
    """A column as str or None (None, NaN, pd.NA): each distinct value converted once (a column holds a
    few dozen distinct labels or ops over ~10⁵ rows at 64 ranks)."""
    codes, uniques = pd.factorize(v, use_na_sentinel=True)
    table = np.array([str(u) for u in uniques] + [None], dtype=object)  # code -1 (missing) → the last: None
    return table[codes].tolist()
