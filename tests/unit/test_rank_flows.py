"""At scale the page's compact rows (reports.timeline_ranks) carry every rank's flow points, so a rank the
selector adds joins the lines linking one collective call across ranks: drawn as report.js draws them
(per flow, the points of the drawn ranks and the chosen one, in rank order), they are the lines
reports.timeline draws for TimelineBars.subset(drawn + [rank]), to the packing unit.
Input: a generated 40-rank job (tests/scale_jobs.py) in the test's temporary folder."""
from __future__ import annotations

import numpy as np

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from reports.page import render_html
from reports.timeline_ranks import UNIT_NS
from scale_jobs import scale_job
from test_report_scale import data


def points(doc: dict, rank: int) -> list[tuple[int, int]]:
    """(flow id, start in units) of `rank`, decoded from the page's `flows` block."""
    fl, i = doc["flows"], doc["ranks"].index(rank)
    lo = sum(fl["n"][:i])
    n = fl["n"][i]
    return list(zip(np.cumsum(fl["f"][lo:lo + n]).tolist(), np.cumsum(fl["t"][lo:lo + n]).tolist()))


def lines(doc: dict, ranks: list[int]) -> list[list[tuple[int, int, int]]]:
    """report.js csFlowLines: per flow (by id) with two or more points among `ranks`, its (rank, flow, t)
    in rank order."""
    by: dict[int, list] = {}
    for r in ranks:
        for f, t in points(doc, r):
            by.setdefault(f, []).append((r, f, t))
    return [sorted(m) for f, m in sorted(by.items()) if len(m) >= 2]


def test_a_chosen_rank_gets_the_flow_lines_of_the_drawn_ranks(tmp_path):
    tr = load_path(scale_job(tmp_path, ranks=40, straggler=29)["job"])
    ctx = report_context(tr, summarize(tr, with_hta=False))
    doc = data(render_html(ctx), "rank-rows-gz")
    flows = ctx.timeline.flows
    assert len(flows) and set(flows["rank"]) == set(range(40))
    # every rank's points, exactly the flows frame's (ids), its start times to the unit
    for r in range(40):
        f = flows[flows["rank"] == r].sort_values("flow")
        assert points(doc, r) == list(zip(f["flow"].astype(int).tolist(),
                                          np.rint(f["t"].to_numpy() / UNIT_NS).astype(int).tolist()))
    assert sum(doc["flows"]["n"]) == len(flows)
    drawn = [rb.rank for rb in ctx.drawn.ranks]
    # the drawn ranks' own lines are the figure's
    want = ctx.drawn.flows
    got = lines(doc, drawn)
    assert [(r, f) for m in got for r, f, _ in m] == list(zip(want["rank"].astype(int), want["flow"].astype(int)))
    others = [r for r in range(40) if r not in drawn]
    for chosen in (others[0], others[len(others) // 2], others[-1]):  # first, inside, last in rank order
        sub = ctx.timeline.subset(drawn + [chosen]).flows  # what the figure would draw with it among them
        got = lines(doc, drawn + [chosen])
        assert [(r, f) for m in got for r, f, _ in m] == list(zip(sub["rank"].astype(int), sub["flow"].astype(int)))
        assert [t for m in got for _, _, t in m] == np.rint(sub["t"].to_numpy() / UNIT_NS).astype(int).tolist()
        through = [m for m in got if any(r == chosen for r, _, _ in m)]
        # every call of the chosen rank that a drawn rank shares is linked: here, all of its calls
        assert len(through) == int((sub["rank"] == chosen).sum()) == int((flows["rank"] == chosen).sum()) > 10
        assert all(len(m) == len(drawn) + 1 for m in through)
