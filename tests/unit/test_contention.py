"""SM contention is charged only where the evidence separates it from waiting for peers."""
from __future__ import annotations

import pandas as pd
import pytest

from commscope.analyze.contention import DeviceLimits, find_sm_contention
from commscope.load.frames import frame

BIG = "void at::native::elementwise_kernel<128, 4, add>(int)"
LIM = DeviceLimits(num_sms=132)


def _kernel(name, rank, start, dur, stream, comm=False, grid=150912):
    return {"rank": rank, "name": name, "stream": stream, "start_ns": start, "end_ns": start + dur,
            "correlation": 0, "external_id": 0, "grid": [grid, 1, 1], "block": [128, 1, 1], "is_comm": comm}


def frames(ranks=(0, 1), late_peer_ns=0, alone_on=(0, 1)):
    """A 4 MB reduce_scatter of group "0" (size 2) in steps 0..3, ~100 µs when alone; in step 3 rank 0's
    kernel runs 260 µs while an SM-filling kernel overlaps it, and rank 1 arrives `late_peer_ns` after it.
    Steps 0..2 overlap nothing only on the ranks in `alone_on` (elsewhere the big kernel overlaps too)."""
    colls, kernels = [], []
    for rank in ranks:
        for step in range(4):
            t = step * 1_000_000
            start, dur = t, 100_000
            if step == 3:
                start, dur = (t, 260_000) if rank == 0 else (t + late_peer_ns, 260_000 - late_peer_ns)
            colls.append({"rank": rank, "step": step, "label": "lm_head", "phase": "reduce", "op": "reduce_scatter",
                          "bytes": 4 << 20, "group": "0", "group_size": 2, "seq": step, "start_ns": start,
                          "end_ns": start + dur, "stream": 20})
            if step == 3 or rank not in alone_on:
                kernels.append(_kernel(BIG, rank, t + 10_000, 250_000 if step == 3 else 90_000, stream=7))
    return frame("collectives", pd.DataFrame(colls)), frame("kernels", pd.DataFrame(kernels))


def test_same_rank_alone_runs_separate_it():
    c = find_sm_contention(*frames(), LIM)
    r = c[c["rank"] == 0].iloc[0]
    assert bool(r["separable"]) and r["evidence"] == "same rank alone; peer wait removed"
    assert r["peer_wait_us"] == 0 and r["attributable_us"] == pytest.approx(160.0)


def test_a_late_peer_explains_the_extra_time():
    """Rank 1 arrived 160 µs after rank 0: rank 0's kernel was waiting, not slowed; nothing is charged."""
    c = find_sm_contention(*frames(late_peer_ns=160_000), LIM)
    assert c[c["rank"] == 0].empty


def test_one_rank_without_alone_runs_is_not_separable():
    """Only rank 0 of the group is in the trace and it never ran the collective alone; rank 1's alone
    runs do not tell whether rank 0 waited for a peer."""
    colls, kernels = frames(alone_on=(1,))
    colls = colls[~((colls["rank"] == 1) & (colls["step"] == 3))]
    c = find_sm_contention(colls, kernels, LIM)
    r = c[c["rank"] == 0].iloc[0]
    assert not r["separable"] and pd.isna(r["attributable_us"])
    assert r["evidence"] == "not separable: 1 of 2 ranks of its group in the trace, and rank 0 never ran it alone"
    assert r["inflation"] == pytest.approx(2.6)


def test_all_ranks_with_arrivals_separate_it_from_other_ranks_alone_runs():
    c = find_sm_contention(*frames(alone_on=(1,), late_peer_ns=60_000), LIM)
    r = c[c["rank"] == 0].iloc[0]
    assert bool(r["separable"]) and r["evidence"] == "arrivals known; alone on other ranks"
    assert r["peer_wait_us"] == pytest.approx(60.0)
    assert r["attributable_us"] == pytest.approx(100.0)  # 260 − 60 waiting − 100 alone
