"""`diagnose`: one cross-rank verdict for a run — ok, crash, hang, desync or straggler — with who, where
and the timestamps that show it (docs/faults.md).

Frames in, a `Diagnosis` out: the loaded Trace (finished collectives, steps, each rank's status.json) and
its fault evidence (`Trace.faults`, read by commscope.load.evidence): the in-flight collectives of
`rank{R}/watchdog.json` (the hang watchdog fired) and `rank{R}/inflight.json` (written by a rank that ended
abnormally without its watchdog firing, e.g. torn down by the launcher), and the NCCL Flight Recorder's
collectives as a second, independent source, analyzed on their own (their sequence numbers count every NCCL
collective, not the recorder's).

Rules, checked in this order (the first that holds is the verdict):
1. crash: a rank left no status.json (killed: os._exit, SIGKILL, abort) while others did, or a rank failed
   with its own error rather than as a consequence of a peer (teardown, closed connection, timeout).
2. desync: some (group, seq) was launched by several ranks with different op, bytes or dtype; the
   culprits are the ranks that differ from the majority.
3. hang: the first (group, seq) that some members launched and others did not; the culprits are the ranks
   that never launched it (found by *absence*).
4. straggler: a finished collective whose last launch (`call_ns`) trailed the first by more than the
   threshold and by ten times the run's median launch skew; the culprit launched late (found by *timing*).
Otherwise ok.

Invariants: reads no file; never trusts a number it cannot tie to a rank's record; the injected faults listed
in config.json are shown for reference but never used to reach the verdict.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze import skew
from commscope.analyze.launches import launch_table
from commscope.errors import UserError
from commscope.load.frames import FaultEvidence, Trace
from commscope.rundir.schema import EVENTS, STATUS, SUMMARY

VERDICTS = ("ok", "crash", "desync", "hang", "straggler", "failed", "incomplete")
STRAGGLER_MS = 100.0
# Errors a rank reports when it was a victim, not the cause: a peer died, the launcher stopped it, the
# backend or our watchdog timed out waiting.
_CONSEQUENCE = re.compile(r"Terminated|terminated by signal|hang watchdog|Connection|Broken pipe|timed out|"
                          r"DistBackendError|DistNetworkError|ProcessGroup|peer|KeyboardInterrupt|gloo|NCCL|Socket|"
                          r"Read error|Write error|recv|send", re.I)


@dataclass
class Diagnosis:
    verdict: str
    culprit_ranks: list[int] = field(default_factory=list)
    label: str | None = None
    step: int | None = None
    sequence: int | None = None
    group: str | None = None
    summary: str = ""
    evidence: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    second_opinion: dict | None = None  # the Flight Recorder's own verdict, when dumps exist

    def to_json(self) -> dict:
        return asdict(self)


def _iso_ns(ns: Any) -> int | None:
    return None if ns is None or pd.isna(ns) else int(ns)


# ---- rules ------------------------------------------------------------------------------------
def _statuses(trace: Trace) -> dict[int, dict]:
    return {int(r): s for r, s in trace.config.get("status", {}).items()}


def _last_step(trace: Trace, rank: int) -> int:
    s = trace.steps
    s = s[s["rank"] == rank] if len(s) else s
    return int(s["step"].max()) if len(s) else -1


def check_crash(trace: Trace, faults: FaultEvidence) -> Diagnosis | None:
    if trace.source != "run":
        return None
    statuses = _statuses(trace)
    ranks = sorted(set(range(trace.world_size)))
    # A rank whose watchdog fired reported already; if it then has no status it was killed in teardown.
    watchdog = set(faults.ranks("watchdog"))
    silent = [r for r in ranks if r not in statuses and r not in watchdog]
    if silent and len(silent) == len(ranks) and not trace.config.get("summary"):
        return Diagnosis("incomplete", summary=(
            f"no rank has finished or reported (no {STATUS}, no {SUMMARY}): the run is still going, "
            "or the whole job was killed at once"), sources=[STATUS])
    own = [r for r, s in statuses.items()
           if s.get("status") not in ("completed", None) and s.get("error")
           and not _CONSEQUENCE.search(str(s.get("error")))]
    culprits = silent or sorted(own)
    if not culprits:
        return None
    evidence = []
    for r in culprits:
        last = _last_step(trace, r)
        ev = {"rank": r, "last_finished_step": last,
              "status": statuses.get(r, {}).get("status", f"none: no {STATUS}"),
              "error": statuses.get(r, {}).get("error")}
        s = trace.steps[(trace.steps["rank"] == r)] if len(trace.steps) else trace.steps
        if len(s):
            ev["last_step_end_ns"] = _iso_ns(s["end_ns"].max())
        evidence.append(ev)
    for r, s in sorted(statuses.items()):
        if r not in culprits and s.get("status") != "completed":
            evidence.append({"rank": r, "status": s.get("status"), "error": s.get("error"),
                             "last_finished_step": _last_step(trace, r), "role": "affected"})
    how = f"left no {STATUS} (ended abruptly: killed, aborted or os._exit)" if silent else \
        f"failed with its own error: {statuses[culprits[0]].get('error')}"
    last = evidence[0]["last_finished_step"]
    return Diagnosis("crash", culprits, step=last, evidence=evidence, sources=[STATUS, EVENTS],
                     summary=f"crash: rank(s) {_fmt(culprits)} {how}; last finished step {last}.")


def _signature(row: pd.Series) -> tuple:
    # all_to_all with split sizes legitimately sends different byte counts per rank (e.g. the alpha-lpt
    # optimizer partition's unequal owner shares), so only its op and dtype must agree
    uneven = row["op"] == "all_to_all" or pd.isna(row["bytes"])
    return (row["op"], None if uneven else float(row["bytes"]), row["dtype"])


def check_desync(lt: pd.DataFrame, source: str) -> Diagnosis | None:
    if not len(lt):
        return None
    for (group, seq), g in lt.sort_values(["seq", "rank"]).groupby(["group", "seq"], sort=False):
        if len(g) < 2:
            continue
        sigs = g.apply(_signature, axis=1)
        counts = sigs.value_counts()
        if len(counts) < 2:
            continue
        majority = counts.index[0] if counts.iloc[0] > counts.iloc[1] else sigs.iloc[0]
        culprits = sorted(int(r) for r, s in zip(g["rank"], sigs) if s != majority)
        good = g[sigs == majority].iloc[0]
        evidence = [{"rank": int(r["rank"]), "op": r["op"], "bytes": r["bytes"], "dtype": r["dtype"],
                     "label": r["label"], "call_ns": _iso_ns(r["call_ns"]), "finished": bool(r["finished"]),
                     "source": r["source"]} for _, r in g.iterrows()]
        step = None if pd.isna(good["step"]) else int(good["step"])
        bad = g[g["rank"].isin(culprits)].iloc[0]
        return Diagnosis(
            "desync", culprits, label=good["label"], step=step, sequence=int(seq), group=str(group),
            evidence=evidence, sources=[source],
            summary=(f"desync: at group {group} seq {seq} ('{good['label']}', step {step}) rank(s) {_fmt(culprits)} "
                     f"launched {bad['op']} of {_bytes(bad['bytes'])} while the others launched {good['op']} of "
                     f"{_bytes(good['bytes'])}."))
    return None


def check_hang(lt: pd.DataFrame, trace: Trace, faults: FaultEvidence, source: str) -> Diagnosis | None:
    # A profiler window (Kineto traces) starts and stops at different collectives on different ranks, so
    # absence there proves nothing: only whole-run records (run dirs, Flight Recorder) are checked.
    if not len(lt) or trace.source not in ("run", "flight_recorder"):
        return None
    best = None
    for group, g in lt.groupby("group"):
        members = set(g["rank"].astype(int))
        sizes = pd.to_numeric(g["group_size"], errors="coerce").dropna()
        if len(sizes) and int(sizes.max()) == trace.world_size:
            # the whole world: a rank that left no record at all (killed early) is still a member
            members |= set(range(trace.world_size))
        launched = g.groupby("seq")["rank"].agg(lambda r: set(int(x) for x in r))
        for seq, have in launched.sort_index().items():
            missing = sorted(members - have)
            if missing:
                if best is None or (seq, str(group)) < (best[0], best[1]):
                    best = (int(seq), str(group), have, missing)
                break
    if best is None:
        return None
    seq, group, have, missing = best
    rows = lt[(lt["group"] == group) & (lt["seq"] == seq)]
    first = rows.sort_values("rank").iloc[0]
    step = None if pd.isna(first["step"]) else int(first["step"])
    wd = faults.reports[faults.reports["kind"] == "watchdog"]
    fired_ns = dict(zip(wd["rank"].astype(int), wd["fired_ns"]))
    fired = faults.ranks("watchdog")
    evidence = []
    for _, r in rows.sort_values("rank").iterrows():
        evidence.append({"rank": int(r["rank"]), "launched": True, "finished": bool(r["finished"]),
                         "call_ns": _iso_ns(r["call_ns"]), "wait_ns": _iso_ns(r["wait_ns"]),
                         "watchdog_fired_ns": fired_ns.get(int(r["rank"])), "source": r["source"]})
    for m in missing:
        mine = lt[(lt["rank"] == m) & (lt["group"] == group)].sort_values("seq")
        last = mine.iloc[-1] if len(mine) else None
        evidence.append({"rank": m, "launched": False,
                         "last_launched_seq": None if last is None else int(last["seq"]),
                         "last_launched_label": None if last is None else last["label"],
                         "last_launch_ns": None if last is None else _iso_ns(last["call_ns"]),
                         "status": _statuses(trace).get(m, {}).get("status"),
                         "error": _statuses(trace).get(m, {}).get("error")})
    wd_note = f"; the hang watchdog fired on rank(s) {_fmt(fired)}" if fired else ""
    return Diagnosis(
        "hang", missing, label=first["label"], step=step, sequence=seq, group=group, evidence=evidence,
        sources=[source],
        summary=(f"hang: rank(s) {_fmt(sorted(have))} launched {first['op']} '{first['label']}' (group {group}, "
                 f"seq {seq}, step {step}) but rank(s) {_fmt(missing)} never did (found by absence){wd_note}."))


def check_straggler(trace: Trace, threshold_ms: float) -> Diagnosis | None:
    c = trace.collectives
    # Outside steps (setup, clock alignment) ranks start at different times by design.
    c = c[pd.to_numeric(c["step"], errors="coerce").fillna(-1) >= 0] if len(c) else c
    if not len(c) or c["rank"].nunique() < 2:
        return None
    sk = skew.arrival_skew(c, at="launch")  # a late *launch* is what we look for
    if not len(sk):
        return None
    lat = sk["skew_ns"].astype(float)
    med = float(np.median(lat))
    err = max((m.get("clock", {}).get("error_ns", 0) or 0 for m in trace.config.get("meta", {}).values()), default=0)
    bar = max(threshold_ms * 1e6, 10 * med, 3 * float(err))
    late = sk[lat > bar].sort_values("skew_ns", ascending=False)
    if not len(late):
        return None
    culprit = int(late.iloc[0]["last_rank"])
    # A late launch delays every later launch of that rank in the step (the others do not wait before
    # launching async collectives): the first late one is where the delay happened.
    mine = late[late["last_rank"] == culprit].sort_values("first_ns", kind="stable")
    worst = mine.iloc[0]
    evidence = []
    for _, row in mine.head(5).iterrows():
        rows = c[(c["group"] == row["group"]) & (c["seq"] == row["seq"])]
        others = rows[rows["rank"] != row["last_rank"]]["call_ns"].astype(float)
        evidence.append({"rank": int(row["last_rank"]), "label": row["label"], "step": int(row["step"]),
                         "group": str(row["group"]), "sequence": int(row["seq"]),
                         "late_launch_ns": _iso_ns(row["last_ns"]), "first_launch_ns": _iso_ns(row["first_ns"]),
                         "others_median_launch_ns": None if not len(others) else int(np.median(others)),
                         "launch_late_ms": float(row["skew_ns"]) / 1e6})
    return Diagnosis(
        "straggler", [culprit], label=worst["label"], step=int(worst["step"]), sequence=int(worst["seq"]),
        group=str(worst["group"]), evidence=evidence, sources=[EVENTS if trace.source == "run" else "trace"],
        summary=(f"straggler: rank {culprit} launched '{worst['label']}' (step {int(worst['step'])}, seq "
                 f"{int(worst['seq'])}) {float(worst['skew_ns']) / 1e6:.0f} ms after the first rank (found by "
                 f"timing, not by absence: every rank launched it; threshold {bar / 1e6:.0f} ms, median launch "
                 f"skew {med / 1e6:.1f} ms)."))


def check_unexplained(trace: Trace) -> Diagnosis | None:
    """Ranks failed but no rule above found why (e.g. --trace off: no launch records). A backend timeout
    still says "hang", without culprits."""
    bad = {r: s for r, s in _statuses(trace).items() if s.get("status") not in ("completed", None)}
    if not bad:
        return None
    timed = sorted(r for r, s in bad.items() if re.search(r"timed out|hang watchdog", str(s.get("error")), re.I))
    verdict = "hang" if timed else "failed"
    first = bad[min(bad)]
    return Diagnosis(verdict, [], evidence=[{"rank": r, "status": s.get("status"), "error": s.get("error"),
                                             "last_finished_step": _last_step(trace, r)} for r, s in sorted(bad.items())],
                     sources=[STATUS],
                     summary=(f"{verdict}: rank(s) {_fmt(sorted(bad))} failed (rank {min(bad)}: {first.get('error')}) "
                              "but the records do not show which rank caused it (no launch records of the fault: "
                              "record with --trace light for a culprit)."))


def _fmt(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _bytes(b: Any) -> str:
    return "? bytes" if b is None or pd.isna(b) else f"{int(b)} bytes"


# ---- entry points -----------------------------------------------------------------------------
def diagnose(trace: Trace, faults: FaultEvidence | None = None, *, straggler_ms: float = STRAGGLER_MS
             ) -> Diagnosis:
    """The verdict on `trace` and its fault evidence (None: the frames alone, no reports or dumps)."""
    faults = faults or FaultEvidence()
    lt = launch_table(trace.collectives, faults.inflight)
    src = f"{EVENTS} + watchdog/inflight reports" if trace.source == "run" else "trace"
    d = (check_crash(trace, faults) or check_desync(lt, src) or check_hang(lt, trace, faults, src)
         or check_straggler(trace, straggler_ms) or check_unexplained(trace))
    if d is None:
        d = Diagnosis("ok", summary=f"ok: no crash, hang, desync or straggler (> {straggler_ms:g} ms late launch) "
                      f"found in {trace.world_size} rank(s).", sources=[src])
    if faults.ranks("flight_recorder"):
        frl = faults.flight_recorder
        empty = Trace(source="flight_recorder", path=trace.path, world_size=trace.world_size, backend=None,
                      device=None)
        second = check_desync(frl, "flight_recorder") or check_hang(frl, empty, FaultEvidence(), "flight_recorder")
        d.second_opinion = second.to_json() if second else {"verdict": "ok", "source": "flight_recorder"}
        if d.verdict == "ok" and second is not None:  # e.g. --trace off: the Flight Recorder is all there is
            d = second
    args = (trace.config.get("config") or {}).get("args") or {}
    d.injected = list(args.get("inject") or [])
    return d


def diagnose_trace(trace: Trace, *, straggler_ms: float = STRAGGLER_MS, tolerate_bad_files: bool = False
                   ) -> Diagnosis:
    """`diagnose` with the fault evidence the loader found in the run's directory. `tolerate_bad_files`:
    evidence that could not be read is left out (the report's use: the rest of a report is still worth
    having) instead of raising its UserError (the doctor command's use)."""
    faults = trace.faults if trace.source == "run" else FaultEvidence()
    if faults.error is not None:
        if not tolerate_bad_files:
            raise UserError(faults.error)
        faults = FaultEvidence()
    return diagnose(trace, faults, straggler_ms=straggler_ms)


def diagnose_path(path: str, *, straggler_ms: float = STRAGGLER_MS) -> Diagnosis:
    from commscope.load import load_path

    return diagnose_trace(load_path(path), straggler_ms=straggler_ms)
