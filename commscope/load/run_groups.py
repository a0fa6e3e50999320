"""Groups of training runs for `commscope compare`: a *group* is a folder of runs — commscope run
directories (sub-folders with summary.json) and/or modded-nanogpt logs (*.txt, *.log). Each usable run
contributes one (time, loss) pair:
- log: time = final `train_time` in seconds, loss = final `val_loss` (commscope.load.speedrun_log);
- run dir: time = total train time = sum(step_times_ms) / 1000 s, loss = the last step's loss; beside
  them its step count and the configuration that sets how much work a step is (WORK_KEYS, from
  config.json's `args` and summary.json's world size), which commscope.analyze.compare checks agree.
  A run directory without summary.json (written by a training script through `commscope.record`, not by
  `commscope run`) is a run when every rank's status.json says it ended ("completed", or "exited": it
  never closed its Recorder): its step times and losses are rank 0's step records (`st.loss`), its world
  size rank 0's meta.json.
Runs that did not finish are listed in `Group.skipped` with the reason and never used. Groups are
compared only when all their runs are of one kind (`check_one_kind`): the two times measure different
things.
A group is named after its folder; `unique_names` lengthens names that two groups share (a/r1, b/r1)
with their parent folders, so every column and JSON entry names one group.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

from commscope.errors import UserError
from commscope.load.files import Missing, entry_names, read_json
from commscope.load.speedrun_log import parse_log
from commscope.rundir import check_doc, rank_dirs, read_status
from commscope.util.text import counted
from commscope.rundir.schema import CONFIG, ENDED_STATUSES, EVENTS, KINETO_TRACE, STATUS, SUMMARY, rank_dir_name

LOG_SUFFIXES = (".txt", ".log")


# The trainer's options that change the work of a step (tokens per step, model size, ranks sharing it);
# options such as the communication schedule or the orders change how it is done, which is what a
# comparison is for.
WORK_KEYS = ("preset", "batch_size", "grad_accum", "world_size", "profile")


@dataclass(frozen=True)
class RunResult:
    path: Path
    kind: str  # "log" | "run"
    time_s: float
    loss: float
    steps: int | None = None  # run directories: the steps timed in step_times_ms
    work: dict | None = None  # run directories: WORK_KEYS → value (None where config.json does not say)
    # what the run measured (a log's final validation: steps, loss and time; a run directory's step times and
    # losses): a copy of a run has the same, two runs never do, so a copy is not counted as a second,
    # independent sample
    fingerprint: str = ""


@dataclass
class Group:
    name: str
    path: Path
    runs: list[RunResult] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def times(self) -> list[float]:
        return [r.time_s for r in self.runs]

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.runs]

    @property
    def run_dirs(self) -> list[Path]:
        return [r.path for r in self.runs if r.kind == "run"]


def _read_run_dir(path: Path) -> RunResult | str:
    """One commscope run directory → its result, or the reason it cannot be used (a summary.json that is
    unreadable or has fields of the wrong type, a step time that is not a finite positive number, a last
    loss that is not finite: never folded into a figure)."""
    try:
        doc = read_json(str(path / SUMMARY))
    except UserError as e:
        return f"unreadable: {e}"
    try:
        summary = check_doc(doc, str(path / SUMMARY), SUMMARY)
    except UserError as e:
        return f"garbled: {e}"
    status = summary.get("status")
    if status != "completed":
        return f"incomplete: status {status!r}"
    times, losses = summary.get("step_times_ms") or [], summary.get("losses") or []
    if not times or not losses:
        return f"incomplete: no finished steps in {SUMMARY}"
    bad = next((t for t in times if not t > 0), None)
    if bad is not None:
        return f"garbled: step_times_ms holds {bad!r}, not a positive time"
    loss = losses[-1]
    if loss is None or not math.isfinite(loss):
        return "incomplete: last loss is not finite"
    return RunResult(path, "run", math.fsum(times) / 1000.0, float(loss), len(times), _work(path, summary),
                     _fingerprint(repr((times, losses)).encode()))


def _read_recorded_run(path: Path) -> RunResult | str:
    """A run directory a training script wrote through commscope.record (no summary.json) → its result
    from rank 0's step records, or why it cannot be used."""
    from commscope.load.events import read_rank  # msgspec and numpy: only for runs that need it

    ranks = rank_dirs(str(path))
    silent, ended_badly = [], []  # a rank killed outright leaves no status, and its peers then fail: it comes first
    for r in sorted(ranks):
        where = Path(ranks[r]) / STATUS
        if where.exists() and not where.is_file():  # a FIFO would block the reader, a folder cannot be read
            return f"unreadable: rank {r} {STATUS} is not a regular file"
        try:
            st = read_status(ranks[r])
        except ValueError as e:  # not JSON, not an object, a field of the wrong type
            return f"unreadable: rank {r} {str(e).removeprefix('unreadable ')}"
        status = st["status"] if st is not None else None
        if status is None:
            silent.append(f"rank {r} has no {STATUS} (still running, or killed)")
        elif status not in ENDED_STATUSES:
            ended_badly.append(f"rank {r} status {status!r}")
    if silent or ended_badly:
        said = silent + ended_badly
        return "incomplete: " + "; ".join(said[:4]) + (f"; {len(said) - 4} more rank(s)" if len(said) > 4 else "")
    if 0 not in ranks or not (Path(ranks[0]) / EVENTS).exists():
        return f"incomplete: no rank0/{EVENTS}"
    try:
        steps = read_rank(str(Path(ranks[0]) / EVENTS), 0, f"rank0/{EVENTS}")["cols"]["step"]
    except UserError as e:
        return f"unreadable: {e}"
    order = steps["step"].argsort(kind="stable")
    times = [(int(e) - int(s)) / 1e6 for s, e in zip(steps["start_ns"][order], steps["end_ns"][order])]
    losses = [float(x) for x in steps["loss"][order]]
    if not times:
        return f"incomplete: rank 0 recorded no step in {EVENTS}"
    if not math.isfinite(losses[-1]):
        if isinstance(steps["loss_nonfinite"][order][-1], str):  # the loop set it: the run diverged
            return f"diverged: rank 0's last step's loss is {losses[-1]}"
        return "incomplete: rank 0's last step has no loss (set st.loss in rec.step)"
    meta = _rank0_meta(path)
    world = meta.get("world_size")
    return RunResult(path, "run", math.fsum(times) / 1000.0, losses[-1], len(times),
                     _work(path, {"world_size": world if isinstance(world, int) else len(ranks)}, meta),
                     _fingerprint(repr((times, losses)).encode()))


def _rank0_meta(path: Path) -> dict:
    """Rank 0's meta.json, {} where it is missing or unreadable (its fields are optional to readers)."""
    from commscope.load.rundir import read_meta

    try:
        return read_meta(str(path / rank_dir_name(0))) or {}
    except UserError:
        return {}


def _work(path: Path, summary: dict, meta: dict | None = None) -> dict:
    """WORK_KEYS of a run directory: config.json's `args` (a run without a readable one, e.g. recorded by
    another script through commscope.record, has None there), summary.json's world size and rank 0's
    meta.json (`meta`, where the caller has read it already)."""
    try:
        args = read_json(str(path / CONFIG)).get("args") if (path / CONFIG).exists() else None
    except (UserError, AttributeError):  # unreadable, or not an object: the work is unknown, not an error
        args = None
    args = args if isinstance(args, dict) else {}
    work = {k: summary.get("world_size") if k == "world_size" else args.get(k) for k in WORK_KEYS}
    # the profiler's steps are in Time (its start and trace export take seconds): the window the recorder
    # was given (meta.json, "START:STOP" however it was asked for), else `commscope run`'s --profile, else
    # whether rank 0 left a profiler trace (a recording whose meta.json predates the field)
    window = (_rank0_meta(path) if meta is None else meta).get("profile_steps")
    work["profile"] = (window if isinstance(window, str) else args.get("profile") or (
        "a profiler window" if (path / rank_dir_name(0) / KINETO_TRACE).exists() else "none"))
    return work


def _mixed_jobs(path: Path) -> str | None:
    """Why the run directory `path` is no run of one job (commscope.load.one_job: rank folders of different
    runs), or None. A meta.json that cannot be read is left to the readers that need it."""
    from commscope.load.one_job import check_one_job
    from commscope.load.rundir import read_meta

    metas = {}
    for r, d in rank_dirs(str(path)).items():
        try:
            meta = read_meta(d)
        except UserError:
            continue
        if meta is not None:
            metas[r] = meta
    try:
        check_one_job(str(path), metas)
    except UserError as e:
        return f"mixed: {e}"
    return None


def load_group(path: str | Path) -> Group:
    """Collect every run in a folder. The folder may itself be a single run directory."""
    path = Path(path)
    if not path.exists():  # the wording every command uses for a missing path
        raise Missing(path)
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (expected a folder of runs or logs)")
    group = Group(path.resolve().name, path)
    if (path / SUMMARY).exists() or rank_dirs(str(path)):
        entries = [path]
    else:
        entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
    seen: dict[str, Path] = {}
    for entry in entries:
        if entry.is_dir():
            if (entry / SUMMARY).exists():
                res = _read_run_dir(entry)
            elif rank_dirs(str(entry)):
                res = _read_recorded_run(entry)
            else:
                inner = any(p.suffix in LOG_SUFFIXES or (p / SUMMARY).exists()
                            for p in map(entry.joinpath, entry_names(entry)))
                group.skipped.append((entry, f"not a run: no {SUMMARY} and no rank folders" + (
                    "; runs or logs one level down in it: give that folder" if inner else "")))
                continue
        elif entry.suffix in LOG_SUFFIXES:
            log = parse_log(entry)
            # a log's measurements are its final validation: the same steps, loss and time to the printed
            # digits are a copy (re-saved with another line ending, trimmed to its step lines), not a rerun
            res = (RunResult(entry, "log", log.train_time_s, log.val_loss, fingerprint=_fingerprint(repr(
                ("log", log.total_steps, log.val_loss, log.train_time_s)).encode())) if log.complete else log.problem)
        else:
            continue  # not a run: ignore (e.g. a README next to the logs)
        if not isinstance(res, str) and res.kind == "run":
            res = _mixed_jobs(entry) or res
        if isinstance(res, str):
            group.skipped.append((entry, res))
        elif (first := seen.get(res.fingerprint)) is not None:
            group.skipped.append((entry, f"a copy of {first.name} (the same measurements): counted once"))
        else:
            seen[res.fingerprint] = entry
            group.runs.append(res)
    if not group.runs:
        why = "; ".join(f"{p.name}: {r}" for p, r in group.skipped) or "no run directories or *.txt/*.log logs"
        if not group.skipped and any(p.name.endswith((".json", ".json.gz")) for p in entries if p.is_file()):
            why += "; compare reads runs, not profiler traces: `commscope report` reads a folder of traces"
        raise UserError(f"{path}: no usable runs ({why})")
    return group


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_KIND_NAMES = {"log": "modded-nanogpt logs", "run": "commscope run directories"}


def check_one_kind(groups: list[Group]) -> None:
    """UserError unless every usable run of every group is of one kind: a log's time is a whole training run
    to the target loss, a run directory's its summed step times, so a mean or a difference over both
    compares different quantities."""
    kinds = {g.name: sorted({r.kind for r in g.runs}) for g in groups}
    for g in groups:
        if len(kinds[g.name]) > 1:
            n = {k: sum(r.kind == k for r in g.runs) for k in kinds[g.name]}
            raise UserError(f"{g.path} holds {counted(n['log'], 'modded-nanogpt log')} and "
                            f"{counted(n['run'], 'commscope run')}: a log's time is a training run to "
                            "the target loss, a run directory's its summed step times, so their mean means "
                            "nothing; compare folders of one kind")
    if len({tuple(k) for k in kinds.values()}) > 1:
        said = ", ".join(f"{g.name}: {_KIND_NAMES[kinds[g.name][0]]}" for g in groups)
        raise UserError(f"the groups hold runs of different kinds ({said}): a log's time is a training run to "
                        "the target loss, a run directory's its summed step times; compare folders of one kind")


def unique_names(groups: list[Group]) -> list[Group]:
    """Rename groups in place so no two share a name: a shared name gains parent folders (`a/r1`,
    `b/r1`) until it is unique, or, for the same folder given twice, `#2`, `#3`, … ."""
    from collections import Counter

    for depth in range(1, 8):
        counts = Counter(g.name for g in groups)
        # only groups in different folders can be told apart by their parents
        dup = [g for g in groups if counts[g.name] > 1 and
               len({h.path.resolve() for h in groups if h.name == g.name}) > 1]
        if not dup:
            break
        for g in dup:
            parts = [p for p in g.path.resolve().parts if p != "/"]
            g.name = "/".join(parts[-(depth + 1):])
    seen: Counter = Counter()
    for g in groups:
        seen[g.name] += 1
        if seen[g.name] > 1:
            g.name = f"{g.name}#{seen[g.name]}"
    return groups
