"""alpha_lpt's hill-climb (commscope.plan.alpha._refine) is bounded: its result is a valid slicing that is
no worse than where it started, a tiny work budget still ends it, and a world size of thousands plans in
seconds (it took minutes at 1000 ranks when every move re-scored every rank)."""
from __future__ import annotations

import random
import time
from itertools import accumulate

from commscope.plan import alpha
from commscope.plan.matrices import matrices_for_config


def score(loads, prefix, cuts):
    tot = [a + b for a, b in zip(loads, alpha._slice_loads(prefix, cuts, len(loads)))]
    return max(tot), sum(x * x for x in tot)


def test_refine_improves_and_stays_valid_for_any_budget():
    rng = random.Random(3)
    for _ in range(40):
        ranks, n = rng.randint(2, 12), rng.randint(1, 40)
        prefix = [0.0, *accumulate(float(rng.randint(0, 9)) for _ in range(n))]
        loads = [float(rng.randint(0, 30)) for _ in range(ranks)]
        start = sorted(rng.randint(0, n) for _ in range(ranks - 1))
        for budget in (1, 50, alpha.WORK_BUDGET):
            cuts = alpha._refine(loads, prefix, start, budget=budget)
            assert all(0 <= a <= b <= n for a, b in zip([0, *cuts], [*cuts, n]))
            assert score(loads, prefix, cuts) <= score(loads, prefix, start)


def test_a_long_imbalance_is_carried_across_ranks():
    """All the work on the last rank's slice: only runs of cuts moving together can spread it."""
    prefix = [0.0, *accumulate([1.0] * 16)]
    cuts = alpha._refine([0.0] * 4, prefix, [0, 0, 0])
    assert alpha._slice_loads(prefix, cuts, 4) == [4.0, 4.0, 4.0, 4.0]


def test_thousands_of_ranks_plan_in_seconds():
    from instrumented_model.config import make_config

    ms = matrices_for_config(make_config("speedrun", 4096, check_shards=False))
    costs = {m.index: float(m.numel) for m in ms}
    t = time.perf_counter()
    a = alpha.alpha_lpt(ms, 4096, costs)
    assert time.perf_counter() - t < 30
    assert set(a.owner) == {m.index for m in ms if not m.padding}


def test_the_terminal_shows_the_ends_of_a_large_worlds_range_not_a_bar_per_rank(capsys):
    """A bar per rank of 16,384 ranks was 81,937 lines: above BARS_ALL_RANKS a strategy's chart shows its
    slowest and fastest ranks (by time, then rank), with how many are left out; --json keeps every rank."""
    import json

    from cli_result import run_main
    from reports.plan_terminal import BARS_ALL_RANKS, BARS_EACH_END

    code, cap = run_main(capsys, "plan", "--preset", "speedrun", "--world-size", "128")
    assert code == 0 and len(cap.out.splitlines()) < 150
    lines = cap.out.splitlines()
    start = next(i for i, ln in enumerate(lines)
                 if ln.strip().startswith("round_robin: optimizer time (ms) of the 8 slowest"))
    rows = [ln.split() for ln in lines[start + 2: start + 2 + 2 * BARS_EACH_END + 1]]
    code, cap = run_main(capsys, "plan", "--preset", "speedrun", "--world-size", "128", "--json")
    ms = json.loads(cap.out)["strategies"]["round_robin"]["per_rank_ms"]
    by_time = sorted(range(128), key=lambda r: (-ms[r], r))
    assert [int(r[1]) for r in rows[:BARS_EACH_END]] == by_time[:BARS_EACH_END]
    assert rows[BARS_EACH_END][:3] == ["…", "112", "more"]
    assert [int(r[1]) for r in rows[BARS_EACH_END + 1:]] == by_time[-BARS_EACH_END:]
    code, cap = run_main(capsys, "plan", "--preset", "speedrun", "--world-size", str(BARS_ALL_RANKS), "--json")
    strategies = len(json.loads(cap.out)["strategies"])
    code, cap = run_main(capsys, "plan", "--preset", "speedrun", "--world-size", str(BARS_ALL_RANKS))
    assert sum(ln.strip().startswith("rank ") for ln in cap.out.splitlines()) == strategies * BARS_ALL_RANKS
