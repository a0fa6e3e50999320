"""The doctor's reading of a job that was stopped: every rank ended by a signal with no summary.json to
say which ended first (a script under plain torchrun or another launcher), or stopped by the user (Ctrl-C)
while a rank may have been stuck.

Why it needs its own rule: every status reads "terminated by signal" (or KeyboardInterrupt), whatever
happened. If the rank that never launched a collective the others waited in (analyze.doctor.check_hang)
was killed from outside, it is a crash; if the job was stopped while that rank was stuck, the hang stands;
if the job was stopped while it ran, a rank was merely a moment behind and the job was stopped, not
broken. What tells these apart is when each rank's end began (status.json `ended_ns`: the signal's
arrival, on the common time axis) and how long the waiting ranks had waited by the first end.

- A rank that, by the first end, had waited in a collective at least STALL_STEPS median steps and
  STALL_MIN_NS was stuck: a hang (with the culprits check_hang found; without any where every member had
  launched it, stuck inside the collective), however the job then ended, the stuck rank killed first
  included (stuck_before_end serves the launcher's runs, whose summary.json names the rank ended first).
- Otherwise, a job every rank of which was inside a step and had recorded nothing for as long
  (STALL_STEPS median steps and STALL_MIN_NS), and longer than any step it finished, before the first end,
  none waiting in a recorded collective, was stuck outside communication (a data loader, I/O, a lock, a
  long op): a hang without culprit, however it then ended. Between steps (a checkpoint, an eval loop, the
  profiler's export) no record says what a rank did, so silence there is no hang.
- Otherwise, every rank's end began within rundir.schema.signalled_together_bar (SIGNALLED_TOGETHER_NS plus
  twice the clocks' alignment error, the launcher's bar too) of the others: one signal reached the whole
  job, stopped while it ran (interrupted).
- Otherwise ranks whose ends began more than that before every other rank's were ended first, from
  outside the job (crash), when they are the hang's culprits or there is no hang; else insufficient.
- Without a finished step there is no step to measure a stall by: a wait under STALL_MIN_NS is no hang,
  a longer one may be a slow first step (compilation, warm-up) and is said, not judged.
- A status without `ended_ns` (an older recorder's, or one written without an aligned clock): nothing of
  this is judged, except where the user stopped the job and only the hang's culprits lack one (a stopped
  rank the launcher killed and wrote the status of): their peers' waits by the first of their own ends
  still say whether the culprits were stuck before the stop.

The bars: bench/stop_ends.py measures how far apart the ends lie each way (docs/faults.md has the
figures: well under 50 ms for one signal to the job, seconds for one rank ended first: the rank has to
exit and the launcher's monitor to notice).

Invariants: pure functions of the trace's statuses, meta.json's clock errors, steps and launch table;
waits are measured to the first rank's end, never past it, so a teardown's delay is never counted as a
stall.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from commscope.analyze.diagnosis import Diagnosis, ranks_text
from commscope.analyze.left_in_flight import last_region, last_region_text
from commscope.load.frames import Trace
from commscope.rundir.schema import signalled_together_bar

STALL_STEPS = 5           # a wait of this many median steps is no moment's lag...
STALL_MIN_NS = 1_000_000_000  # ...nor is one of a second, however short the steps


@dataclass
class Ends:
    ended: dict[int, int]   # rank -> status.json ended_ns
    bar: int                # ns: ends closer than this began together
    signals: str            # the signals' names, "SIGTERM"

    @property
    def spread(self) -> int:
        return max(self.ended.values()) - min(self.ended.values())

    @property
    def together(self) -> bool:
        return self.spread <= self.bar

    def first(self) -> list[int]:
        """The ranks whose ends began more than `bar` before every other rank's ([] where none did)."""
        order = sorted(self.ended, key=lambda r: (self.ended[r], r))
        for k in range(1, len(order)):
            if self.ended[order[k]] - self.ended[order[k - 1]] > self.bar:
                return sorted(order[:k])
        return []

    def lead_ms(self, first: list[int]) -> float:
        return (min(v for r, v in self.ended.items() if r not in first) - max(self.ended[r] for r in first)) / 1e6

    def reached(self) -> str:
        n = len(self.ended)
        return (f"{self.signals} reached {'both' if n == 2 else f'all {n:,}'} ranks within {_ms(self.spread)} "
                "(status.json ended_ns)")

    def how(self) -> str:
        """How the job ended, in words, from the ends."""
        if self.together:
            return f"the job was stopped whole from outside: {self.reached()}"
        first = self.first()
        if first:
            return (f"rank(s) {ranks_text(first)} were ended first, by {self.signals} from outside the job, "
                    f"{self.lead_ms(first):,.0f} ms before the others (status.json ended_ns)")
        return f"the ranks' ends ({self.signals}) began over {self.spread / 1e6:,.0f} ms (status.json ended_ns)"

    def details(self) -> dict:
        return {"ended_ns": {str(r): v for r, v in sorted(self.ended.items())}, "together_bar_ms": self.bar / 1e6,
                "spread_ms": round(self.spread / 1e6, 3)}


def ends_of(trace: Trace, statuses: dict[int, dict], signals: str) -> Ends | list[int]:
    """The ranks' end times, or the ranks whose status has none."""
    ended = {r: s.get("ended_ns") for r, s in statuses.items()}
    unknown = sorted(r for r, v in ended.items() if type(v) is not int)
    if unknown or not ended:
        return unknown
    metas = (trace.config.get("meta") or {}).values()
    errors = [int(((m or {}).get("clock") or {}).get("error_ns") or 0) for m in metas]
    return Ends(ended, signalled_together_bar(errors), signals)


@dataclass
class Stall:
    waiter: int | None      # the rank that had waited longest by the first end
    waited: int | None      # ns
    step: float | None      # the median step, ns (None: no step finished)

    @property
    def bar(self) -> int | None:
        return None if self.step is None else int(max(STALL_MIN_NS, STALL_STEPS * self.step))

    @property
    def stuck(self) -> bool:
        return self.waited is not None and self.bar is not None and self.waited >= self.bar

    @property
    def unknown(self) -> bool:
        """A wait long enough to matter with no finished step to measure it by."""
        return self.bar is None and self.waited is not None and self.waited >= STALL_MIN_NS

    def details(self) -> dict:
        return {"waited_ms": None if self.waited is None else round(self.waited / 1e6, 3),
                "median_step_ms": None if self.step is None else round(self.step / 1e6, 3),
                "stall_bar_ms": None if self.bar is None else self.bar / 1e6}

    def waited_text(self, what: str) -> str:
        steps = f" ({self.waited / self.step:,.0f} median steps)" if self.step else ""
        return f"rank {self.waiter} had waited {_secs(self.waited)} in {what}{steps}"

    def stands(self, h: Diagnosis, when: str, sources: list[str]) -> Diagnosis:
        """The hang `h` standing on this stall: its summary gains how long the waiter had waited in it, and
        `when` (how the end came, in words)."""
        return replace(h, sources=list(dict.fromkeys(sources)), details={**(h.details or {}), **self.details()},
                       summary=f"{h.summary.rstrip('.')}; {self.waited_text(repr(str(h.label)))} when {when}.")

    def lag_text(self, what: str) -> str:
        if self.waited is None:
            return "no rank was waiting in a collective"
        bar = (f"the {self.bar / 1e6:,.0f} ms a stuck rank would show ({STALL_STEPS} median steps of "
               f"{self.step / 1e6:,.1f} ms, at least {STALL_MIN_NS / 1e9:.0f} s)" if self.bar is not None else
               f"the {STALL_MIN_NS / 1e9:.0f} s a stuck rank would show")
        return (f"the longest wait on a collective then (rank {self.waiter} on {what}) was {_secs(self.waited)}, "
                f"under {bar}: too short to call a hang")


def stall_of(trace: Trace, waits: list[tuple[int, int]], ends: Ends) -> Stall:
    """The longest of `waits` ((rank, call_ns) of collectives launched and never finished), measured to the
    first rank's end."""
    return _stall_until(trace, waits, min(ends.ended.values()))


def stuck_before_end(d: Diagnosis, trace: Trace, statuses: dict[int, dict]) -> Stall | None:
    """The longest wait in the collective of `d` (a hang by absence) by the time the first of its culprits'
    ends began (status.json ended_ns), where that passed the stall bar: the culprits were stuck before a
    signal ended them, and the hang stands however it then ended. None otherwise, and where a culprit's
    status has no ended_ns."""
    return _stuck_by(d, trace, [statuses.get(r, {}).get("ended_ns") for r in d.culprit_ranks])


def stuck_before_others_ended(d: Diagnosis, trace: Trace, statuses: dict[int, dict]) -> Stall | None:
    """For culprits of `d` (a hang by absence) that left no status (SIGKILL: no time of their end), the
    longest wait in its collective by the first end of the other ranks, where that passed the stall bar.
    The others end after the culprit (its death is what ends them, or the teardown that follows), so the
    wait is an upper bound on how long they had waited when it was killed: a suspicion, not a record.
    None where no other rank's end is known or the wait is under the bar."""
    ended = [s.get("ended_ns") for r, s in statuses.items() if r not in d.culprit_ranks]
    return _stuck_by(d, trace, [v for v in ended if type(v) is int])


def _stuck_by(d: Diagnosis, trace: Trace, ended: list) -> Stall | None:
    """The longest wait in the collective of `d` by the first of `ended` (end times), where it passed the
    stall bar; None where it did not, or an end is unknown."""
    if not ended or any(type(v) is not int for v in ended):
        return None
    stall = _stall_until(trace, _evidence_waits(d, None), min(ended))
    return stall if stall.stuck else None


def _stall_until(trace: Trace, waits: list[tuple[int, int]], until: int) -> Stall:
    step = _median_step_ns(trace)
    waits = [(until - c, r) for r, c in waits if c < until]  # launched after the first end: not waiting by then
    if not waits:
        return Stall(None, None, step)
    waited, waiter = max(waits)
    return Stall(waiter, waited, step)


# host times of each frame a rank's progress shows in (device times are not on the host's axis)
_PROGRESS_TIMES = {"steps": ("start_ns", "end_ns"), "regions": ("start_ns", "end_ns"), "hooks": ("t_ns",),
                   "collectives": ("call_ns", "return_ns", "wait_ns", "wait_end_ns")}


@dataclass
class Progress:
    t: int             # the latest time the rank recorded before its own end began
    step: int | None   # the step that record belongs to; None for a step's own edge (between steps)


def last_progress(trace: Trace, ended: dict[int, int]) -> dict[int, Progress]:
    """Per rank of `ended`, its latest record before its own end began (a region its end cut short counts
    by its start: its end is the unwinding); ranks that recorded nothing before it are left out."""
    best: dict[int, Progress] = {}
    for kind, cols in _PROGRESS_TIMES.items():
        df = getattr(trace, kind, None)
        if df is None or not len(df):
            continue
        ranks = df["rank"].to_numpy()
        cap = pd.Series(ranks).map(ended).to_numpy(dtype=float)  # NaN: a rank without an end
        steps = pd.to_numeric(df["step"], errors="coerce").to_numpy(dtype=float) if kind != "steps" else None
        for c in (c for c in cols if c in df):
            t = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
            for i in np.flatnonzero(np.isfinite(t) & (t < cap)):
                r = int(ranks[i])
                if r not in best or t[i] > best[r].t:
                    step = None if steps is None or not np.isfinite(steps[i]) else int(steps[i])
                    best[r] = Progress(int(t[i]), step)
    return best


def silence_of(trace: Trace, ends: Ends) -> Stall | None:
    """The shortest of the ranks' silences before the first end (first end − the rank's last_progress), as a
    Stall whose `waiter` is that rank, where every rank was inside a step it had not finished (its latest
    record belongs to it): every rank had been silent at least that long, mid-step. None where a rank
    recorded nothing to measure from or was between steps (a checkpoint, an eval loop, the profiler's
    export: work outside the steps that no record shows)."""
    until = min(ends.ended.values())
    last = last_progress(trace, ends.ended)
    if set(last) != set(ends.ended):
        return None
    s = trace.steps
    for r, p in last.items():
        done = set(s["step"][s["rank"] == r].astype(int)) if len(s) else set()
        if p.step is None or p.step < 0 or p.step in done:
            return None
    rank = max(last, key=lambda r: (last[r].t, -r))
    return Stall(rank, max(0, until - last[rank].t), _median_step_ns(trace))


def _longest_step_ns(trace: Trace) -> float:
    dur = _step_durations_ns(trace)
    return float(dur.max()) if len(dur) else 0.0


def stuck_outside(trace: Trace, ends: Ends, how: str, sources: list[str], details: dict) -> Diagnosis | None:
    """The hang of a job every rank of which was inside a step and had recorded nothing for the stall bar,
    and for longer than any step the job finished, before the first end, none waiting in a collective (the
    caller found no rank waiting): stuck outside communication. `how`: how the job ended, in words. None
    where some rank was not silent that long, or was between steps."""
    silence = silence_of(trace, ends)
    if silence is None or not silence.stuck or silence.waited <= _longest_step_ns(trace):
        return None
    cut = [last_region_text(r, w) for r in sorted(ends.ended)
           if (w := last_region(trace, r)) is not None and w.get("cut_by_end")]
    where = "; ".join(cut[:3]) + (f"; and {len(cut) - 3:,} more rank(s) so" if len(cut) > 3 else "")
    steps = f" ({silence.waited / silence.step:,.0f} median steps)"
    return Diagnosis("hang", [], sources=sources, details={**details, "silent_ms": round(silence.waited / 1e6, 3),
                                                           "stall_bar_ms": silence.bar / 1e6}, summary=(
        f"hang: no rank had recorded anything for {_secs(silence.waited)}{steps}, longer than any step the job "
        f"finished, when {how}, every rank inside a step and none waiting in a recorded collective: every rank "
        f"was stuck outside communication (the training loop itself: a data loader, I/O, a lock, a long op)."
        + (f" {where[0].upper()}{where[1:]}." if where else "")))


def judge_stopped(d: Diagnosis, trace: Trace, statuses: dict[int, dict], signals: str, sources: list[str]) -> Diagnosis:
    """`d`, a hang by absence in a job whose every rank a signal ended, read with the ranks' end times:
    the hang, a crash of the culprits, interrupted, or insufficient."""
    ends = ends_of(trace, statuses, signals)
    if isinstance(ends, list):
        return _no_ends(ends, signals, sources)
    culprits = d.culprit_ranks
    others = [v for r, v in ends.ended.items() if r not in culprits]
    stall = stall_of(trace, _evidence_waits(d, ends), ends)
    details = {**(d.details or {}), **ends.details(), **stall.details()}
    what = f"'{d.label}', which rank(s) {ranks_text(culprits)} had not launched"
    if stall.stuck:  # stuck before any end: killing the stuck rank first ends a hang, it does not cause one
        return stall.stands(replace(d, details=details), ends.how(), sources)
    if others and max(ends.ended[r] for r in culprits) + ends.bar < min(others):
        return replace(d, verdict="crash", details=details, summary=(
            f"crash: rank(s) {ranks_text(culprits)} ended by {signals} from outside the job, "
            f"{ends.lead_ms(culprits):,.0f} ms before any other rank (status.json ended_ns), which were torn down "
            f"after; {d.summary.removeprefix('hang: ')}"))
    return _not_stuck(d, ends, stall, what, sources, details)


def check_stopped_ends(lt: pd.DataFrame, trace: Trace, statuses: dict[int, dict], signals: str,
                       sources: list[str]) -> Diagnosis | None:
    """A job whose every rank a signal ended, no rank missing from a collective (else judge_stopped
    answers): a hang inside a collective every member launched, a hang outside communication, a crash of
    the ranks ended first, interrupted, or insufficient (also where a status has no ended_ns, naming the
    ranks)."""
    ends = ends_of(trace, statuses, signals)
    if isinstance(ends, list):
        return _no_ends(ends, signals, sources)
    inside, stall, label = _stuck_inside(lt, trace, ends, ends.how(), sources)
    if inside is not None:
        return inside
    details = {**ends.details(), **stall.details()}
    outside = stuck_outside(trace, ends, ends.how(), sources, details) if stall.waiter is None else None
    if outside is not None:
        return outside
    first = ends.first()
    if first:
        return Diagnosis("crash", first, sources=sources, details=details, summary=(
            f"crash: rank(s) {ranks_text(first)} ended first, by {signals} from outside the job, "
            f"{ends.lead_ms(first):,.0f} ms before any other rank (status.json ended_ns); the others were torn "
            "down after it (the launchers signal ranks only after a failure, and no rank timed out)"))
    what = f"'{label}', which every member had launched"
    return _not_stuck(Diagnosis("hang", [], label=label), ends, stall, what, sources, details)


def _stuck_inside(lt: pd.DataFrame, trace: Trace, ends: Ends, how: str,
                  sources: list[str]) -> tuple[Diagnosis | None, Stall, str | None]:
    """The hang inside a collective every member launched, where a rank had waited in it past the stall bar
    by the first end (`how`: how the job ended, in words), else None; with the longest wait (a Stall whose
    waiter is None where no rank was waiting in a collective) and its label."""
    pending = _waiting_at(lt, trace.collectives, min(ends.ended.values()))
    waits = [(int(r), int(c)) for r, c in zip(pending["rank"], pending["call_ns"]) if int(r) in ends.ended]
    stall = stall_of(trace, waits, ends)
    label = None
    if stall.waiter is not None:
        mine = pending[pending["rank"].astype(int) == stall.waiter].sort_values("call_ns")
        label = mine["label"].iloc[0]
    if not stall.stuck:
        return None, stall, label
    what = f"'{label}', which every member had launched"
    return Diagnosis("hang", [], label=label, sources=sources, details={**ends.details(), **stall.details()},
                     summary=(f"hang: {stall.waited_text(what)} when {how}. No rank is missing from it: stuck inside "
                              "the collective (the backend or the network).")), stall, label


def stalled_before_stop(h: Diagnosis, stopped: str, sources: list[str], trace: Trace,
                        statuses: dict[int, dict]) -> Diagnosis | None:
    """The hang `h` (found by absence) where the user stopped the run (`stopped`: how, in words): it stands
    when a rank had waited in it past the stall bar by the first rank's end, else None (interrupted
    stands)."""
    ends = ends_of(trace, statuses, "the user's signal")
    if not h.culprit_ranks:
        return None
    if isinstance(ends, list):
        # only culprits wrote no end time (a stopped rank the launcher killed and wrote the status of, or
        # one killed outright): the others' waits by the first of their own ends say whether the culprits
        # were stuck before the user's stop
        if not ends or not set(ends) <= set(h.culprit_ranks):
            return None
        stall = stuck_before_others_ended(h, trace, statuses)
        return stall.stands(h, stopped, [*h.sources, *sources]) if stall is not None else None
    stall = stall_of(trace, _evidence_waits(h, ends), ends)
    return stall.stands(h, stopped, [*h.sources, *sources]) if stall.stuck else None


def silent_before_stop(lt: pd.DataFrame, stopped: str, sources: list[str], trace: Trace,
                       statuses: dict[int, dict]) -> Diagnosis | None:
    """Where the user stopped the run (`stopped`: how, in words) and no rank was missing from a collective:
    the hang inside a collective every member launched (a rank waited in it past the stall bar), else, no
    rank waiting in one, the hang of a job stuck outside communication (stuck_outside); else None
    (interrupted stands)."""
    ends = ends_of(trace, statuses, "the user's signal")
    if isinstance(ends, list):
        return None
    inside, stall, _ = _stuck_inside(lt, trace, ends, stopped, sources)
    if inside is not None or stall.waiter is not None:
        return inside
    return stuck_outside(trace, ends, stopped, sources, {})


def _not_stuck(d: Diagnosis, ends: Ends, stall: Stall, what: str, sources: list[str], details: dict) -> Diagnosis:
    """No rank stuck by the first end: interrupted where the job was stopped whole, else insufficient."""
    if stall.unknown:
        return Diagnosis("insufficient", [], sources=sources, details=details, summary=(
            f"insufficient: {stall.waited_text(what)}, when {ends.how()}, before any step finished: with no step "
            "time to measure it by, a stuck rank cannot be told from a slow first step (compilation, warm-up)."))
    if ends.together:
        return Diagnosis("interrupted", [], sources=sources, details=details, summary=(
            f"interrupted: the job was stopped whole from outside while it ran: {ends.reached()}; "
            f"{stall.lag_text(what)}."))
    not_them = f", not rank(s) {ranks_text(d.culprit_ranks)}," if d.culprit_ranks and ends.first() else ""
    return Diagnosis("insufficient", [], sources=sources, details=details, summary=(
        f"insufficient: {ends.how()}{not_them} and no rank had been stuck by then ({stall.lag_text(what)}): "
        "who caused the end cannot be told."))


def _no_ends(ranks: list[int], signals: str, sources: list[str]) -> Diagnosis:
    return Diagnosis("insufficient", [], sources=sources, details={"ended_ns_missing": ranks}, summary=(
        f"insufficient: every rank was ended by a signal ({signals}) and no summary.json says which ended "
        f"first; rank(s) {ranks_text(ranks)} wrote no ended_ns in status.json, so whether the job was stopped "
        "whole from outside (a closed terminal, a preemption) or one rank was killed and the others torn "
        "down after it cannot be told."))


def _waiting_at(lt: pd.DataFrame, collectives: pd.DataFrame, at: int) -> pd.DataFrame:
    """(rank, call_ns, label) of the collectives a rank had launched by `at` and not yet seen complete: those
    left in flight (the launch table's unfinished rows), and those whose wait returned only after `at` or
    never (one that completed during the teardown is written with the rank's other records)."""
    cols = ["rank", "call_ns", "label"]
    parts = [lt.loc[~lt["finished"].astype(bool), cols]] if len(lt) else []
    c = collectives
    if len(c):
        call = c["call_ns"].astype("Int64")
        done = c["wait_end_ns"].astype("Int64")
        open_ = call.notna() & (call < at) & c["wait_ns"].notna() & (done.isna() | (done > at))
        parts.append(c.loc[open_.to_numpy(bool), cols])
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
    return out[out["call_ns"].notna()]


def _evidence_waits(d: Diagnosis, ends: Ends | None) -> list[tuple[int, int]]:
    """(rank, call_ns) of check_hang's evidence rows that launched the collective and never finished it (of
    the ranks with an end in `ends`, where given)."""
    return [(int(e["rank"]), int(e["call_ns"])) for e in d.evidence or []
            if e.get("launched") is True and not e.get("finished") and e.get("call_ns") is not None
            and (ends is None or int(e["rank"]) in ends.ended)]


def _step_durations_ns(trace: Trace) -> np.ndarray:
    """The durations of the finished steps over all ranks (ns, floats; steps without both ends left out)."""
    s = trace.steps
    if not len(s):
        return np.empty(0)
    dur = (s["end_ns"] - s["start_ns"]).to_numpy(dtype=float, na_value=np.nan)  # Int64: exact, then floats
    return dur[np.isfinite(dur) & (dur > 0)]


def _median_step_ns(trace: Trace) -> float | None:
    """The median duration of the finished steps over all ranks (None: no step finished)."""
    dur = _step_durations_ns(trace)
    return float(np.median(dur)) if len(dur) else None


def _ms(ns: int) -> str:
    return "0.1 ms" if ns < 100_000 else f"{ns / 1e6:,.1f} ms"


def _secs(ns: int) -> str:
    return f"{ns / 1e9:,.1f} s" if ns >= 1_000_000_000 else f"{ns / 1e6:,.1f} ms"
