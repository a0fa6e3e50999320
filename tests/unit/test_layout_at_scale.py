"""Above PAGE_ALL_RANKS ranks the report's layout section covers the representative ranks only (a layout
mismatch comes from the code, the same on every rank), says so, and finds what the whole job shows;
`Trace.select_ranks` keeps exactly those ranks' events."""
from __future__ import annotations

import importlib
import sys

from commscope.analyze.layout_report import layout_report
from commscope.analyze.report_context import PAGE_ALL_RANKS, report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import ROOT, TESTS

sys.path.insert(0, str(ROOT / "bench"))
gen_job = importlib.import_module("gen_job")


def test_layout_of_the_representative_ranks_at_scale(tmp_path):
    n = PAGE_ALL_RANKS + 4
    truth = gen_job.generate(TESTS / "data" / "modded-nanogpt-8xh100", tmp_path / "k", n, straggler=n - 7)
    trace = load_path(truth["job"], with_ops=True)
    doc = summarize(trace, with_hta=False)
    reps = [r["rank"] for r in doc["representative_ranks"]]
    sub = trace.select_ranks(reps)
    assert sub.ranks == sorted(reps) and set(sub.kernels["rank"]) == set(reps) == set(sub.ops["rank"])
    assert len(sub.collectives) == int(trace.collectives["rank"].isin(reps).sum())
    ctx = report_context(trace, doc)
    assert ctx.layout_ranks == reps
    # the representative ranks' findings name the same (op, kernel) kinds as every rank's
    kinds = lambda rep: set(zip(rep.findings["op"], rep.findings["kernel"]))  # noqa: E731
    assert kinds(ctx.layout) == kinds(layout_report(trace)) and len(ctx.layout.findings)
    from reports.layout_section import render_layout

    assert f"{n} ranks: findings of the representative ranks" in render_layout(ctx)
