"""Statistical A/B comparison of groups of training runs, in the speedrun record's table style.

A *group* is a folder of runs: commscope run directories (sub-folders with summary.json) and/or
modded-nanogpt logs (*.txt, *.log). Each usable run contributes one (time, loss) pair:
- log: time = final `train_time` in seconds, loss = final `val_loss` (commscope.logs);
- run dir: time = total train time = sum(step_times_ms) / 1000 s, loss = the last step's loss.
Runs that did not finish are listed in `Group.skipped` with the reason and never used.

Statistics (scipy.stats), per group, with the first group as baseline:
- Time σ / Loss σ: sample standard deviation (ddof=1);
- +/-: group mean minus baseline mean (from unrounded means);
- Time p: Welch two-sample t-test, one-sided, alternative "candidate faster" (NaN for the baseline);
- p: one-sample t-test of the losses, one-sided, alternative "mean loss < target".
`slower_p` (Welch, alternative "candidate slower") backs `--fail-if-slower`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pandas as pd

from commscope.errors import UserError
from commscope.logs import parse_log

LOG_SUFFIXES = (".txt", ".log")
DEFAULT_TARGET_LOSS = 3.28


@dataclass(frozen=True)
class RunResult:
    path: Path
    kind: str  # "log" | "run"
    time_s: float
    loss: float


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
    """One commscope run directory → its result, or the reason it cannot be used."""
    try:
        summary = orjson.loads((path / "summary.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        return f"unreadable summary.json: {e}"
    if not isinstance(summary, dict):
        return "summary.json is not an object"
    status = summary.get("status")
    if status != "completed":
        return f"incomplete: status {status!r}"
    times, losses = summary.get("step_times_ms") or [], summary.get("losses") or []
    if not times or not losses:
        return "incomplete: no finished steps in summary.json"
    try:
        loss = float(losses[-1])
        time_s = sum(float(t) for t in times) / 1000.0
    except (TypeError, ValueError):
        return "garbled: non-numeric losses/step_times_ms"
    if not math.isfinite(loss):
        return "incomplete: last loss is not finite"
    return RunResult(path, "run", time_s, loss)


def load_group(path: str | Path) -> Group:
    """Collect every run in a folder. The folder may itself be a single run directory."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (expected a folder of runs or logs)")
    group = Group(path.resolve().name, path)
    if (path / "summary.json").exists():
        entries = [path]
    else:
        entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
    for entry in entries:
        if entry.is_dir():
            if not (entry / "summary.json").exists():
                group.skipped.append((entry, "incomplete: no summary.json (run never finished?)"))
                continue
            res = _read_run_dir(entry)
        elif entry.suffix in LOG_SUFFIXES:
            log = parse_log(entry)
            res = (RunResult(entry, "log", log.train_time_s, log.val_loss) if log.complete
                   else log.problem)
        else:
            continue  # not a run: ignore (e.g. a README next to the logs)
        if isinstance(res, str):
            group.skipped.append((entry, res))
        else:
            group.runs.append(res)
    if not group.runs:
        why = "; ".join(f"{p.name}: {r}" for p, r in group.skipped) or "no run directories or *.txt/*.log logs"
        raise UserError(f"{path}: no usable runs ({why})")
    return group


def _mean_std(xs: list[float]) -> tuple[float, float]:
    # statistics.mean/stdev are exact (rational arithmetic) before the final rounding, so a mean that
    # sits on a printed rounding boundary (132.72175) rounds as the true value does, not as float
    # summation order happens to leave it.
    return statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else math.nan


def _stats():
    """scipy.stats, imported on first use: it costs ~0.5 s, which every other CLI command would pay."""
    from scipy import stats

    return stats


def _welch(a: list[float], b: list[float], alternative: str) -> float:
    """p of Welch's t-test of mean(a) vs mean(b); NaN when either side has fewer than 2 runs."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(_stats().ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue)


def compare_groups(groups: list[Group], target_loss: float = DEFAULT_TARGET_LOSS) -> pd.DataFrame:
    """The record-style table: one row per group (first = baseline), every number unrounded."""
    if not groups:
        raise UserError("nothing to compare")
    base = groups[0]
    base_t, _ = _mean_std(base.times)
    base_l, _ = _mean_std(base.losses)
    rows = []
    for i, g in enumerate(groups):
        t_mu, t_sd = _mean_std(g.times)
        l_mu, l_sd = _mean_std(g.losses)
        loss_p = (float(_stats().ttest_1samp(g.losses, target_loss, alternative="less").pvalue)
                  if len(g.losses) > 1 else math.nan)
        rows.append({
            "name": g.name, "runs": len(g.runs),
            "time_mean": t_mu, "time_std": t_sd, "time_delta": t_mu - base_t,
            "time_p": math.nan if i == 0 else _welch(g.times, base.times, "less"),
            "slower_p": math.nan if i == 0 else _welch(g.times, base.times, "greater"),
            "loss_mean": l_mu, "loss_std": l_sd, "loss_delta": l_mu - base_l, "loss_p": loss_p,
        })
    return pd.DataFrame(rows)


def slower_candidates(table: pd.DataFrame, significance: float) -> list[str]:
    """Candidates whose time is larger than the baseline's at the given significance (Welch, one-sided)."""
    cands = table.iloc[1:]
    return list(cands.loc[cands["slower_p"] < significance, "name"])
