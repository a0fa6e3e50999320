"""`diagnose`: one cross-rank verdict for a run — ok, crash, hang, desync, straggler, interrupted or
insufficient — with who, where and the evidence that shows it (docs/faults.md).

Frames in, a `Diagnosis` out: the loaded Trace (finished collectives, steps, each rank's status.json, the
run's summary.json) and its fault evidence (`Trace.faults`, read by commscope.load.evidence): the in-flight
collectives of `rank{R}/watchdog.json` (the hang watchdog fired) and `rank{R}/inflight.json` (written by a
rank that ended abnormally without its watchdog firing, e.g. torn down by the launcher), and the NCCL Flight
Recorder's collectives as a second, independent source, analyzed on their own (their sequence numbers
count every NCCL collective, not the recorder's).

Rules, checked in this order (the first that holds is the verdict):
1. interrupted: the run's summary.json (or a rank's status, or a KeyboardInterrupt that ended a rank) says
   the user stopped it; what the ranks did while being stopped is a consequence, not a fault.
   insufficient, right after it: the ranks refused the options `commscope run` gave them (summary.json
   `usage_error`), or the run directory stopped taking writes (a status, summary.json or the
   ranks' output in a launcher log says so): records end where the disk filled, and a status that did not
   fit looks like a crash.
2. desync: some (group, seq) was launched by several ranks with different op, bytes or dtype, or in a run
   directory under different labels (the caller's, at that call); the culprits are the ranks that differ
   from the majority. Checked before crash: a backend may abort a rank
   on the mismatch (gloo does), and the mismatch, not the abort, is the fault. Not within the loader's
   `mixed_groups` (gloo traces whose stand-in group numbers several process groups of different members
   together), which the straggler rule leaves out too.
3. crash: a rank whose folder holds records left no status.json (killed: os._exit, SIGKILL, abort) while
   others did, or a rank failed with its own error rather than as a consequence of a peer (teardown, closed
   connection, timeout). Not when every rank that failed gave up waiting (a timeout): the silent ranks were
   alive then, and the launcher killed them afterwards; that is rule 4's hang. Not for a rank without a
   folder: none of its records were read, which says nothing of how it ended (rule 5).
4. hang: the first (group, seq) that some members launched and others did not; the culprits are the ranks
   that never launched it (found by *absence*). A crash instead where those ranks were ended by a signal
   while no rank had timed out (killed from outside the job: the launchers signal ranks only after a
   failure).
   Insufficient instead when such a rank's records are incomplete (`incomplete_ranks`: the loader ignored
   some, or its status says "completed" while its log is torn or ends early): its launch may be among them.
5. insufficient: ranks of the job are missing from the data (a partial trace set, or a run directory
   without a rank's folder: the summary names them and what summary.json says of them), so who came last
   to a collective is unknown. A rank without a folder takes no part in rule 4 either: absence in records
   that were never read is no evidence.
6. crash: summary.json's `ended_first`, the rank the launcher saw end first, was ended by a signal while
   no rank timed out (killed from outside the job between two collectives).
   A job without summary.json whose every rank a signal ended (status.json `ended_ns`,
   analyze.doctor_stopped): a hang inside a collective every member launched where a rank had waited in
   it for many steps, a hang outside communication where no rank had recorded anything that long, a crash
   of the ranks ended first, interrupted where the ends came together, or insufficient. (A hang by absence
   in such a job is read the same way in rule 4; after rule 1's Ctrl-C, a hang by absence in which a rank
   had waited past the stall bar stands, and without one, every rank silent that long is the hang outside
   communication.)
   Else hang or insufficient: ranks failed and no rule above says why (a backend timeout is a hang without
   culprits; anything else lacks the evidence).
7. straggler (analyze.doctor_straggler): by analyze.waiting (who made whom wait, on device-side
   arrivals): in a step that is not noise (warm-up, profiler window or export), a rank made the others wait at least the bar — a share of
   the run's median step time (10 % when arrivals are device-timed, 100 % when they are host launch times
   of CPU ranks, whose speed varies with OS scheduling), or --straggler-ms. On host-timed arrivals the
   default bar is never below 50 ms (doctor_straggler.STRAGGLER_FLOOR_MS_HOST), above what OS scheduling
   alone costs a rank on a busy machine. The culprits are the ranks
   that caused at least half as much of that waiting as the worst; the verdict says in how many of the
   judged steps it happened, the share of the step, and a confidence.
Beside a desync the straggler rule is asked too: a straggler it finds among other ranks is kept in
`Diagnosis.also` (a second fault the one verdict would hide; a desync the backend let pass leaves steps to
judge), never beside a crash or hang, where waiting on the dead or stuck rank is the fault itself.
A rank's status "exited" (a recording script that ended without closing its Recorder, and without an
unhandled exception) counts as ended without a fault of its own; `run_reports` lists it (analyze.problems).
The loader's problems go with every verdict (`Diagnosis.problems`), as analyze.problems lists them for the
report too.
Otherwise ok (saying what was judged), or insufficient when no step or complete collective was left to judge.
No verdict shows a "last finished step" of a rank that finished none as a number: its evidence holds null
and its text says "none".
A job of one rank is ok (nobody waits for anybody), except when nothing was recorded, or when its world size
is unknown (Kineto traces without distributedInfo or process-group sizes: "taken as 1") and the trace holds
collectives: then it is insufficient, since a job that communicates has peers whose traces are missing.

Invariants: reads no file; never trusts a number it cannot tie to a rank's record; the injected faults listed
in config.json are shown for reference but never used to reach the verdict; the straggler rule reads the
same `waiting.instances` as the report's straggler table.
"""
from __future__ import annotations

import copy
from functools import cache, partial
from typing import Any

import numpy as np
import pandas as pd

from commscope.analyze import waiting
from commscope.analyze.diagnosis import Diagnosis, iso_ns, ranks_text
from commscope.analyze.doctor_cut import check_trace_cut
from commscope.analyze.doctor_outside import (check_interrupted, check_stopped, ended_from_outside, someone_waited,
                                              stuck_before_killed, stuck_when_interrupted)
from commscope.analyze.doctor_status import (finished_text, incomplete_ranks, is_consequence, last_finished_step,
                                             launcher_says, launcher_status, no_folder_ranks, rank_statuses,
                                             status_row, timed_out, unrecorded_ranks)
from commscope.analyze.doctor_straggler import check_straggler
from commscope.analyze.launches import launch_table
from commscope.analyze.left_in_flight import last_region, last_region_text
from commscope.analyze.problems import loading_problems, run_reports
from commscope.errors import UserError
from commscope.util.ranges import int_ranges
from commscope.util.text import steps_said
from commscope.load.frames import FaultEvidence, Trace
from commscope.rundir.schema import (ENDED_STATUSES as ENDED, EVENTS, SIGNAL_ENDED, STATUS, STORAGE_ERROR,
                                     SUMMARY)

# ---- rules ------------------------------------------------------------------------------------
def check_crash(trace: Trace, faults: FaultEvidence) -> Diagnosis | None:
    if trace.source != "run":
        return None
    statuses = rank_statuses(trace)
    ranks = sorted(set(range(trace.world_size)))
    # A rank whose watchdog fired reported already; if it then has no status it was killed in teardown.
    watchdog = set(faults.ranks("watchdog"))
    # A rank without a folder left no records at all: its missing status.json is missing with them, no sign
    # that it ended abruptly (check_insufficient names it).
    absent = set(no_folder_ranks(trace))
    present = [r for r in ranks if r not in absent]
    silent = [r for r in present if r not in statuses and r not in watchdog]
    # summary.json (the launcher's, written after every rank ended) says a silent rank completed: its
    # status.json is missing from the copy, no sign that it ended abruptly (the loader lists it as a problem)
    launcher = launcher_status(trace, silent)
    silent = [r for r in silent if launcher[str(r)] != "completed"]
    if silent and len(silent) == len(present) and not trace.config.get("summary"):
        running = trace.config.get("launcher_running")
        if running:  # its launcher runs on this host: in progress, not killed
            return Diagnosis("insufficient", sources=[STATUS], details={"launcher_running": running}, summary=(
                f"insufficient: the run is still going (its `commscope run` launcher, pid {running}, runs on this "
                f"host): no rank has ended yet (no {STATUS}), so how the run ends is unknown; diagnose it once it "
                "ends"))
        return Diagnosis("insufficient", summary=(
            f"insufficient: no rank has finished or reported (no {STATUS}, no {SUMMARY}): the run is still "
            "going, or the whole job was killed at once (a script's ranks that a signal ends leave their status "
            "only when it calls rec.handle_signals(): docs/recording.md)"), sources=[STATUS])
    # A rank the launcher killed after it stayed stopped (SIGSTOP) past the hang timeout hung the job: its
    # status says so (instrumented_model's launcher), whether or not the run recorded any collective.
    stopped = sorted(r for r, s in statuses.items() if "stopped (SIGSTOP)" in str(s.get("error")))
    if stopped:
        return Diagnosis("hang", stopped, step=last_finished_step(trace, stopped[0]), sources=[STATUS],
                         evidence=[{"rank": r, "status": statuses[r].get("status"), "error": statuses[r].get("error"),
                                    "last_finished_step": last_finished_step(trace, r)} for r in stopped],
                         summary=f"hang: rank(s) {ranks_text(stopped)} stopped (SIGSTOP) and never resumed; commscope run "
                                 "killed it after the hang timeout. " + finished_text(last_finished_step(trace, stopped[0]), trace).capitalize())
    failed = {r: s for r, s in statuses.items() if s.get("status") not in (*ENDED, None)}
    own = [r for r, s in failed.items() if s.get("error") and not is_consequence(s.get("error"))]
    if silent and not own and failed and all(timed_out(s.get("error")) for s in failed.values()):
        # The others gave up waiting (a timeout), so the silent ranks were alive then, not launching: a
        # launcher stops every rank once one fails, and a rank stopped in a collective's C++ wait is killed
        # without writing its status. That is a hang (found by absence), not a crash.
        return None
    culprits = silent or sorted(own)
    if not culprits:
        return None
    evidence, where = [], {}
    for r in culprits:
        last = last_finished_step(trace, r)
        ev = {"rank": r, "last_finished_step": last,
              "status": statuses.get(r, {}).get("status", f"none: no {STATUS}"),
              "error": statuses.get(r, {}).get("error")}
        s = trace.steps[(trace.steps["rank"] == r)] if len(trace.steps) else trace.steps
        if len(s):
            ev["last_step_end_ns"] = iso_ns(s["end_ns"].max())
        where[r] = last_region(trace, r) if len(where) < REGIONS_LOOKED_UP else None
        ev.update(_region_evidence(where[r]))
        evidence.append(ev)
    for r, s in sorted(statuses.items()):
        if r not in culprits and s.get("status") not in ENDED:
            evidence.append({"rank": r, "status": s.get("status"), "error": s.get("error"),
                             "last_finished_step": last_finished_step(trace, r), "role": "affected"})
    how = f"left no {STATUS} (ended abruptly: killed, aborted or os._exit)" if silent else \
        f"failed with its own error: {statuses[culprits[0]].get('error')}"
    last = evidence[0]["last_finished_step"]
    where_said = _where_text(where)[2:]  # a sentence of its own after "last finished step N."
    return Diagnosis("crash", culprits, step=last, evidence=evidence, sources=[STATUS, EVENTS],
                     summary=f"crash: rank(s) {ranks_text(culprits)} {how}; {finished_text(last, trace)}"
                             + (f" {where_said[:1].upper()}{where_said[1:]}." if where_said else ""))


# culprits whose last region is looked up (each reads the regions frame once): a hang may name hundreds of
# ranks that never launched, and the summary names one
REGIONS_LOOKED_UP = 16
BLOCKED_PLACES = 2  # places named in a hang's summary where its waiting ranks were blocked (the rest counted)


def _ranks_by(value: dict, ranks: list[int]) -> list[tuple[Any, list[int]]]:
    """`ranks` grouped by their `value` (rank → value; ranks without one left out), the values most ranks
    share first."""
    at: dict[Any, list[int]] = {}
    for r in ranks:
        if value.get(r):
            at.setdefault(value[r], []).append(r)
    return sorted(at.items(), key=lambda kv: (-len(kv[1]), kv[1]))


def _collective_text(op: object, label: object, group: object, seq: object) -> str:
    """How a verdict names one collective: "all_reduce 'scalars' (group 0, seq 59)"."""
    return f"{op} '{label}' (group {group}, seq {seq})"


def _blocked_text(blocked: dict, ranks: list[int]) -> str:
    """"; rank(s) 0-1,3 were blocked at optimizer.py:327 step: handle.wait()" (the watchdogs' main-thread
    stacks, evidence.blocked_at), the places most ranks share first; "" where no report says."""
    places = _ranks_by(blocked, ranks)
    if not places:
        return ""
    said = "; ".join(f"rank(s) {ranks_text(rs)} were blocked at {place}" for place, rs in places[:BLOCKED_PLACES])
    more = len(places) - BLOCKED_PLACES
    return "; " + said + (f" (and {more} more place(s), in the evidence)" if more > 0 else "")


def _waiting_text(waiting: dict, ranks: list[int], group: str, seq: int) -> str:
    """"; their watchdogs found rank(s) 0-1,3 waiting on all_reduce 'scalars' (group 0, seq 59), queued
    behind seq 57" where the waiting ranks were blocked on another collective than the one never launched
    (the run's reports name that one, the verdict the first collective missing), else "". A collective of
    the same group launched after the missing one cannot run before it: it is queued behind it."""
    other = {r: w for r, w in waiting.items() if isinstance(w, tuple) and (w[2], w[3]) != (group, seq)}
    on = _ranks_by(other, ranks)
    if not on:
        return ""
    (what, rs), *more = on
    behind = f", queued behind seq {seq}" if what[2] == group and what[3] > seq else ""
    others = f" (and {len(more)} more collective(s), in the evidence)" if more else ""
    return f"; their watchdogs found rank(s) {ranks_text(rs)} waiting on {_collective_text(*what)}{behind}{others}"


def _region_evidence(where: dict | None) -> dict:
    """The evidence fields of left_in_flight.last_region's answer (none without one). `last_region_ms` is how
    long the rank was in it: up to its end's arrival where that came inside it (the rest of its record is
    the unwinding, as the summary says "… ms into it")."""
    if where is None:
        return {}
    into = where.get("into_ms")
    return {"last_region": where["path"], "last_region_step": where["step"],
            "last_region_ms": round(where["duration_ms"] if into is None else into, 3),
            "last_region_typical_ms": None if where["typical_ms"] is None else round(where["typical_ms"], 3)}


def _where_text(where: dict[int, dict | None]) -> str:
    """"; rank 2 was last in region …" for the first culprit whose records end inside a region, else ""."""
    for rank, w in where.items():
        if w is not None:
            return "; " + last_region_text(rank, w)
    return ""


def _tuple_codes(*cols: np.ndarray) -> np.ndarray:
    """One integer per row for the tuple of its values in `cols`: equal tuples, equal codes, numbered in
    order of first appearance (pd.factorize's; missing values equal each other). Column by column
    on integer codes: factorizing a MultiIndex of the columns hashes every row's tuple of objects, ~6×
    slower on a 1024-rank job's ~10⁶ collectives."""
    code = np.zeros(len(cols[0]) if cols else 0, dtype=np.int64)
    for col in cols:
        c, uniques = pd.factorize(col)
        code = pd.factorize(code * (len(uniques) + 1) + (c + 1))[0]
    return code


def _first_mismatch(lt: pd.DataFrame, by_label: bool) -> tuple[pd.DataFrame, pd.Series] | None:
    """The rows of the first (group, seq), in the order of `lt`, whose members' signatures (op, bytes,
    dtype, and with `by_label` the label) differ, with each row's signature code; None when all agree.
    Vectorized: a 1024-rank job has ~10⁶ rows and one bad key at most."""
    op = lt["op"].astype(str)
    size = pd.to_numeric(lt["bytes"], errors="coerce")
    # all_to_all with split sizes legitimately sends different byte counts per rank (e.g. the alpha-lpt
    # optimizer partition's unequal owner shares), so only its op and dtype must agree; an unknown size
    # agrees with an unknown size
    size = size.where((op != "all_to_all") & size.notna(), -1.0)
    dtype = lt["dtype"].astype(object).where(lt["dtype"].notna(), "").astype(str)
    cols = [op.to_numpy(), size.to_numpy(), dtype.to_numpy()]
    if by_label:
        cols.append(lt["label"].astype(object).where(lt["label"].notna(), "").astype(str).to_numpy())
    sig = _tuple_codes(*cols)
    key = _tuple_codes(lt["group"].astype(str).to_numpy(), lt["seq"].to_numpy())
    kinds = pd.Series(sig).groupby(key).nunique()
    bad = kinds.index[kinds.to_numpy() > 1]
    if not len(bad):
        return None
    rows = key == bad.min()
    return lt[rows], pd.Series(sig[rows], index=lt.index[rows])


def _without_groups(trace: Trace, groups: list[str]) -> Trace:
    """`trace` without the collectives of `groups` (itself where there are none)."""
    c = trace.collectives
    drop = c["group"].astype(str).isin(groups).to_numpy(bool) if groups and len(c) else None
    if drop is None or not drop.any():
        return trace
    out = copy.copy(trace)
    out.collectives = c[~drop].reset_index(drop=True)
    return out


def check_desync(lt: pd.DataFrame, source: str, by_label: bool = False) -> Diagnosis | None:
    """The first (group, seq) whose ranks launched different collectives. `by_label`: a different label
    is a different collective too, where the label is the one the caller passed at that call (a run
    directory's records): two same-sized all_reduces swapped on one rank reduce different tensors
    together, which op, size and dtype alone cannot show."""
    if not len(lt):
        return None
    found = _first_mismatch(lt.sort_values(["seq", "rank"], kind="stable"), by_label)
    if found is not None:
        g, sigs = found
        group, seq = g["group"].iloc[0], g["seq"].iloc[0]
        counts = sigs.value_counts()
        tie = counts.iloc[0] == counts.iloc[1]  # as many on two sides: no majority says which is wrong
        majority = sigs.iloc[0] if tie else counts.index[0]
        others = sorted(int(r) for r, s in zip(g["rank"], sigs) if s != majority)
        good = g[sigs == majority].iloc[0]
        evidence = [{"rank": int(r["rank"]), "op": r["op"], "bytes": r["bytes"], "dtype": r["dtype"],
                     "label": r["label"], "call_ns": iso_ns(r["call_ns"]), "finished": bool(r["finished"]),
                     "source": r["source"]} for _, r in g.iterrows()]
        step = None if pd.isna(good["step"]) else int(good["step"])
        bad = g[g["rank"].isin(others)].iloc[0]
        where = f"desync: at group {group} seq {seq} ('{good['label']}', step {step}) rank(s) "
        relabelled = _launched(good) == _launched(bad)  # the same op and size: only the label tells them apart
        why = ("; the same op and size under another label, so the ranks combine different tensors with nothing "
               "to stop them" if relabelled else "")

        def first(row) -> str:  # the side said first names the op and size; the second, if the same, "it"
            return _launched(row) + (_labelled(row) if relabelled else "")

        def second(row) -> str:
            return f"it{_labelled(row)}" if relabelled else _launched(row)

        if tie:
            side = sorted(int(r) for r, s in zip(g["rank"], sigs) if s == majority)
            said = (f"{where}{ranks_text(side)} launched {first(good)} and rank(s) {ranks_text(others)} launched "
                    f"{second(bad)}{why}: as many on each side, so no majority says which side is wrong (no "
                    "culprit named).")
        else:
            said = f"{where}{ranks_text(others)} launched {first(bad)} while the others launched {second(good)}{why}."
        return Diagnosis("desync", [] if tie else others, label=good["label"], step=step, sequence=int(seq),
                         group=str(group), evidence=evidence, sources=[source], summary=said)
    return None


def check_hang(lt: pd.DataFrame, trace: Trace, faults: FaultEvidence, source: str) -> Diagnosis | None:
    # A profiler window (Kineto traces) starts and stops at different collectives on different ranks, so
    # absence there proves nothing: only whole-run records (run dirs, Flight Recorder) are checked.
    if not len(lt) or trace.source not in ("run", "flight_recorder"):
        return None
    best = None
    unknown = set(unrecorded_ranks(trace)) | set(no_folder_ranks(trace))  # no records of theirs to find an absence in
    for group, g in lt.groupby("group"):
        members = set(g["rank"].astype(int))
        sizes = pd.to_numeric(g["group_size"], errors="coerce").dropna()
        if len(sizes) and int(sizes.max()) == trace.world_size:
            # the whole world: a rank that left no record at all (killed early) is still a member
            members |= set(range(trace.world_size))
        members -= unknown
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
    lost = {r: why for r, why in incomplete_ranks(trace).items() if r in missing}
    if lost:
        # found by absence, in records that are not all there: the launch may be among the lost ones
        why = "; ".join(f"rank {r}: {', '.join(w)}" for r, w in lost.items())
        return Diagnosis(
            "insufficient", [], label=first["label"], step=step, sequence=seq, group=group, sources=[source, STATUS],
            evidence=[{"rank": r, "launched": "unknown", "records": "incomplete", "why": ", ".join(w),
                       "status": rank_statuses(trace).get(r, {}).get("status")} for r, w in lost.items()],
            details={"incomplete_ranks": {str(r): w for r, w in lost.items()}},
            summary=(f"insufficient: rank(s) {ranks_text(sorted(have))} launched {first['op']} '{first['label']}' (group "
                     f"{group}, seq {seq}, step {step}) and rank(s) {ranks_text(missing)} have no record of it, but the "
                     f"records of rank(s) {ranks_text(sorted(lost))} are incomplete ({why}): whether they never launched "
                     "it (a hang) or its record was lost is unknown, so no hang is claimed. See the problems while "
                     "loading."))
    wd = faults.reports[faults.reports["kind"] == "watchdog"]
    fired_ns = dict(zip(wd["rank"].astype(int), wd["fired_ns"]))
    blocked = dict(zip(wd["rank"].astype(int), wd["blocked_at"])) if "blocked_at" in wd else {}
    waiting = dict(zip(wd["rank"].astype(int), wd["waiting_on"])) if "waiting_on" in wd else {}
    fired = faults.ranks("watchdog")
    evidence = []  # the culprits (never launched it) first, then the ranks waiting in it
    where = {m: last_region(trace, m) if i < REGIONS_LOOKED_UP else None for i, m in enumerate(missing)}
    for m in missing:
        mine = lt[(lt["rank"] == m) & (lt["group"] == group)].sort_values("seq")
        last = mine.iloc[-1] if len(mine) else None
        evidence.append({"rank": m, "launched": False,
                         "last_launched_seq": None if last is None else int(last["seq"]),
                         "last_launched_label": None if last is None else last["label"],
                         "last_launch_ns": None if last is None else iso_ns(last["call_ns"]),
                         **_region_evidence(where[m]),
                         "status": rank_statuses(trace).get(m, {}).get("status"),
                         "error": rank_statuses(trace).get(m, {}).get("error")})
    for _, r in rows.sort_values("rank").iterrows():
        evidence.append({"rank": int(r["rank"]), "launched": True, "finished": bool(r["finished"]),
                         "call_ns": iso_ns(r["call_ns"]), "wait_ns": iso_ns(r["wait_ns"]),
                         "watchdog_fired_ns": fired_ns.get(int(r["rank"])),
                         "blocked_at": blocked.get(int(r["rank"])), "source": r["source"]})
    wd_note = f"; the hang watchdog fired on rank(s) {ranks_text(fired)}" if fired else ""
    return Diagnosis(
        "hang", missing, label=first["label"], step=step, sequence=seq, group=group, evidence=evidence,
        sources=[source],
        summary=(f"hang: rank(s) {ranks_text(sorted(have))} launched {first['op']} '{first['label']}' (group {group}, "
                 f"seq {seq}, step {step}) but rank(s) {ranks_text(missing)} never did (found by absence)"
                 f"{_where_text(where)}{wd_note}{_blocked_text(blocked, sorted(have))}"
                 f"{_waiting_text(waiting, sorted(have), group, seq)}."))


FULL_BYTES = 1 << 20  # free space under which a run directory's filesystem counts as full


def check_refused(trace: Trace) -> Diagnosis | None:
    """summary.json's `usage_error`: the ranks refused the options `commscope run` gave them before their
    first step (nodes launched with different options). Nothing was trained: no rank is a culprit."""
    summary = trace.config.get("summary") or {}
    refused = summary.get("usage_error") if trace.source == "run" else None
    if not isinstance(refused, str) or not refused:
        return None
    return Diagnosis("insufficient", [], sources=[SUMMARY], details={"usage_error": refused}, summary=(
        f"insufficient: the ranks refused their options before the first step ({refused}): the command was "
        "wrong, no step ran, and there is nothing to judge. Launch every node with the same options."))


def check_unwritable(trace: Trace) -> Diagnosis | None:
    """The run directory stopped taking writes (disk full, read-only, quota): a rank's status, the
    launcher's summary or the ranks' output in a launcher log (the loader's `storage_error`) says so, or
    there is no summary.json and the filesystem holding the run is full now (`free_bytes`). Each
    rank's records then end where its writes failed, and a rank whose status.json did not fit looks like
    one that crashed: nothing about how the ranks ended can be judged."""
    if trace.source != "run":
        return None
    said = {r: s.get("error") for r, s in rank_statuses(trace).items()
            if STORAGE_ERROR.search(str(s.get("error") or ""))}
    summary = trace.config.get("summary") or {}
    message = summary.get("message") if isinstance(summary.get("message"), str) else ""
    if not STORAGE_ERROR.search(message):
        message = ""
    logged = trace.config.get("storage_error")
    free = trace.config.get("free_bytes")
    # no summary.json (the launcher writes it last, whatever happened) on a filesystem that is full now
    full = not summary and isinstance(free, int) and free < FULL_BYTES
    if not (said or message or logged or full):
        return None
    why = (f"rank {min(said)}: {said[min(said)]}" if said else f"{SUMMARY}: {message}" if message else
           logged if logged else
           f"no {SUMMARY}, and the filesystem holding it has {free:,} bytes free now")
    return Diagnosis("insufficient", [], sources=[STATUS, SUMMARY],
                     evidence=[{"rank": r, "error": e, "last_finished_step": last_finished_step(trace, r)}
                               for r, e in sorted(said.items())],
                     summary=(f"insufficient: the run directory could not be written ({why}); each rank's "
                              "records end where its writes failed and a status that did not fit is missing, so "
                              "how the ranks ended is unknown: no crash, hang, desync or straggler is judged. Free "
                              "space and run again."))


def _trace_off(trace: Trace) -> bool:
    """A run recorded with --trace off: its ranks write their status and nothing else, by design."""
    return trace.run_args.get("trace") == "off"


def check_insufficient(trace: Trace) -> Diagnosis | None:
    """Ranks of the job missing from the data: who came last to a collective cannot be known. (Not a run
    recorded with --trace off, whose ranks have no records by design: check_not_recorded says so.)"""
    if _trace_off(trace):
        return None
    missing = sorted(set(range(trace.world_size)) - set(trace.ranks))
    unrecorded = unrecorded_ranks(trace) if trace.source == "run" else []
    if unrecorded and not missing:
        return Diagnosis("insufficient", sources=[STATUS, EVENTS],
                         details={"unrecorded_ranks": unrecorded, "ranks": list(trace.ranks)}, summary=(
            f"insufficient: rank(s) {ranks_text(unrecorded)} completed ({STATUS}) but their {EVENTS} holds no "
            "step or collective that could be read (empty, missing or damaged: see the problems), so what they "
            "launched and when is unknown: no hang, desync or straggler can be judged on them."))
    if not missing:
        return None
    absent = [r for r in no_folder_ranks(trace) if r in missing]
    if absent:
        return Diagnosis("insufficient", sources=[EVENTS, SUMMARY], details={
            "missing_ranks": missing, "ranks": list(trace.ranks), "no_folder_ranks": absent,
            "launcher_status": launcher_status(trace, absent)}, summary=(
            f"insufficient: the run directory has no folder for rank(s) {ranks_text(absent)} of the job's "
            f"{trace.world_size}{launcher_says(trace, absent)}. Their records are missing, which is no sign of a "
            "crash or hang, and without them who came last to a collective is unknown: no hang, desync or "
            "straggler can be judged on them. Copy the whole run directory for a verdict."))
    return Diagnosis("insufficient", sources=[EVENTS if trace.source == "run" else "trace"],
                     details={"missing_ranks": missing, "ranks": list(trace.ranks)}, summary=(
        f"insufficient: the data has {len(trace.ranks)} of the job's {trace.world_size} ranks (missing: "
        f"{int_ranges(missing)}); a collective's last arrival may be a missing rank, so stragglers cannot be "
        "judged. " + ("Their rank folders hold no records that could be read (see the problems): a verdict needs "
                      f"each rank's {EVENTS}." if trace.source == "run" else "Load every rank's trace for a verdict.")))


def check_ended_first(trace: Trace, faults: FaultEvidence) -> Diagnosis | None:
    """Every failed rank's error is another's doing (a signal, a lost peer) and no record shows the cause:
    summary.json's `ended_first` (the launcher saw that rank end first, by its status's time) ended by a
    signal while nobody had timed out is a rank killed from outside the job. commscope run and
    torch.distributed.run signal ranks only after one failed; the others lost their peer or were stopped
    after it."""
    first = (trace.config.get("summary") or {}).get("ended_first")
    if not isinstance(first, dict) or first.get("how") != "signalled" or type(first.get("rank")) is not int:
        return None
    if someone_waited(trace, faults):
        return None
    statuses = rank_statuses(trace)
    r = first["rank"]
    m = SIGNAL_ENDED.search(str(first.get("error") or ""))
    how = m.group(1) if m else "a signal"
    others = sorted(o for o, s in statuses.items() if o != r and s.get("status") not in ENDED)
    last = last_finished_step(trace, r)
    return Diagnosis("crash", [r], step=last, sources=[SUMMARY, STATUS], evidence=[
        {**status_row(trace, statuses, o), **({} if o == r else {"role": "affected"})} for o in [r, *others]],
        summary=(f"crash: rank {r} ended first, by {how} from outside the job ({SUMMARY}: the launcher saw it "
                 "end first; no rank timed out, and the launchers signal ranks only after a failure)"
                 + (f"; rank(s) {ranks_text(others)} failed after it" if others else "")
                 + f"; {finished_text(last, trace)}"))


def check_unexplained(trace: Trace) -> Diagnosis | None:
    """Ranks failed but no rule above found why (e.g. --trace off: no launch records). A backend timeout
    still says "hang", without culprits; anything else is "insufficient": the evidence is missing."""
    bad = {r: s for r, s in rank_statuses(trace).items() if s.get("status") not in (*ENDED, None)}
    if not bad:
        return None
    timed = sorted(r for r, s in bad.items() if timed_out(s.get("error")))
    verdict = "hang" if timed else "insufficient"
    first = bad[min(bad)]
    mode = trace.run_args.get("trace")
    hint = ("no launch records of the fault: record with --trace light for a culprit" if mode == "off" else
            "no collective launch or report shows the fault")
    # ranks that did not give up waiting but were ended from outside (the launcher's teardown): where the
    # others timed out, these are where a rank stuck outside the collective would be; a suspicion, not a record
    suspects = sorted(r for r, s in bad.items() if r not in timed and SIGNAL_ENDED.search(str(s.get("error") or "")))
    suspected = (f" Rank(s) {ranks_text(suspects)} did not time out but were ended by a signal, as a rank stuck "
                 "outside the collective is when the job is torn down: the likely one(s) the others waited for."
                 if timed and suspects else "")
    # where some timed out, those are named as such: "failed" alone would lump in the ranks the teardown
    # ended, which the suspicion then names apart
    said = f"rank(s) {ranks_text(sorted(bad))} failed (rank {min(bad)}: {first.get('error')})"
    if timed:
        rest = [r for r in sorted(bad) if r not in timed and r not in suspects]
        said = (f"rank(s) {ranks_text(timed)} timed out (rank {timed[0]}: {bad[timed[0]].get('error')})"
                + (f" and rank(s) {ranks_text(rest)} failed" if rest else ""))
    return Diagnosis(verdict, [], evidence=[status_row(trace, bad, r) for r in sorted(bad)],
                     sources=[STATUS], details={"suspects": suspects} if suspected else {},
                     summary=f"{verdict}: {said} but the records do not show which rank caused it ({hint}).{suspected}")


def check_not_recorded(trace: Trace) -> Diagnosis | None:
    """A run recorded with --trace off in which no rank failed: its ranks recorded no step, collective or
    hook (only their status), so no straggler, desync or hang can be judged, whatever summary.json says."""
    if not _trace_off(trace):
        return None
    summary = trace.config.get("summary") if isinstance(trace.config.get("summary"), dict) else {}
    said = f"; {SUMMARY} says: {summary['message']}" if summary.get("message") else ""
    return Diagnosis("insufficient", sources=[STATUS, SUMMARY], details={"trace": "off"}, summary=(
        f"insufficient: the run was recorded with --trace off, so its ranks wrote their status and no step, "
        f"collective or hook record: no straggler, desync or hang can be judged{said}. Run with --trace light "
        "(the default) for a verdict."))


def _bytes(b: Any) -> str:
    """"960 bytes", "154,533,888 bytes (147.4 MiB)": exact, as the evidence holds it, and readable."""
    if b is None or pd.isna(b):
        return "? bytes"
    return f"{int(b):,} bytes" + (f" ({int(b) / 2 ** 20:,.1f} MiB)" if b >= 2 ** 20 else "")


def _launched(row: Any) -> str:
    """What a launch table row launched, in words: "all_reduce of 8000 bytes"."""
    return f"{row['op']} of {_bytes(row['bytes'])}"


def _labelled(row: Any) -> str:
    """" labelled 'mlp'", or " unlabelled"."""
    label = row["label"]
    return " unlabelled" if label is None or pd.isna(label) else f" labelled '{label}'"


# ---- entry points -----------------------------------------------------------------------------
def diagnose(trace: Trace, faults: FaultEvidence | None = None, *, straggler_ms: float | None = None,
             straggler_pct: float | None = None, warmup_steps: int = waiting.WARMUP_STEPS) -> Diagnosis:
    """The verdict on `trace` and its fault evidence (None: the frames alone, no reports or dumps).
    `straggler_ms` (absolute) or `straggler_pct` (of the median step) replace the default straggler bar;
    `warmup_steps`: training steps below this number are not judged for stragglers."""
    faults = faults or FaultEvidence()
    lt = launch_table(trace.collectives, faults.inflight, "events" if trace.source == "run" else "trace")
    src = f"{EVENTS} + watchdog/inflight reports" if trace.source == "run" else "trace"
    # collectives numbered together though they may have run on different process groups (loader's
    # "mixed_groups"): members that differ there are as likely two groups' calls as a desync, and one rank
    # "waiting" for another may be waiting for its own group's peers
    mixed_names = [str(g) for g in trace.config.get("mixed_groups") or ()]
    mixed = lt["group"].astype(str).isin(mixed_names).to_numpy(bool) if len(lt) else np.zeros(0, dtype=bool)
    # three rules ask whether a rank never launched what the others waited in; the answer is computed once
    # (a pass over every collective: ~0.5 s on a 1024-rank run) and only where a rule asks
    hang = cache(partial(check_hang, lt, trace, faults, src))
    d = (stuck_when_interrupted(check_interrupted(trace), lt, trace, hang)
         or check_refused(trace) or check_unwritable(trace)
         or check_desync(lt[~mixed], src, by_label=trace.source == "run")
         or check_crash(trace, faults)
         or hang() or check_insufficient(trace) or check_trace_cut(lt, trace)
         or check_ended_first(trace, faults) or check_stopped(lt, trace, faults) or check_unexplained(trace)
         or check_not_recorded(trace)
         or check_straggler(_without_groups(trace, mixed_names), straggler_ms=straggler_ms,
                            straggler_pct=straggler_pct, warmup_steps=warmup_steps))
    d = ended_from_outside(d, trace, faults)
    d = stuck_before_killed(d, trace, hang)
    if d.verdict == "desync":
        d.also = also_straggler(d, _without_groups(trace, mixed_names), straggler_ms=straggler_ms,
                                straggler_pct=straggler_pct, warmup_steps=warmup_steps)
    if faults.ranks("flight_recorder"):
        frl = faults.flight_recorder
        empty = Trace(source="flight_recorder", path=trace.path, world_size=trace.world_size, backend=None,
                      device=None)
        second = check_desync(frl, "flight_recorder") or check_hang(frl, empty, FaultEvidence(), "flight_recorder")
        d.second_opinion = second.to_json() if second else {"verdict": "ok", "source": "flight_recorder"}
        # e.g. --trace off: the Flight Recorder is all there is
        if d.verdict in ("ok", "insufficient") and second is not None:
            d = second
    d.injected = list(trace.run_args.get("inject") or [])
    d.problems = loading_problems(trace)
    if mixed.any():
        unjudged = check_desync(lt[mixed], src)
        d.problems.append(f"the collectives of group(s) {', '.join(mixed_names)} are left out of the desync and "
                          "straggler rules: which process group each ran on is not in the trace, and the groups "
                          "have different members" +
                          (f"; among them, {unjudged.summary.removeprefix('desync: ')}" if unjudged else ""))
    d.run_reports = run_reports(trace)
    return d


def also_straggler(d: Diagnosis, trace: Trace, **thresholds: Any) -> list[dict]:
    """The straggler rule's verdict beside a desync, where it names another rank: a desync the backend let
    pass (a size mismatch NCCL moves on from) leaves the steps to judge, and a rank that made the others wait
    is a second fault the one verdict would hide. None beside a crash or hang: waiting on a dead or stuck
    rank is the fault itself, not a straggler."""
    s = check_straggler(trace, **thresholds)
    return [s.to_json()] if s.verdict == "straggler" and set(s.culprit_ranks) - set(d.culprit_ranks) else []


def diagnose_trace(trace: Trace, *, tolerate_bad_files: bool = False, selected: tuple[int, int] | None = None,
                   **thresholds: Any) -> Diagnosis:
    """`diagnose` with the fault evidence the loader found in the run's directory. `tolerate_bad_files`:
    evidence that could not be read is left out (the report's use: the rest of a report is still worth
    having) instead of raising its UserError (the doctor command's use). `selected`: the steps [lo, hi)
    a report around the verdict shows (`report --steps`); the verdict stays the whole run's — a crash or
    hang outside the selection is still the run's fault, and the straggler bar is a share of the whole
    run's median step — and its summary says so where the selection leaves steps out. `thresholds`:
    diagnose's keywords."""
    faults = trace.faults if trace.source == "run" else FaultEvidence()
    if faults.error is not None:
        if not tolerate_bad_files:
            raise UserError(faults.error)
        faults = FaultEvidence()
    d = diagnose(trace, faults, **thresholds)
    if selected is not None:
        known = sorted({int(s) for s in trace.steps["step"] if s >= 0}) if len(trace.steps) else []
        if any(not selected[0] <= s < selected[1] for s in known):
            lo, hi = selected
            d.summary = f"(whole run, not only the selected {steps_said(lo, hi - 1)}) {d.summary}"
    return d
