"""A run that did not complete, on the timeline: the collectives left in flight are drawn in their rank's
comm row (launch to the rank's last sign of life, cut at the figure's edge), the rank that never launched
the hung collective has none, the step no rank ended is marked at its earliest record, and the compact
rows the page's rank selector draws from carry the same bars. A 12-rank job from bench/gen_job.py whose
rank 5 never launches a collective of step 3 (every other rank's watchdog fires 600 s later)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from commscope.analyze.timeline_bars import timeline_bars
from commscope.analyze.timeline_inflight import IN_FLIGHT_DRAWN, IN_FLIGHT_PAD, unfinished_steps
from commscope.load import load_path
from paths import TESTS
from reports.timeline import INFLIGHT_NAME, UNFINISHED_STEP, inflight_text, label_colors, timeline_figure
from reports.timeline_ranks import UNIT_NS, rank_rows
from scale_jobs import gen_job

HUNG = 5


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hung")
    truth = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp / "h", 12, steps=6, hang=HUNG)
    return truth, load_path(truth["job"])


def watchdog_fired_ns(job: str, rank: int) -> int:
    with open(f"{job}/rank{rank}/watchdog.json") as f:
        return json.load(f)["fired_ns"]


def test_every_rank_but_the_culprit_has_the_hung_collective_in_flight_to_the_edge(hung):
    truth, tr = hung
    bars = timeline_bars(tr, (1, 4))
    launches = [s for rb in bars.ranks for s in rb.inflight["start"]]
    edge = max(bars.t_end, max(launches)) + IN_FLIGHT_PAD * bars.t_end
    assert bars.t_edge == pytest.approx(edge)
    for rb in bars.ranks:
        f = rb.inflight
        if rb.rank == HUNG:
            assert len(f) == 0
            continue
        assert len(f) == 1
        row = f.iloc[0]
        assert (row["label"], row["op"], row["group"], row["seq"], row["step"]) == (
            truth["hang"]["label"], truth["hang"]["op"], truth["hang"]["group"], truth["hang"]["seq"], 3)
        launch = tr.faults.inflight.query(f"rank == {rb.rank}")["call_ns"].iloc[0]
        assert row["start"] == launch - bars.t0
        # the whole time reaches the watchdog's firing; the bar stops just past everything else drawn
        assert row["in_flight_ns"] == watchdog_fired_ns(truth["job"], rb.rank) - launch
        assert row["in_flight_ns"] > 500e9 and bool(row["cut"]) and row["end"] == pytest.approx(edge)
        # it shares the comm row's lanes: no completed bar of its lane overlaps it
        same = rb.drawn & (rb.lanes == row["lane"])
        assert not np.any((rb.start[same] < row["end"]) & (rb.end[same] > row["start"]))
        assert rb.n_lanes > row["lane"]
    assert bars.t_end == pytest.approx(max(float(np.nanmax(rb.end[rb.drawn])) for rb in bars.ranks), rel=0.05)


def test_the_step_no_rank_ended_is_marked_at_its_earliest_record(hung):
    _, tr = hung
    bars = timeline_bars(tr, (1, 4))
    assert list(bars.step_marks["step"]) == [1, 2]
    u = bars.unfinished
    first = []
    for df, col in ((tr.collectives, "call_ns"), (tr.compute, "start_ns"), (tr.hooks, "t_ns")):
        mine = df[(df["rank"] == 0) & (df["step"] == 3)]
        first.append(int(mine[col].min()))
    assert u["step"].tolist() == [3] and int(u["start_ns"].iloc[0]) == min(first)
    assert unfinished_steps(tr, 0, (1, 3)).empty  # outside the window: not marked
    assert timeline_bars(tr, (0, 3)).unfinished.empty
    assert all(len(rb.inflight) == 0 for rb in timeline_bars(tr, (0, 3)).ranks)  # its step is not drawn


def test_past_the_cap_in_flight_collectives_are_counted_not_drawn(tmp_path):
    truth = gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "h", 4, steps=6, hang=1)
    path = tmp_path / "h" / "job" / "rank0" / "watchdog.json"
    doc = json.loads(path.read_text())
    one = doc["inflight"][0]
    doc["inflight"] += [dict(one, seq=one["seq"] + k, call_ns=one["call_ns"] + k * 1000) for k in range(1, 12)]
    path.write_text(json.dumps(doc))
    bars = timeline_bars(load_path(truth["job"]), (1, 4))
    rb = bars.ranks[0]
    assert len(rb.inflight) == IN_FLIGHT_DRAWN and bars.inflight_more == {0: 12 - IN_FLIGHT_DRAWN}
    assert rb.inflight["seq"].tolist() == [one["seq"] + k for k in range(IN_FLIGHT_DRAWN)]  # the oldest
    assert len(set(rb.inflight["lane"])) == IN_FLIGHT_DRAWN  # each in a lane of its own
    assert f"rank 0 has {12 - IN_FLIGHT_DRAWN} more in flight, not drawn" in inflight_text(
        next(rb.inflight.itertuples(index=False)), 0, bars.inflight_more[0])
    # the caption says the cap and who has more than it
    from reports.sections import stopped_note

    assert (f"At most {IN_FLIGHT_DRAWN} a rank are drawn, its oldest launches (the later ones queue behind them); "
            f"not drawn: rank 0 {12 - IN_FLIGHT_DRAWN} (<code>commscope export --perfetto</code> draws every one)."
            ) in stopped_note(bars)


def test_the_figure_draws_them_and_says_what_they_are(hung):
    truth, tr = hung
    bars = timeline_bars(tr, (1, 4))
    fig = timeline_figure(bars)
    legend, stuck, cut = [t for t in fig.data if t.name == INFLIGHT_NAME]
    # one legend entry of its own (white under the stripes: one label's colour would pass for that label's)
    assert legend.showlegend is not False and legend.marker.color == "#ffffff" and list(legend.base) == [None]
    assert stuck.showlegend is False and stuck.marker.color == label_colors(bars.labels)[truth["hang"]["label"]]
    assert len(stuck.base) == 11 and isinstance(stuck.marker.color, str)  # one colour a trace: no array
    # every bar is cut: it ends where the axis does, marked there
    assert list(cut.x) == pytest.approx([bars.t_edge / 1e6] * 11) and cut.marker.symbol == "triangle-right"
    assert list(fig.layout.xaxis.range) == pytest.approx([-0.01 * bars.t_edge / 1e6, bars.t_edge / 1e6])
    text = stuck.text[0]
    assert text.startswith(f"<b>{truth['hang']['label']}</b> · all_reduce · group 0 · seq {truth['hang']['seq']}"
                           "<br>rank 0 · step 3<br><b>never completed</b>: still in flight 600.")
    assert " s after its launch, when the watchdog fired<br>(cut at the figure's right edge ▶)<br>960 B" in text
    notes = [a.text for a in fig.layout.annotations]
    assert notes == ["step 1", "step 2", f"step 3 · {UNFINISHED_STEP}"]
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["drawn steps (1–3)", "step 1", "step 2", f"step 3 ({UNFINISHED_STEP})"]
    assert list(buttons[0].args[0]["xaxis.range"]) == list(fig.layout.xaxis.range)  # "all": back to the edge
    lo, hi = buttons[-1].args[0]["xaxis.range"]
    start = (int(bars.unfinished["start_ns"].iloc[0]) - bars.t0) / 1e6
    # the unfinished step reaches the in-flight bars' end
    assert lo < start < hi and hi == pytest.approx(bars.t_edge / 1e6 + 0.02 * (bars.t_edge / 1e6 - start))


def test_the_axis_ends_at_the_edge_when_only_a_rank_not_drawn_has_a_cut_bar(hung):
    """At scale the page draws a few ranks and the selector adds any other: the hung rank alone has no
    in-flight bar, yet the axis must already end at the edge, where the bars of a rank added later stop."""
    _, tr = hung
    bars = timeline_bars(tr, (1, 4))
    alone = timeline_figure(bars.subset([HUNG]))
    assert not [t for t in alone.data if t.name == INFLIGHT_NAME]
    assert list(alone.layout.xaxis.range) == pytest.approx([-0.01 * bars.t_edge / 1e6, bars.t_edge / 1e6])
    complete = timeline_bars(tr, (0, 3))  # no in-flight bar anywhere: autorange
    assert not complete.cut_anywhere and timeline_figure(complete).layout.xaxis.range is None


def test_the_compact_rows_carry_the_same_in_flight_bars(hung):
    _, tr = hung
    bars = timeline_bars(tr, (1, 4))
    doc = rank_rows(bars)
    f, strings = doc["inflight"], doc["strings"]
    at = 0
    for i, rb in enumerate(bars.ranks):
        n = f["n"][i]
        assert n == len(rb.inflight) and f["more"][i] == 0
        starts = np.cumsum(f["s"][at:at + n])
        want = np.rint(rb.inflight["start"].to_numpy(np.float64) / UNIT_NS)
        assert starts.tolist() == want.tolist()
        for j, row in enumerate(rb.inflight.itertuples(index=False)):
            k = at + j
            assert strings[f["label"][k]] == row.label and f["lane"][k] == row.lane and f["seq"][k] == row.seq
            assert f["t"][k] == round(row.in_flight_ns / UNIT_NS) and f["w"][k] == 1 and f["cut"][k] == 1
            assert f["wt"][k] is None  # gen_job's hung ranks never called wait() on it
            assert f["d"][k] == int(np.rint(row.end / UNIT_NS) - np.rint(row.start / UNIT_NS))
        at += n
    assert at == len(f["s"]) == 11


def test_a_run_that_completed_draws_nothing_of_the_kind(tmp_path):
    tr = load_path(str(TESTS / "data" / "cpurun-hooks-gloo2"))
    bars = timeline_bars(tr)
    assert bars.unfinished.empty and bars.inflight_more == {}
    assert all(len(rb.inflight) == 0 for rb in bars.ranks)
    assert not [t for t in timeline_figure(bars).data if t.name == INFLIGHT_NAME]
    assert isinstance(bars.unfinished, pd.DataFrame)


def test_the_collective_a_rank_blocked_in_says_so(hung, tmp_path):
    """A rank blocks in wait() on one collective, often queued behind the one a peer never launched: its
    hover says from when, in the figure and in the compact rows alike."""
    truth, _ = hung
    job = tmp_path / "job"
    import shutil

    shutil.copytree(truth["job"], job)
    path = job / "rank0" / "watchdog.json"
    doc = json.loads(path.read_text())
    doc["inflight"][0]["wait_ns"] = doc["inflight"][0]["call_ns"] + 2_500_000
    path.write_text(json.dumps(doc))
    bars = timeline_bars(load_path(str(job)), (1, 4))
    row = next(bars.ranks[0].inflight.itertuples(index=False))
    assert row.waited_after_ns == 2_500_000
    assert "<br>its rank blocked waiting on it from 2.500 ms after its launch<br>" in inflight_text(row, 0, 0)
    assert all(np.isnan(rb.inflight["waited_after_ns"]).all() for rb in bars.ranks[1:])
    assert rank_rows(bars)["inflight"]["wt"][0] == 2500


def test_the_heatmap_says_which_step_it_has_no_column_for(hung, tmp_path, capsys):
    from cli_result import run_main
    from commscope.analyze.timeline_inflight import steps_without_end

    truth, tr = hung
    assert steps_without_end(tr) == {3: 12}  # every rank began step 3, none ended it
    assert steps_without_end(load_path(str(TESTS / "data" / "cpurun-hooks-gloo2"))) == {}
    page = tmp_path / "p.html"
    code, out = run_main(capsys, "report", truth["job"], "--no-hta", "-o", page)
    assert code == 0, out.err
    html = page.read_text()
    assert ('<span id="heatmap-no-end">No column for step 3 (12 ranks began it): no rank recorded its end (the run '
            'stopped inside it).</span>') in html
    assert "<th>3</th>" not in html[html.index('id="heatmap-table"'):]


def test_a_collective_a_peer_death_aborted_says_how_its_rank_ended(hung):
    """Where the watchdog did not fire, the bar ends at the rank's last record; the hover says how the
    rank ended (its status's error, escaped: an error may hold "<"), in the figure and the compact rows."""
    _, tr = hung
    bars = timeline_bars(tr, (1, 4))
    rb = bars.ranks[0]
    assert rb.inflight["ended"].tolist() == ["hang watchdog: collective did not finish within 600 s"]
    row = next(rb.inflight.itertuples(index=False))
    assert "its rank ended" not in inflight_text(row, 0, 0)  # the watchdog's firing says it already
    aborted = row._replace(watchdog_fired=False, ended="RuntimeError: Connection closed by peer <127.0.0.1> & co")
    text = inflight_text(aborted, 0, 0)
    assert ", at its rank's last record<br>its rank ended: RuntimeError: Connection closed by peer " \
           "&lt;127.0.0.1&gt; &amp; co<br>" in text
    doc = rank_rows(bars)
    assert doc["strings"][doc["inflight"]["ended"][0]] == "hang watchdog: collective did not finish within 600 s"


def test_the_perfetto_export_has_a_slice_for_the_step_no_rank_ended(hung, tmp_path, capsys):
    from cli_result import run_main
    from commscope.analyze.timeline_inflight import steps_begun

    truth, tr = hung
    begun = steps_begun(tr)
    assert begun["rank"].tolist() == list(range(12)) and set(begun["step"]) == {3}
    assert (begun["end_ns"] > begun["start_ns"]).all()
    out = tmp_path / "t.json"
    code, res = run_main(capsys, "export", truth["job"], "--perfetto", out)
    assert code == 0, res.err
    doc = json.loads(out.read_text())
    t0 = doc["otherData"]["t0_ns"]
    got = {e["pid"]: e for e in doc["traceEvents"] if e.get("cat") == "step" and "no end" in e["name"]}
    assert sorted(got) == list(range(12))
    for row in begun.itertuples(index=False):
        e = got[row.rank]
        assert e["name"] == "step 3 (no end recorded)" and e["args"]["step"] == 3
        assert e["ts"] == pytest.approx((row.start_ns - t0) / 1e3, abs=1e-3)
        assert e["ts"] + e["dur"] == pytest.approx((row.end_ns - t0) / 1e3, abs=2e-3)
