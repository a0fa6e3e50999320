"""loader._pair (collectives of a partial Kineto trace set whose (group, seq) peers disagree are left
unpaired) decides on the distinct signatures and their counts: the same as comparing every pair of
members, which this test does by brute force."""
import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from commscope.load import loader

SIG = st.tuples(st.sampled_from(["all_reduce", "all_gather", "all_to_all"]), st.sampled_from([8.0, 16.0, np.nan]),
                st.sampled_from(["float", "bf16", None, "TensorList"]))


def brute_force_unpaired(c: pd.DataFrame) -> np.ndarray:
    """The rule over every pair of members of each (group, seq): the minority (or all, on a tie of the
    best-supported signatures) of a key whose members do not all agree is unpaired."""
    out = np.zeros(len(c), dtype=bool)
    for _, g in c.groupby(["group", "seq"], sort=False):
        rows = g.index.to_numpy()
        if len(rows) < 2:
            continue
        sig = [(o, None if np.isnan(b) or o == "all_to_all" else float(b),
                d if isinstance(d, str) and d and d != "TensorList" else None)
               for o, b, d in zip(g["op"], g["bytes"], g["dtype"])]
        if all(loader._agree(a, b) for a in sig for b in sig):
            continue
        support = [sum(loader._agree(a, b) for b in sig) for a in sig]
        best = max(support)
        keep = sig[support.index(best)] if len({sig[i] for i, n in enumerate(support) if n == best}) == 1 else None
        for i, s in zip(rows, sig):
            out[i] = keep is None or not loader._agree(keep, s)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0", "1"]), st.integers(0, 2), SIG), min_size=2, max_size=14))
def test_unpaired_members_are_those_of_the_all_pairs_rule(members):
    c = pd.DataFrame({"rank": [i % 4 for i in range(len(members))], "group": [m[0] for m in members],
                      "seq": [m[1] for m in members], "op": [m[2][0] for m in members],
                      "bytes": [m[2][1] for m in members], "dtype": [m[2][2] for m in members]})
    problems: list[str] = []
    out = loader._pair(c, problems)
    unpaired = out["group"].astype(str).str.contains(" (unpaired, rank ", regex=False).to_numpy()
    want = brute_force_unpaired(c) if c["rank"].nunique() >= 2 else np.zeros(len(c), dtype=bool)
    assert unpaired.tolist() == want.tolist()
    assert bool(problems) == bool(want.any())


def test_the_examples_give_an_all_to_all_its_recorded_size():
    """all_to_all's size is not compared (each rank may send different amounts), but the example says
    the size each rank recorded, and "unknown size" only where none was."""
    c = pd.DataFrame({"rank": [0, 1, 0, 1], "group": ["0"] * 4, "seq": [0, 0, 1, 1],
                      "op": ["all_to_all", "all_to_all", "all_to_all", "all_reduce"],
                      "bytes": [3072.0, 339738624.0, np.nan, 8.0], "dtype": ["long", "unsigned char", None, "float"]})
    problems: list[str] = []
    loader._pair(c, problems)
    assert len(problems) == 1
    assert ("group 0 seq 0 (rank 0: all_to_all (3072 B, long), rank 1: all_to_all (339738624 B, unsigned char))"
            in problems[0])
    assert "group 0 seq 1 (rank 0: all_to_all (unknown size), rank 1: all_reduce (8 B, float))" in problems[0]
