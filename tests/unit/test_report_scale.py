"""The report page at scale: up to PAGE_ALL_RANKS ranks it draws every rank; above, the ranks × steps
heatmap as a canvas, the arrival lateness, the ranks that made the others wait, a timeline of the
representative ranks and every rank's rows for the rank selector, and per-rank tables of the listed ranks.
Inputs are generated jobs (bench/gen_job.py, tests/scale_jobs.py) in the test's temporary folder."""
from __future__ import annotations

import base64
import gzip
import json
import re

import numpy as np
import pytest

from commscope.analyze.report_context import PAGE_ALL_RANKS, TOP_WAITING, report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from reports.page import render_html
from reports.scale_section import bucket_name
from reports.tables import fmt
from reports.timeline_ranks import UNIT_NS
from paths import TESTS
from scale_jobs import scale_job
from test_report import parse, value


def page_of(tmp_path, ranks: int, straggler: int):
    tr = load_path(scale_job(tmp_path, ranks=ranks, straggler=straggler)["job"])
    doc = summarize(tr, with_hta=False)
    ctx = report_context(tr, doc)
    return tr, doc, ctx, render_html(ctx)


def data(page: str, script_id: str):
    """A gzip+base64 JSON document of the page (reports.page.data_html)."""
    m = re.search(rf'<script type="application/gzip-base64" id="{script_id}">([^<]*)</script>', page)
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


def ticks(page: str) -> list[str]:
    """The timeline figure's row names."""
    spec = page[page.index('csPlot("timeline-plot", ') + len('csPlot("timeline-plot", '):]
    fig = json.JSONDecoder().raw_decode(spec.replace("<\\/", "</"))[0]
    return fig["layout"]["yaxis"]["ticktext"]


def test_at_the_threshold_every_rank_is_drawn(tmp_path):
    n = PAGE_ALL_RANKS
    tr, doc, ctx, page = page_of(tmp_path, n, straggler=5)
    assert not ctx.at_scale and ctx.drawn is None and ctx.listed_ranks is None
    assert ticks(page) == [f"r{r} {row}" for r in range(n) for row in ("compute", "comm")]
    assert page.count('class="cell"') == n * 4  # the heatmap table: a cell per rank and step
    p = parse(page)
    assert "Arrival lateness" not in p.h2 and "Ranks that made the others wait" not in p.h2
    body = page[page.index("<body>"):]  # (report.js, in the head, names them all)
    assert 'id="rank-select"' not in body and "rank-rows-gz" not in body and "heatmap-canvas" not in body
    assert {int(value(r[0])) for r in p.tables["steps-table"][1:]} == set(range(n))  # every rank listed


def test_the_page_keeps_its_weight_budget_on_both_sides_of_the_threshold(tmp_path):
    """The heaviest page that draws every rank (PAGE_ALL_RANKS ranks, 40 steps as bench_scale's jobs) and
    the lightest that summarizes (one rank more) both stay within the 1.5 MB budget of the 2-rank page."""
    sizes = {}
    for n in (PAGE_ALL_RANKS, PAGE_ALL_RANKS + 1):
        tr = load_path(scale_job(tmp_path, ranks=n, straggler=5, steps=40)["job"])
        ctx = report_context(tr, summarize(tr, with_hta=False))
        assert ctx.at_scale == (n > PAGE_ALL_RANKS)
        page = render_html(ctx)
        sizes[n] = len(page.encode())
        steps = {(int(value(r[0])), int(value(r[1]))) for r in parse(page).tables["steps-table"][1:]}
        if ctx.at_scale:  # the listed ranks' rows of the steps the timeline draws: bounded whatever the run's length
            lo, hi = ctx.window
            assert steps == {(r, s) for r in ctx.listed_ranks for s in range(lo, hi)} and hi - lo <= 3
            assert f"At scale this table lists steps {lo}–{hi - 1}, the steps the timeline draws" in page
        else:
            assert len(steps) == n * 40
    assert max(sizes.values()) <= 1.5e6, sizes


def test_above_the_threshold_summarizes_the_ranks(tmp_path):
    tr, doc, ctx, page = page_of(tmp_path, 40, straggler=29)
    reps = [r["rank"] for r in doc["representative_ranks"]]
    assert ctx.at_scale and reps[0] == 29 and len(reps) == len(set(reps)) >= 3
    # the timeline draws the representative ranks, straggler first, and no other
    assert ticks(page) == [f"r{r} {row}" for r in reps for row in ("compute", "comm")]
    assert [rb.rank for rb in ctx.drawn.ranks] == reps and len(ctx.timeline.ranks) == 40
    p = parse(page)
    assert p.h2[:5] == ["Summary", "Exposed communication by rank and step", "Arrival lateness",
                        "Ranks that made the others wait", "Timeline"]
    # the heatmap's canvas data: every rank and step, the summary's numbers, the representative ranks marked
    hm = data(page, "heatmap-gz")
    assert hm["ranks"] == list(range(40)) and [c[0] for c in hm["columns"]] == [0, 1, 2, 3]
    want = {(s["rank"], s["step"]): s["exposed_comm_ms"] for s in doc["steps"]}
    assert hm["exposed"] == [round(want[(r, s)], 3) for r in range(40) for s in range(4)]
    assert [m["rank"] for m in hm["marked"]] == reps
    assert page.count('class="cell"') == 0
    # lateness: the straggler is the latest arrival, in its own top bucket; quantiles end at it
    top = [h for h in doc["arrival_lateness"]["histogram"] if h["arrivals"] > 0][-1]
    assert top["worst_rank"] == 29 and top["arrivals"] == 1
    quant = p.tables["lateness-quantiles"]
    assert [r[0][1] for r in quant[1:]] == ["median", "p90", "p99", "p99.9", "max"]
    assert value(quant[-1][1]) == pytest.approx(top["worst_ms"])
    assert f"The latest arrival: rank 29, {fmt(top['worst_ms'])} ms after the first" in page
    # the ranks that made the others wait most, worst first, as summarize() orders them
    rows = p.tables["top-waiting-table"][1:]
    waited = [s for s in doc["stragglers"] if s["wait_caused_ms"] > 0][:TOP_WAITING]
    assert [int(value(r[0])) for r in rows] == [s["rank"] for s in waited]
    assert [value(r[1]) for r in rows] == [s["wait_caused_ms"] for s in waited] and 3 <= len(rows) <= TOP_WAITING
    # per-rank tables list the representative and top-waiting ranks only, and say so
    listed = set(reps) | {s["rank"] for s in waited}
    assert ctx.listed_ranks and set(ctx.listed_ranks) == listed
    assert {int(value(r[0])) for r in p.tables["steps-table"][1:]} == listed
    assert {int(value(r[0])) for r in p.tables["stragglers-table"][1:]} == listed
    assert "commscope report --json</code> has every rank" in page


def test_selector_data_holds_every_rank_rows(tmp_path):
    tr, doc, ctx, page = page_of(tmp_path, 40, straggler=29)
    rows = data(page, "rank-rows-gz")
    assert rows["ranks"] == list(range(40)) and rows["unit_ns"] == UNIT_NS
    assert 'id="rank-select"' in page and data(page, "timeline-style")["colors"]
    # decode one rank that is not drawn and compare with its bars (to the µs)
    r = next(x for x in range(40) if x not in [rb.rank for rb in ctx.drawn.ranks])
    i = rows["ranks"].index(r)
    rb = next(b for b in ctx.timeline.ranks if b.rank == r)
    c = rows["coll"]
    lo = sum(c["n"][:i])
    n = c["n"][i]
    assert n == int(rb.drawn.sum()) > 0
    start = np.cumsum(c["s"][lo:lo + n])
    assert start.tolist() == np.rint(rb.start[rb.drawn] / UNIT_NS).astype(int).tolist()
    assert (start + c["d"][lo:lo + n]).tolist() == np.rint(rb.end[rb.drawn] / UNIT_NS).astype(int).tolist()
    assert [rows["strings"][k] for k in c["label"][lo:lo + n]] == rb.coll["label"][rb.drawn].tolist()
    assert c["lane"][lo:lo + n] == rb.lanes[rb.drawn].tolist() and rows["lanes"][i] == rb.n_lanes
    assert c["seq"][lo:lo + n] == rb.coll["seq"][rb.drawn].astype(int).tolist()
    # exposed spans: their lengths add up to the drawn exposed time, to the µs per span
    e_lo, e_n = sum(c["ne"][:lo]), sum(c["ne"][lo:lo + n])
    exposed_us = sum(c["ed"][e_lo:e_lo + e_n])
    assert exposed_us == pytest.approx(sum(np.asarray(rb.exposed_ns)[rb.drawn]) / UNIT_NS, abs=e_n + 1)
    comp = rows["compute"]
    assert comp["n"][i] == sum(len(cr.starts) for cr in rb.compute)
    assert rows["hooks"]["n"][i] == len(rb.hook_t)


def test_config_lists_are_cut_at_scale():
    from reports.tables import nested

    cfg = {"files": [f"rank{r}.json" for r in range(100)], "per_rank": {str(r): {"status": "ok"} for r in range(100)}}
    full, cut = nested(cfg), nested(cfg, limit=16)
    assert full.count("rank99.json") == 1 and "rank99.json" not in cut and "… 84 more" in cut
    assert full.count("<tr>") > 100 and cut.count("<tr>") < 40 and "84 more entries" in cut


def test_a_hung_rank_is_drawn_first_and_the_timeline_reaches_the_hang(tmp_path):
    """A hung rank made nobody wait in a finished step, so no number picks it: the doctor's culprit leads the
    representative ranks, and the timeline window ends at the step it hung in, not in the middle."""
    from scale_jobs import gen_job

    truth = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "hang", 40, steps=12, hang=33,
                             at_step=10)
    tr = load_path(truth["job"])
    doc = summarize(tr, with_hta=False)
    ctx = report_context(tr, doc)
    assert ctx.diagnosis.verdict == "hang" and ctx.diagnosis.culprit_ranks == [33]
    assert ctx.representative[0] == {"rank": 33, "why": ["the doctor's hang culprit"]}
    assert 33 in [r["rank"] for r in ctx.representative] and 33 in ctx.listed_ranks
    lo, hi = ctx.window
    assert lo <= 10 < hi and hi - lo <= 4
    assert ctx.drawn.ranks[0].rank == 33
    # the verdict names the ranks as ranges: one short line at any world size
    assert "rank(s) 0-32,34-39 launched" in ctx.diagnosis.summary


def test_bucket_names_read_the_edges_in_the_unit_that_fits():
    assert bucket_name(0.0, 1e-5) == "< 10 ns"
    assert bucket_name(5e-4, 1e-3) == "500 ns–1 µs"
    assert bucket_name(0.2, 0.5) == "200 µs–500 µs"
    assert bucket_name(1.0, 2.0) == "1 ms–2 ms"
    assert bucket_name(500.0, 1000.0) == "500 ms–1 s"


def test_htas_per_rank_tables_list_the_listed_ranks_at_scale():
    """HTA's analyses hold a row per rank (or per rank and stream): at scale its tables list the ranks the
    other per-rank tables list, with the same note; below the threshold every rank."""
    from types import SimpleNamespace

    from reports.sections import render_hta, render_hta_views

    n = 256
    hta = {"idle_time": [{"rank": r, "stream": 7, "idle_category": "host_wait", "idle_time (us)": 1.5}
                         for r in range(n)],
           "launch_delay": [{"rank": r, "kernels": 10, "median (us)": 2.0} for r in range(n)],
           "temporal_breakdown": {str(r): {"idle_time(us)": 1.0, "kernel_time(us)": 2.0} for r in range(n)},
           "hta_comm_overlap_pct_by_rank": {str(r): 20.0 for r in range(n)},
           "overlap_comparison": [{"rank": r, "diff_pp": 0.0} for r in range(n)], "version": "0.5.0",
           # already the costliest kernels over every rank (hta_bridge): kept whole, whoever's they are
           "top_kernels": [{"name": "gemm", "kernel_type": "COMPUTATION", "rank": r, "sum (us)": 9.0} for r in (7, 9)]}

    def ranks_in(page: str) -> set[int]:
        return {int(v) for v in re.findall(r'<td[^>]*data-v="(\d+)"[^>]*>\d+</td>', page)}

    for listed in ([3, 171, 200], None):
        ctx = SimpleNamespace(summary={"hta": hta}, listed_ranks=listed, trace=SimpleNamespace(ranks=list(range(n))))
        views, side = render_hta_views(ctx), render_hta(ctx)
        for page in (views, side):
            said = f"{n} ranks: this table lists ranks 3, 171, 200 only"
            assert (said in page) == (listed is not None)
        if listed is not None:
            # two tables of a header and 3 ranks each, and the per-kernel table whole
            assert views.count("<tr") == 2 * (1 + 3) + (1 + 2)
            assert side.count("<tr") < 60  # three tables of 3 ranks, and HTA's version
        else:
            assert views.count("<tr") == 2 * (1 + n) + (1 + 2)


def test_a_straggler_beside_a_desync_is_said_beside_the_verdict(tmp_path, capsys):
    """Two planted faults: the verdict is the desync (rank 11), and the straggler (rank 29), which the one
    verdict would hide, is kept beside it (Diagnosis.also) and said by doctor, doctor --json and the page's
    first screen; a straggler that is the desync's own rank is not said twice."""
    from commscope.analyze.doctor import diagnose_trace
    from commscope.cli import main

    truth = scale_job(tmp_path, 40, straggler=29, desync=11)
    tr = load_path(truth["job"])
    d = diagnose_trace(tr)
    assert (d.verdict, d.culprit_ranks) == ("desync", [11])
    assert [(a["verdict"], a["culprit_ranks"]) for a in d.also] == [("straggler", [29])]
    assert d.also[0]["summary"].startswith("straggler: rank 29 made the other ranks wait")
    ctx = report_context(tr, summarize(tr, with_hta=False))
    page = render_html(ctx)
    first = page[page.index('id="verdict"'):page.index("Most exposed collectives")]
    assert "<b>DESYNC</b>" in first and '<p class="verdict bad verdict-also">Also: <b>STRAGGLER</b> rank 29 made' in first
    # the desync's evidence holds a launch of each of the 40 ranks: the page lists the culprit's and the
    # listed ranks' (doctor --json has all)
    evidence = parse(page).tables["doctor-evidence"][1:]
    assert {int(value(r[0])) for r in evidence} == {11} | set(ctx.listed_ranks) and len(d.evidence) == 40
    assert "40 rows, one a rank: this table lists the culprits' (the first 16) and the ranks the other tables" in page
    with pytest.raises(SystemExit):
        main(["doctor", str(truth["job"]), "--json"])
    got = json.loads(capsys.readouterr().out)
    assert [a["culprit_ranks"] for a in got["also"]] == [[29]]
    with pytest.raises(SystemExit):
        main(["doctor", str(truth["job"])])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("desync:") and " ".join(lines[1:3]).startswith("also straggler: rank 29 made")
    same = scale_job(tmp_path / "same", 40, straggler=11, desync=11)
    assert diagnose_trace(load_path(same["job"])).also == []
