"""Statistical A/B comparison of groups of training runs, in the speedrun record's table style.

Input: `Group`s of (time, loss) pairs, one per usable run (`commscope.load.run_groups`). Statistics
(scipy.stats), per group, with the first group as baseline:
- Time σ / Loss σ: sample standard deviation (ddof=1);
- +/-: group mean minus baseline mean (from unrounded means);
- Time p: Welch two-sample t-test, one-sided, alternative "candidate faster" (NaN for the baseline);
- p: one-sample t-test of the losses, one-sided, alternative "mean loss < target".
A test is undefined, and its p NaN, with fewer than 2 runs on a side or no spread at all (identical
losses; identical times on both sides): t would be ±inf and p an artefact of 0/0, not evidence. Values
identical to within float precision (`_flat`: every value within 10 ε of the mean, scipy's own test for
catastrophic cancellation) count as no spread: the variance scipy computes from them is rounding noise.
One function decides whether a test is undefined and why (`undefined_test`); the p and
`precision_warnings(groups)`, which names the tests left undefined by float rounding (the exactly
identical case needs no sentence), both follow it. scipy's own warning about it is not printed.
`slower_p` (Welch, alternative "candidate slower") backs `--fail-if-slower`.

`comparability_warnings(groups)`: why the table may compare unlike runs. Time is a run's summed step time,
so run directories of different step counts, or of a different preset, batch size, gradient accumulation,
world size or profiler window (run_groups.WORK_KEYS), differ in work, not only in speed: each such difference, between the
groups or among one group's runs, is one sentence. Speedrun logs are not checked: their time is to a
target loss, where fewer steps is an improvement the loss test guards.
"""
from __future__ import annotations

import math
import statistics
import sys
import warnings
from typing import TYPE_CHECKING

from commscope.errors import UserError
from commscope.load.run_groups import WORK_KEYS, Group
from commscope.util.text import counted

# The per-label CIs' minimum evidence (commscope.analyze.compare_labels): defined here, where the command
# layer can read it without importing numpy and scipy for `--help`.
MIN_RUNS = 5  # per side, for a CI


if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TARGET_LOSS = 3.28


def _mean_std(xs: list[float]) -> tuple[float, float]:
    # statistics.mean/stdev are exact (rational arithmetic) before the final rounding, so a mean that
    # sits on a printed rounding boundary (132.72175) rounds as the true value does, not as float
    # summation order happens to leave it.
    return statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else math.nan


def _stats():
    """scipy.stats, imported on first use: it costs ~0.5 s, which every other CLI command would pay."""
    from scipy import stats

    return stats


# scipy.stats' warning for data within float precision of their mean; `_flat` decides what it means here
_PRECISION_LOSS = "Precision loss occurred in moment calculation"


def _flat(xs: list[float]) -> bool:
    """Whether every value lies within float precision of the mean (scipy's test: 10 ε of |mean|): no
    spread that a variance computed in floats can tell from rounding."""
    mean = sum(xs) / len(xs)
    return max(abs(x - mean) for x in xs) <= 10 * sys.float_info.epsilon * abs(mean)


def quiet_test(test):
    """`test()` without scipy's precision-loss warning (callers have ruled out the case it matters for), nor
    numpy's overflow warning for a statistic beyond float range (a --target-loss of -1e308): the p-value is
    then its limit, 0 or 1, which is the answer."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PRECISION_LOSS, category=RuntimeWarning)
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        return test()


# Why a t-test is left undefined (`undefined_test`): one decision, which both the p (NaN) and
# precision_warnings' sentence follow.
TOO_FEW_RUNS = "too few runs"      # fewer than 2 runs on a side
NO_SPREAD = "no spread"            # every value exactly identical, on every side
ROUNDING = "float rounding"        # values that differ only within float precision (`_flat`)


def undefined_test(*sides: list[float]) -> str | None:
    """Why a t-test of `sides` (one sample, or Welch's two) is undefined: TOO_FEW_RUNS, NO_SPREAD or
    ROUNDING; None when it is defined. Welch's test needs a spread on at least one side, so it is
    undefined only when every side is flat."""
    if any(len(xs) < 2 for xs in sides):
        return TOO_FEW_RUNS
    if not all(_flat(xs) for xs in sides):
        return None
    return NO_SPREAD if all(statistics.stdev(xs) == 0 for xs in sides) else ROUNDING


def _welch(a: list[float], b: list[float], alternative: str) -> float:
    """p of Welch's t-test of mean(a) vs mean(b); NaN when `undefined_test(a, b)` says why."""
    if undefined_test(a, b):
        return math.nan
    return float(quiet_test(lambda: _stats().ttest_ind(a, b, equal_var=False, alternative=alternative)).pvalue)


def _loss_p(losses: list[float], target: float) -> float:
    """One-sample t-test p (module docstring); NaN when `undefined_test(losses)` says why."""
    if undefined_test(losses):
        return math.nan
    return float(quiet_test(lambda: _stats().ttest_1samp(losses, target, alternative="less")).pvalue)


def precision_warnings(groups: list[Group]) -> list[str]:
    """One sentence per test that `undefined_test` leaves undefined for ROUNDING (values that differ only
    by float rounding, not exactly identical): the table's empty p is then explained, not mistaken for
    missing runs."""
    out = []
    base = groups[0] if groups else None
    for i, g in enumerate(groups):
        if i and undefined_test(g.times, base.times) == ROUNDING:
            out.append(f"the times of {g.name} and {base.name} differ only by float rounding within each group: "
                       "Time p is left out (a t-test on rounding noise is not evidence).")
        if undefined_test(g.losses) == ROUNDING:
            out.append(f"the losses of {g.name} differ only by float rounding: its loss p is left out (a t-test "
                       "on rounding noise is not evidence).")
    return out


def compare_groups(groups: list[Group], target_loss: float = DEFAULT_TARGET_LOSS) -> pd.DataFrame:
    """The record-style table: one row per group (first = baseline), every number unrounded."""
    import pandas as pd  # here, not at the top: the CLI reads this module's default without pandas

    if not groups:
        raise UserError("nothing to compare")
    base = groups[0]
    base_t, _ = _mean_std(base.times)
    base_l, _ = _mean_std(base.losses)
    rows = []
    for i, g in enumerate(groups):
        t_mu, t_sd = _mean_std(g.times)
        l_mu, l_sd = _mean_std(g.losses)
        loss_p = _loss_p(g.losses, target_loss)
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


def _values(runs, get) -> list:
    """The distinct values of `get(run)` over `runs`, in first-seen order ("unknown" for None)."""
    return list(dict.fromkeys("unknown" if get(r) is None else get(r) for r in runs))


def comparability_warnings(groups: list[Group]) -> list[str]:
    """Why the groups' times may not compare like for like (module docstring); empty when they do."""
    out = []
    where: dict[str, list[str]] = {}  # a run's fingerprint → the groups holding it
    for g in groups:
        for r in g.runs:
            where.setdefault(r.fingerprint, []).append(g.name)
    shared = [names for fp, names in where.items() if fp and len(names) > 1]
    if shared:
        out.append(f"{counted(len(shared), 'run')} {'appears' if len(shared) == 1 else 'appear'} in more than one "
                   "group (copies: the same measurements, "
                   f"e.g. in {', '.join(shared[0])}): the groups share samples, so their difference is understated.")
    checks = [("step count", lambda r: r.steps)] + [(k.replace("_", " "), (lambda k: lambda r: r.work.get(k))(k))
                                                    for k in WORK_KEYS]
    runs = {g.name: [r for r in g.runs if r.kind == "run"] for g in groups}
    if not all(runs.values()):
        return out  # logs on a side: nothing to check them against
    for what, get in checks:
        per_group = {name: _values(rs, get) for name, rs in runs.items()}
        for name, vals in per_group.items():
            if len(vals) > 1:
                out.append(f"the runs of {name} differ in {what} ({', '.join(map(str, vals))}): its Time mixes "
                           "unlike runs.")
        ones = {name: vals[0] for name, vals in per_group.items() if len(vals) == 1}
        if len(set(map(str, ones.values()))) > 1 and set(ones.values()) != {"unknown"}:
            said = ", ".join(f"{name} {v}" for name, v in ones.items())
            hint = {"step count": " (Time is the sum of step times)",
                    "profile": " (Time includes the profiler's steps: its start and trace export take seconds)"
                    }.get(what, "")
            # the per-label rows are per-step means that leave the profiler's steps out: a step count or a
            # profiler window changes Time alone, the work of a step (its size, its ranks) every row
            rows = ("Time +/- compares" if what in ("step count", "profile")
                    else "Time +/- and per-label rows compare")
            out.append(f"the groups differ in {what}: {said}; their {rows} different work{hint}.")
    return out
