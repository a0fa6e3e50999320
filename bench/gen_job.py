"""Write a large synthetic job (N ranks, up to thousands) from a small real one, with a planted fault.

    python bench/gen_job.py SRC OUT --ranks 1024 [--steps 40] [--straggler R] [--delay-ms MS]
                            [--desync R] [--hang R] [--at-step S] [--at-index K] [--seed N]

SRC is a commscope run directory (tests/data/cpurun-hooks-gloo2, tests/data/layout/*) or a folder of
per-rank Kineto traces (tests/data/modded-nanogpt-8xh100); OUT gets the same format with N ranks, and
`OUT/ground_truth.json` beside it says what was planted and where (rank, group, seq, label, step).

How a rank is made: output rank r copies template rank r % T of SRC (T ranks), so every record is a real
one; only times (and the planted fault) change.
- Run directories: the template's steps are repeated (`--steps`, cycling over its steps after the warm-up
  step 0 when it has three or more) on one time axis; `seq` continues per group. Jitter: each rank starts
  each step late by |N(0, σ)| (σ = `--jitter-ms`, clipped to 3σ; steps are 3σ + 1 ms apart, so a rank's
  steps never overlap).
- Kineto traces: the template's profiled steps as they are. Jitter: each rank's host (CPU) timeline is
  warped by a per-step lateness |N(0, σ)| (interpolated between ProfilerStep boundaries, so nesting and
  order hold), and each NCCL kernel starts late by an exponential draw (scale σ/4, at most half its
  length) with its end kept: arrival skew with a common completion, as on real GPUs.
- Straggler (`--straggler R`): rank R stalls `--delay-ms` just before launching the chosen collective
  (`--at-step`, `--at-index`: the K-th collective of that step); everything it does afterwards is late by
  that much. The other ranks wait inside that collective (its end moves by the delay) and run on behind
  it. Run directories: the others' recorded wait in it blocks the delay longer (their exposed
  communication), and every later step of every rank moves by the delay. Kineto: the others' device
  timeline moves; their hosts run ahead asynchronously and do not.
- Desync (`--desync R`): rank R's chosen collective moves twice the bytes of the others'.
- Hang (`--hang R`): rank R never launches the chosen collective and stops there. Run directories: the
  others launch it, their watchdog fires (watchdog.json lists it in flight), every status is "failed"
  and summary.json says "hung". Kineto: rank R's trace ends there (events from that point on dropped, the
  host ranges open there, its ProfilerStep among them, end there).

Speed and memory: each template rank's whole output file is turned once into a `%`-format string whose
slots are the times (and the rank); a rank is then one numpy computation of its slot values and one
`fmt % values` — no Python per event. Ranks are written one at a time, so memory is the templates'
format strings plus one rank's file, whatever N.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

try:  # ISA-L deflate: ~4× the stdlib's at level 1 (commscope already depends on it)
    from isal import igzip as _gz
except ImportError:  # pragma: no cover
    _gz = gzip

ROOT = Path(__file__).resolve().parent.parent
TIME_FIELDS = ("t_ns", "call_ns", "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns")
_SLOT = re.compile(rb'"\\u0001([A-Za-z]+)(\d*)"')  # orjson writes the \x01 of `_tok` escaped
_KINDS = {"rank": 0, "t": 1, "ts": 1, "dur": 2}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


@dataclass
class Faults:
    straggler: int | None = None
    delay_ms: float | None = None  # None: `auto_delay_ms` of the template
    desync: int | None = None
    hang: int | None = None
    at_step: int | None = None  # run dirs: output step; Kineto: profiler step id
    at_index: int | None = None  # the K-th collective launched in that step
    jitter_ms: float | None = None
    seed: int = 0


def _format(doc_bytes: bytes) -> tuple[str, tuple[np.ndarray, np.ndarray]]:
    """A serialized document with `"\\x01<kind><i>"` tokens → a %-format string and its slots: per slot
    the kind's code (`_KINDS`) and the number after it (-1 where none)."""
    slots: list[tuple[str, int]] = []

    def sub(m: re.Match) -> bytes:
        kind = m.group(1).decode()
        slots.append((kind, int(m.group(2) or -1)))
        return b"%.3f" if kind in ("ts", "dur") else b"%d"

    text = _SLOT.sub(sub, doc_bytes.replace(b"%", b"%%"))
    kinds = np.asarray([_KINDS[k] for k, _ in slots], dtype=np.int8)
    return text.decode(), (kinds, np.asarray([max(i, 0) for _, i in slots], dtype=np.int64))


def _tok(kind: str, i: int = -1) -> str:
    return f"\x01{kind}{'' if i < 0 else i}"


def _write(path: Path, text: str) -> None:
    data = text.encode()
    if path.suffix == ".gz":
        data = _gz.compress(data, 1)
    path.write_bytes(data)


def auto_delay_ms(launch_skews_ns) -> float:
    """The default stall: 20× the template's median launch skew (whatever the ranks' own disorder,
    the planted lateness stands out by an order of magnitude), at least 150 ms, in whole 10 ms."""
    med = float(np.median(launch_skews_ns)) / 1e6 if len(launch_skews_ns) else 0.0
    return float(max(150.0, np.ceil(20 * med / 10) * 10))


def _pick_ranks(n: int, f: Faults) -> None:
    for name in ("straggler", "desync", "hang"):
        r = getattr(f, name)
        if r is not None and not 0 <= r < n:
            raise SystemExit(f"gen_job: --{name} {r} is outside 0..{n - 1}")


# ---- run directories ---------------------------------------------------------------------------
def _read_jsonl(p: Path) -> list[dict]:
    return [orjson.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


def _first_time(rec: dict) -> int:
    return next(rec[k] for k in ("call_ns", "start_ns", "t_ns") if rec.get(k) is not None)


def _last_time(rec: dict) -> int:
    return max(rec[k] for k in TIME_FIELDS if rec.get(k) is not None)


def gen_rundir(src: Path, out: Path, ranks: int, steps: int, f: Faults) -> dict:
    tdirs = sorted((p for p in src.iterdir() if re.fullmatch(r"rank\d+", p.name)), key=lambda p: int(p.name[4:]))
    recs = [_read_jsonl(d / "events.jsonl") for d in tdirs]
    metas = [orjson.loads((d / "meta.json").read_bytes()) for d in tdirs]
    T = len(tdirs)
    tsteps = sorted({r["step"] for r in recs[0] if r["step"] >= 0})
    cycle = tsteps[1:] if len(tsteps) >= 3 else tsteps  # step 0 is warm-up: slower, not repeated
    by = [{s: [r for r in rs if r["step"] == s] for s in cycle} for rs in recs]
    origin = {s: min(_first_time(r) if r["kind"] != "step" else r["start_ns"] for b in by for r in b[s]) for s in cycle}
    span = {s: max(_last_time(r) for b in by for r in b[s]) - origin[s] for s in cycle}
    jitter_ns = int((f.jitter_ms if f.jitter_ms is not None else 2.0) * 1e6)
    gap = 3 * jitter_ns + 1_000_000
    # per group: collectives per template step and the first seq in it (all template ranks must agree)
    groups = sorted({str(r["group"]) for r in recs[0] if r["kind"] == "collective"})
    count = {s: {g: sum(1 for r in by[0][s] if r["kind"] == "collective" and str(r["group"]) == g) for g in groups}
             for s in cycle}
    first_seq = {s: {g: min((r["seq"] for r in by[0][s] if r["kind"] == "collective" and str(r["group"]) == g),
                            default=0) for g in groups} for s in cycle}
    starts, seq0 = [], []
    t, q = origin[cycle[0]], dict.fromkeys(groups, 0)
    for i in range(steps):
        s = cycle[i % len(cycle)]
        starts.append(t)
        seq0.append(dict(q))
        t += span[s] + gap
        for g in groups:
            q[g] += count[s][g]

    step_of = lambda i: cycle[i % len(cycle)]  # noqa: E731
    _pick_ranks(ranks, f)
    at_step = f.at_step if f.at_step is not None else steps // 2
    if not 0 <= at_step < steps:
        raise SystemExit(f"gen_job: --at-step {at_step} is outside 0..{steps - 1}")
    colls = [[r for r in b[step_of(at_step)] if r["kind"] == "collective"] for b in by]
    colls = [sorted(c, key=lambda r: r["call_ns"]) for c in colls]
    k = f.at_index if f.at_index is not None else len(colls[0]) // 2
    if not 0 <= k < len(colls[0]):
        raise SystemExit(f"gen_job: --at-index {k} is outside 0..{len(colls[0]) - 1}")
    target = [c[k] for c in colls]  # per template rank: the chosen collective's record
    g = str(target[0]["group"])
    tseq = seq0[at_step][g] + target[0]["seq"] - first_seq[step_of(at_step)][g]
    where = {"group": g, "seq": int(tseq), "label": target[0]["label"], "step": at_step, "op": target[0]["op"]}

    def out_time(t_ns: int, tstep: int, i: int) -> int:
        return t_ns - origin[tstep] + starts[i]

    def build(ti: int, variant: str | None) -> tuple[str, np.ndarray, np.ndarray, list]:
        """Template rank ti's events.jsonl as a format string; slot base times and steps; in-flight."""
        lines, base, step_idx, inflight = [], [], [], []
        cut = out_time(_first_time(target[ti]), step_of(at_step), at_step)
        for i in range(steps):
            s = step_of(i)
            for r in by[ti][s]:
                o = dict(r, step=i, rank=_tok("rank"))
                if r["kind"] == "collective":
                    o["seq"] = seq0[i][str(r["group"])] + r["seq"] - first_seq[s][str(r["group"])]
                    if r.get("group_size") == T:  # the template's world group is the job's
                        o["group_size"] = ranks
                first = out_time(_first_time(r) if r["kind"] != "step" else r["start_ns"], s, i)
                if variant == "hang" and (i > at_step or (i == at_step and (first >= cut or r["kind"] == "step"))):
                    continue
                if variant == "hang-peer" and (i > at_step or (i == at_step and (first >= cut or r["kind"] == "step"))):
                    if r is target[ti] and i == at_step:  # launched, never finished: the watchdog's report
                        inflight.append({**{kk: o[kk] for kk in ("label", "phase", "op", "bytes", "dtype", "group",
                                                                  "group_size", "seq")},
                                         "step": i, "call_ns": out_time(r["call_ns"], s, i),
                                         "return_ns": out_time(r["return_ns"], s, i), "wait_ns": None,
                                         "rank": None})
                    continue
                if variant == "desync" and r is target[ti] and i == at_step:
                    o["bytes"] = 2 * int(r["bytes"])
                for kk in TIME_FIELDS:
                    if r.get(kk) is not None:
                        o[kk] = _tok("t", len(base))
                        base.append(out_time(r[kk], s, i))
                        step_idx.append(i)
                lines.append(orjson.dumps(o))
        fmt, slots = _format(b"\n".join(lines) + (b"\n" if lines else b""))
        return fmt, np.asarray(base, dtype=np.int64), np.asarray(step_idx, dtype=np.int64), (slots, inflight)

    rng = np.random.default_rng(f.seed)
    late = np.minimum(np.abs(rng.normal(0.0, jitter_ns or 1, size=(ranks, steps))), 3 * jitter_ns).astype(np.int64)
    if not jitter_ns:
        late[:] = 0
    calls: dict = {}
    for rs in recs:
        for r in rs:
            if r["kind"] == "collective" and r["step"] >= 0:
                calls.setdefault((str(r["group"]), r["seq"]), []).append(r["call_ns"])
    if f.delay_ms is None:
        f.delay_ms = auto_delay_ms([max(v) - min(v) for v in calls.values() if len(v) > 1])
    delay = int(f.delay_ms * 1e6) if f.straggler is not None else 0
    # the straggler is late from its launch of the chosen collective; the others from that collective's end
    strag_cut = [out_time(t["call_ns"], step_of(at_step), at_step) for t in target]
    # and their wait in it: what comes after the wait's start moves, the wait's start does not, so their
    # blocked wait grows by the delay (their exposed communication, as a real straggler's peers show)
    peer_cut = [out_time(t.get("wait_ns") or t["end_ns"], step_of(at_step), at_step) for t in target]
    peer_end = [out_time(t["end_ns"], step_of(at_step), at_step) for t in target]

    out.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    if (src / "config.json").is_file():  # the template's, with this job's size (the page shows both files)
        config = orjson.loads((src / "config.json").read_bytes())
        if "world_size" in config:
            config["world_size"] = ranks
        if isinstance(config.get("args"), dict) and "steps" in config["args"]:
            config["args"] = dict(config["args"], steps=steps)
        (out / "config.json").write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
    tsummary = orjson.loads((src / "summary.json").read_bytes()) if (src / "summary.json").is_file() else {}
    hung = f.hang is not None
    for r in range(ranks):
        ti = r % T
        variant = ("hang" if r == f.hang else "hang-peer") if hung else ("desync" if r == f.desync else None)
        if (ti, variant) not in cache:
            cache[(ti, variant)] = build(ti, variant)
        fmt, base, sidx, (slots, inflight) = cache[(ti, variant)]
        v = base + late[r, sidx]
        if delay:
            if r == f.straggler:
                moved = base >= strag_cut[ti]
            else:  # after the wait's start, and the collective's own end (it may precede the wait)
                moved = (base > peer_cut[ti]) | (base == peer_end[ti])
            v = v + delay * ((sidx > at_step) | ((sidx == at_step) & moved))
        kinds, idx = slots
        vals = np.where(kinds == 0, r, v[idx] if len(v) else 0)
        d = out / f"rank{r}"
        d.mkdir(exist_ok=True)
        _write(d / "events.jsonl", fmt % tuple(vals.tolist()))
        meta = dict(metas[ti], rank=r, local_rank=r % 8, world_size=ranks, hostname=f"node{r // 8}",
                    pid=10_000 + r)
        (d / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
        last = steps - 1 if not hung else at_step - 1
        if hung and r == f.hang:
            st = {"status": "failed", "error": "terminated by signal SIGTERM (the launcher stopped the job)",
                  "last_step": last}
        elif hung:
            fired = int(v.max()) + 600 * 10**9 if len(v) else 0
            rows = [dict(x, rank=r, call_ns=x["call_ns"] + int(late[r, at_step]),
                         return_ns=x["return_ns"] + int(late[r, at_step])) for x in inflight]
            (d / "watchdog.json").write_bytes(orjson.dumps({
                "schema_version": 1, "rank": r, "world_size": ranks, "timeout_s": 600.0, "fired_ns": fired,
                "waited_s": 600.0, "last_step": last, "waiting_on": rows[0] if rows else None,
                "inflight": rows, "stacks": {}}))
            st = {"status": "failed", "error": "hang watchdog: collective did not finish within 600 s",
                  "last_step": last}
        else:
            st = {"status": "completed", "error": None, "last_step": last}
        (d / "status.json").write_bytes(orjson.dumps(st))
    n_done = at_step if hung else steps
    losses = [float(r["loss"]) for i in range(n_done) for r in by[0][step_of(i)] if r["kind"] == "step"]
    summary = dict(tsummary, schema_version=1, world_size=ranks, steps=steps,
                   status="hung" if hung else "completed", losses=losses,
                   # rank 0's steps: the straggler's stall lengthens the chosen step on every rank
                   step_times_ms=[(span[step_of(i)] + gap + (delay if i == at_step else 0)) / 1e6
                                  for i in range(n_done)],
                   ranks={str(r): "failed" if hung else "completed" for r in range(ranks)},
                   exit_code=1 if hung else 0,
                   message=f"synthetic {ranks}-rank job from {src.name} (bench/gen_job.py)")
    (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return _truth(src, "run", ranks, steps, f, where, jitter_ns / 1e6)


# ---- Kineto traces -----------------------------------------------------------------------------
@dataclass
class _KTemplate:
    doc: dict
    base: int  # baseTimeNanoseconds
    start: np.ndarray  # per event: start ns (relative to the template file's clock); -1: no ts
    end: np.ndarray  # per event: end ns (start where no dur)
    gpu: np.ndarray  # per event: on the device timeline
    nccl: np.ndarray  # per event: an NCCL kernel
    step_knots: np.ndarray  # CPU ProfilerStep starts
    step_ids: list


def _ns(x) -> int:
    return int(round(float(x) * 1000.0))


def _load_template(path: Path) -> _KTemplate:
    raw = path.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    ev = doc["traceEvents"]
    start = np.asarray([_ns(e["ts"]) if "ts" in e else -1 for e in ev], dtype=np.int64)
    dur = np.asarray([_ns(e["dur"]) if "dur" in e else 0 for e in ev], dtype=np.int64)
    gpu = np.asarray([e.get("cat") in GPU_CATS or (e.get("ph") == "f" and e.get("cat") == "ac2g") for e in ev])
    nccl = np.asarray([e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl") for e in ev])
    steps = sorted((_ns(e["ts"]), int(e["name"].split("#")[1])) for e in ev
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))
    return _KTemplate(doc, int(doc.get("baseTimeNanoseconds", 0)), start, start + dur, gpu, nccl,
                      np.asarray([s[0] for s in steps], dtype=np.int64), [s[1] for s in steps])


def gen_kineto(src: Path, out: Path, ranks: int, f: Faults) -> dict:
    from commscope.load.files import list_trace_files
    from commscope.load.kineto import parse_file

    files = [Path(p) for p in list_trace_files(str(src))]
    tpl = [_load_template(p) for p in files]
    tpl_rank = [int(t.doc["distributedInfo"]["rank"]) for t in tpl]
    order = np.argsort(tpl_rank)
    files, tpl = [files[i] for i in order], [tpl[i] for i in order]
    T = len(tpl)
    _pick_ranks(ranks, f)
    # The chosen collective, named as commscope's Kineto parser names it (group, seq, label): its launch
    # (record_param_comms) and kernel in each template.
    colls = [parse_file(str(p))["collectives"] for p in files]
    at_step = f.at_step if f.at_step is not None else tpl[0].step_ids[-1]
    c0 = colls[0]
    c0 = c0[(c0["step"] == at_step) & c0["call_ns"].notna() & c0["start_ns"].notna()].sort_values("call_ns")
    if not len(c0):
        raise SystemExit(f"gen_job: no collective launched and run in profiler step {at_step} of {files[0]}")
    k = f.at_index if f.at_index is not None else len(c0) // 2
    if not 0 <= k < len(c0):
        raise SystemExit(f"gen_job: --at-index {k} is outside 0..{len(c0) - 1}")
    row = c0.iloc[k]
    group, seq = str(row["group"]), int(row["seq"])
    where = {"group": group, "seq": seq, "label": row["label"], "step": at_step, "op": row["op"]}
    marks = []  # per template: (launch event index, kernel event index)
    for t, c in zip(tpl, colls):
        hit = c[(c["group"].astype(str) == group) & (c["seq"] == seq)]
        if not len(hit) or hit["call_ns"].isna().any() or hit["start_ns"].isna().any():
            raise SystemExit(f"gen_job: collective group {group} seq {seq} is not launched and run on every template rank")
        call, kstart = int(hit["call_ns"].iloc[0]) - t.base, int(hit["start_ns"].iloc[0]) - t.base
        ev = t.doc["traceEvents"]
        li = next(i for i in np.flatnonzero(t.start == call) if ev[i].get("name") == "record_param_comms")
        ki = next(i for i in np.flatnonzero((t.start == kstart) & t.nccl))
        marks.append((int(li), int(ki)))

    jitter_ns = int((f.jitter_ms if f.jitter_ms is not None else 0.2) * 1e6)
    if f.delay_ms is None:
        spread = [g["call_ns"].max() - g["call_ns"].min()
                  for _, g in _concat(colls).dropna(subset=["call_ns"]).groupby(["group", "seq"]) if len(g) > 1]
        f.delay_ms = auto_delay_ms(np.asarray(spread, dtype=np.float64))
    delay = int(f.delay_ms * 1e6) if f.straggler is not None else 0
    world = list(range(ranks))
    ranks_str = str(world)

    def build(ti: int, variant: str | None) -> tuple[str, list]:
        t = tpl[ti]
        li, ki = marks[ti]
        doc = dict(t.doc)
        di = dict(doc["distributedInfo"], rank=_tok("rank"), world_size=ranks)
        di["pg_config"] = [dict(p, ranks=world, pg_size=ranks) if p.get("pg_size") == t.doc["distributedInfo"]["world_size"]
                           else p for p in di.get("pg_config") or []]
        doc["distributedInfo"] = di
        keep = np.ones(len(t.start), dtype=bool)
        if variant == "hang":  # stops before launching it: nothing from then on, on host or device
            cut_cpu, cut_gpu = t.start[li], t.start[ki]
            keep = np.where(t.gpu, t.start < cut_gpu, t.start < cut_cpu) | (t.start < 0)
        events = []
        for i, e in enumerate(t.doc["traceEvents"]):
            if not keep[i]:
                continue
            e = dict(e)
            if "ts" in e:
                e["ts"] = _tok("ts", i)
            if "dur" in e:
                e["dur"] = _tok("dur", i)
            a = e.get("args")
            if e.get("name") == "record_param_comms" and isinstance(a, dict):
                a = dict(a, Rank=_tok("rank"))
                if a.get("Group size") == t.doc["distributedInfo"]["world_size"]:
                    a["Group size"] = ranks
                    a["Process Group Ranks"] = ranks_str
                if variant == "desync" and i == li:
                    a["In msg nelems"] = 2 * int(a.get("In msg nelems", 0))
                    a["Out msg nelems"] = 2 * int(a.get("Out msg nelems", 0))
                e["args"] = a
            events.append(e)
        doc["traceEvents"] = events
        # HTA finds a file's rank with the regex `"rank":\s+(\d+)`: write that key as json.dumps would
        text = orjson.dumps(doc).replace(b'"rank":"\\u0001rank"', b'"rank": "\\u0001rank"', 1)
        return _format(text)

    rng = np.random.default_rng(f.seed)
    out.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    for r in range(ranks):
        ti = r % T
        t = tpl[ti]
        li, ki = marks[ti]
        variant = "hang" if r == f.hang else "desync" if r == f.desync else None
        if (ti, variant) not in cache:
            cache[(ti, variant)] = build(ti, variant)
        fmt, slots = cache[(ti, variant)]
        # host: a per-step lateness, interpolated between step starts (a continuous, monotone warp)
        knots = t.step_knots.tolist() or [0]
        late = np.minimum(np.abs(rng.normal(0.0, jitter_ns or 1, len(knots))), 3 * jitter_ns) if jitter_ns else \
            np.zeros(len(knots))
        kx, ky = list(knots), list(late)
        gx, gy = [t.start[ki]], [0.0]
        if delay and r == f.straggler:  # a stall just before its launch; its device follows
            kx, ky = _add_step(kx, ky, t.start[li], delay)
            gx, gy = [t.start[ki] - 1000, t.start[ki]], [0.0, float(delay)]
        elif delay:  # the others wait inside the collective; their device runs on behind it
            gx, gy = [t.start[ki], t.end[ki]], [0.0, float(delay)]
        cpu_shift = np.interp(np.concatenate([t.start, t.end]), kx, ky)
        gpu_shift = np.interp(np.concatenate([t.start, t.end]), gx, gy)
        n = len(t.start)
        gpu2 = np.concatenate([t.gpu, t.gpu])
        shift = np.where(gpu2, gpu_shift, cpu_shift)
        s = t.start + shift[:n]
        e = t.end + shift[n:]
        if variant == "hang":  # the trace stops at the cut: a host range open there (its ProfilerStep) ends there
            cut = t.start[li] + shift[li]
            e = np.where(~t.gpu & (s < cut) & (e > cut), cut, e)
        # arrival jitter: NCCL kernels start late, end as before
        u = np.minimum(rng.exponential(jitter_ns / 4 or 1, n), (e - s) / 2) if jitter_ns else np.zeros(n)
        s = np.where(t.nccl, s + u, s)
        ts_us, dur_us = s / 1000.0, (e - s) / 1000.0
        kinds, idx = slots
        vals = np.where(kinds == 0, r, np.where(kinds == 1, ts_us[idx], dur_us[idx]))
        _write(out / f"rank{r}.json.gz", fmt % tuple(vals.tolist()))
    return _truth(src, "kineto", ranks, None, f, where, jitter_ns / 1e6)


def _concat(frames: list):
    import pandas as pd

    return pd.concat([c[["group", "seq", "call_ns"]].astype({"call_ns": "float64"}) for c in frames], ignore_index=True)


def _add_step(kx: list, ky: list, at: int, delay: int) -> tuple[list, list]:
    """The warp (kx → ky) plus a step of `delay` ns just before `at` (a 1 µs ramp: monotone)."""
    base = np.interp([at - 1000, at], kx, ky)
    pts = sorted([(x, y + (delay if x >= at else 0)) for x, y in zip(kx, ky) if x < at - 1000 or x >= at]
                 + [(at - 1000, float(base[0])), (at, float(base[1]) + delay)])
    if pts[-1][0] == at:  # hold the delay after the last knot
        pts.append((at + 1, pts[-1][1]))
    return [p[0] for p in pts], [p[1] for p in pts]


def _truth(src: Path, fmt: str, ranks: int, steps: int | None, f: Faults, where: dict, jitter_ms: float) -> dict:
    truth = {"source": str(src), "format": fmt, "ranks": ranks, "steps": steps, "seed": f.seed,
             "jitter_ms": jitter_ms, "straggler": None, "desync": None, "hang": None}
    if f.straggler is not None:
        truth["straggler"] = {"rank": f.straggler, "delay_ms": f.delay_ms, **where}
    if f.desync is not None:
        truth["desync"] = {"rank": f.desync, **where}
    if f.hang is not None:
        truth["hang"] = {"rank": f.hang, **where}
    return truth


def generate(src: str | os.PathLike, out: str | os.PathLike, ranks: int, steps: int = 40, **faults) -> dict:
    """Write an N-rank job from `src` into `out/job` (a run directory or a Kineto folder, as `src` is) and
    its ground truth into `out/ground_truth.json` (beside the job: inside a Kineto folder it would be read
    as a trace); returns the ground truth. `faults`: the fields of `Faults`."""
    src, root = Path(src), Path(out)
    out = root / "job"
    f = Faults(**faults)
    if ranks < 1:
        raise SystemExit("gen_job: --ranks must be at least 1")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"gen_job: {out} exists and is not empty")
    if (src / "summary.json").is_file() or (src / "rank0" / "events.jsonl").is_file():
        truth = gen_rundir(src, out, ranks, steps, f)
    else:
        truth = gen_kineto(src, out, ranks, f)
    truth["job"] = str(out)
    (root / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="the template: a commscope run directory or a folder of per-rank Kineto traces "
                    "(the output's format is the template's)")
    ap.add_argument("out", help="the folder to write the N-rank job and its ground_truth.json into")
    ap.add_argument("--ranks", type=int, required=True, help="ranks to write (N)")
    ap.add_argument("--steps", type=int, default=40, help="run directories: steps to write (Kineto traces keep "
                    "the template's profiled steps)")
    ap.add_argument("--straggler", type=int, metavar="R", help="plant a straggler: rank R stalls before the chosen "
                    "collective (--delay-ms)")
    ap.add_argument("--delay-ms", type=float, help="the straggler's stall (default: 20× the template's "
                    "median launch skew, at least 150 ms)")
    ap.add_argument("--desync", type=int, metavar="R", help="plant a desync: rank R's chosen collective moves "
                    "twice the bytes of the others'")
    ap.add_argument("--hang", type=int, metavar="R", help="plant a hang: rank R never launches the chosen "
                    "collective and stops there")
    ap.add_argument("--at-step", type=int, metavar="S", help="the step of the chosen collective (default: the "
                    "middle step for run directories, the last profiled step for Kineto traces)")
    ap.add_argument("--at-index", type=int, metavar="K", help="the chosen collective is the K-th launched in that "
                    "step (default: the middle one)")
    ap.add_argument("--jitter-ms", type=float, help="σ of each rank's per-step lateness |N(0, σ)| (default: 2 ms "
                    "for run directories, 0.2 ms for Kineto traces; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="random seed of the jitter")
    a = ap.parse_args(argv)
    truth = generate(a.src, a.out, a.ranks, a.steps, straggler=a.straggler, delay_ms=a.delay_ms,
                     desync=a.desync, hang=a.hang, at_step=a.at_step, at_index=a.at_index,
                     jitter_ms=a.jitter_ms, seed=a.seed)
    print(json.dumps(truth))
    return truth


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
