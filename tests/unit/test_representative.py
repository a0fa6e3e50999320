"""analyze.representative: which ranks a large job's report shows first, and why."""
from __future__ import annotations

import pandas as pd

from commscope.analyze.representative import representative_ranks


def _strag(rows):
    return pd.DataFrame(rows, columns=["rank", "times_last", "last_share", "wait_caused_ns", "score"])


def _breakdown(per_rank: dict[int, tuple[float, float]]):
    # two steps per rank, splitting each rank's totals in half
    return pd.DataFrame([(r, s, st / 2, ex / 2) for r, (st, ex) in per_rank.items() for s in (0, 1)],
                        columns=["rank", "step", "step_ns", "exposed_comm_ns"])


def test_stragglers_first_then_most_exposed_median_and_fastest():
    strag = _strag([(5, 3, 0.3, 9e6, 0.9), (2, 1, 0.1, 1e6, 0.1), (0, 0, 0.0, 0.0, 0.0)])
    br = _breakdown({0: (100e6, 10e6), 1: (90e6, 30e6), 2: (110e6, 5e6), 3: (95e6, 1e6), 5: (120e6, 2e6)})
    reps = representative_ranks(strag, br, [0, 1, 2, 3, 5])
    assert [r["rank"] for r in reps] == [5, 2, 1, 0]
    assert reps[0]["why"] == ["made the others wait 9.0 ms (last 3×)"]
    # rank 1 is both the most exposed and the fastest: one entry, both reasons, in order
    assert reps[2]["why"] == ["most exposed communication (30.0 ms)", "least total step time (90.0 ms)"]
    assert reps[3]["why"] == ["median total step time (100.0 ms)"]  # of 90, 95, 100, 110, 120


def test_a_job_without_steps_or_waiting_gets_its_lowest_rank():
    reps = representative_ranks(_strag([]), _breakdown({}), [3, 7])
    assert reps == [{"rank": 3, "why": ["lowest rank"]}]


def test_at_most_most_ranks():
    strag = _strag([(r, 1, 0.1, (10 - r) * 1e6, 0.1) for r in range(8)])
    br = _breakdown({r: (100e6 + r, 1e6 * r) for r in range(8)})
    reps = representative_ranks(strag, br, list(range(8)), most=3)
    assert [r["rank"] for r in reps] == [0, 1, 2]  # the three worst stragglers fill it


def test_the_doctors_culprits_lead_each_once():
    from commscope.analyze.representative import with_culprits

    reps = [{"rank": 5, "why": ["made the others wait 3.0 ms (last 2×)"]}, {"rank": 7, "why": ["median total step time"]}]
    assert with_culprits(reps, "hang", [7, 900]) == [
        {"rank": 7, "why": ["the doctor's hang culprit", "median total step time"]},
        {"rank": 900, "why": ["the doctor's hang culprit"]},
        {"rank": 5, "why": ["made the others wait 3.0 ms (last 2×)"]}]
    assert [r["rank"] for r in with_culprits(reps, "crash", list(range(20)), most=4)] == [0, 1, 2, 3]
    assert with_culprits(reps, "ok", []) == reps


def test_a_median_tied_with_the_least_is_one_rank_with_both_reasons():
    """Half the ranks alike (even ranks 100 ms, odd ranks 120 ms): the lower median is one of the fastest,
    so a 'median' rank beside a 'least' one of the same time would be picked for nothing."""
    br = _breakdown({r: (100e6 if r % 2 == 0 else 120e6, 1e6 * (r + 1)) for r in range(8)})
    reps = representative_ranks(_strag([]), br, list(range(8)))
    assert reps == [{"rank": 7, "why": ["most exposed communication (8.0 ms)"]},
                    {"rank": 0, "why": ["least and median total step time (100.0 ms)"]}]


def test_the_gaps_between_steps_count_toward_a_ranks_step_time():
    """On a GPU trace a rank whose device idles between steps has short step windows: with the gaps it is
    no longer the fastest. The profiler's own boundaries (`excluded`) do not count."""
    br = _breakdown({0: (100e6, 0.0), 1: (96e6, 0.0), 2: (98e6, 0.0)})
    gaps = pd.DataFrame({"rank": [0, 1, 2, 2], "step": [1, 1, 1, 1], "gap_ns": [0.5e6, 6e6, 0.5e6, 50e6],
                         "excluded": [None, None, None, "profiler export"]})
    reps = representative_ranks(_strag([]), br, [0, 1, 2], gaps=gaps)
    # totals: rank 0 100.5, rank 1 96 + 6 = 102, rank 2 98 + 0.5 (its 50 ms export gap left out) = 98.5
    assert reps == [{"rank": 0, "why": ["median total step time (100.5 ms, the gaps between steps included)"]},
                    {"rank": 2, "why": ["least total step time (98.5 ms, the gaps between steps included)"]}]
    # without them rank 1 (96 ms of windows) is the fastest
    assert representative_ranks(_strag([]), br, [0, 1, 2])[1] == {"rank": 1, "why": ["least total step time (96.0 ms)"]}
