"""The timeline's comm rows grow with their lanes: 13 labels whose collectives run at the same time are
13 lanes of at least reports.timeline.LANE_PX px each, in the plotly figure (≤ PAGE_ALL_RANKS ranks, and the
representative ranks at scale) and in the rows report.js adds at scale (csRowSpan, run here in node where
it is installed; tests/integration/test_report_browser_flows.py measures them in Chromium).

The px are measured on the figure as plotly lays it out: the plot area (height less the top and bottom
margins) over the y range gives px per y unit, and a bar's `width` is in y units."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from commscope.analyze.timeline_bars import timeline_bars
from report_js import js_map
from report_trace import US, make_trace
from reports.timeline import BAR, COMM_ROW_MAX_PX, LANE_PX, ROW_H, comm_row_span, timeline_figure
from reports.timeline_ranks import style

LABELS = [f"label{i:02d}" for i in range(13)]


def overlapping(n_labels: int = 13, ranks=(0, 1)):
    """make_trace's two ranks and steps, its collectives replaced by `n_labels` labels per step and rank that
    all run during [300, 500 µs) of the step, each starting 1 µs after the previous one."""
    tr = make_trace(ranks=ranks)
    base = tr.collectives.iloc[0].to_dict()
    rows = []
    for r in ranks:
        for s in (0, 1):
            b = int(tr.steps.loc[(tr.steps["rank"] == r) & (tr.steps["step"] == s), "start_ns"].iloc[0])
            for i in range(n_labels):
                rows.append({**base, "rank": r, "step": s, "label": f"label{i:02d}", "seq": s * n_labels + i,
                             "call_ns": b + (290 + i) * US, "return_ns": b + (295 + i) * US,
                             "start_ns": b + (300 + i) * US, "end_ns": b + 500 * US})
    tr.collectives = pd.DataFrame(rows, columns=tr.collectives.columns)
    return tr


def px_per_unit(fig) -> float:
    lay = fig.layout
    lo, hi = lay.yaxis.range
    return (lay.height - lay.margin.t - lay.margin.b) / abs(lo - hi)


def test_13_overlapping_labels_are_13_lanes_of_lane_px_each():
    bars = timeline_bars(overlapping())
    assert [rb.n_lanes for rb in bars.ranks] == [13, 13]
    fig = timeline_figure(bars)
    unit = px_per_unit(fig)
    coll = [t for t in fig.data if t.name in LABELS]
    assert sorted(t.name for t in coll) == LABELS
    widths = np.concatenate([np.asarray(t.width, float) for t in coll])
    # every bar is 90 % of its lane: the lane ≥ LANE_PX (8 px), the bar ≥ 7.2 px; before, 13 lanes shared
    # one 22 px row's 72 %: 1.2 px a lane
    assert widths.min() * unit / 0.9 >= LANE_PX == 8
    assert widths.min() * unit >= 7.2
    # 13 distinct lanes per rank, none drawn over another: centres at least a bar apart
    ys = np.concatenate([np.asarray(t.y, float) for t in coll])
    ranks = np.concatenate([np.asarray(t.customdata, float)[:, 0] for t in coll])
    for r in (0, 1):
        lanes = np.unique(ys[ranks == r])
        assert len(lanes) == 13 and np.diff(lanes).min() >= widths.max() - 1e-9
    # the comm rows' ticks sit at their rows' centres, inside the axis range, and every row keeps ≥ ROW_H px
    ticks = dict(zip(fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals))
    assert list(ticks) == ["r0 compute s7", "r0 comm", "r1 compute s7", "r1 comm"]
    assert -0.5 < ticks["r0 comm"] < ticks["r1 compute s7"] < ticks["r1 comm"] < fig.layout.yaxis.range[0]
    assert unit >= ROW_H
    assert fig.layout.height >= 2 * 13 * LANE_PX / BAR + 200


def test_one_lane_keeps_one_row_and_many_lanes_stop_growing_at_the_cap():
    assert comm_row_span(0) == comm_row_span(1) == 1.0  # a lane fits a 22 px row's 15.8 px bar
    assert comm_row_span(2) * BAR * ROW_H == pytest.approx(2 * LANE_PX)  # 16 px: the row grows by 1 %
    assert comm_row_span(13) * BAR * ROW_H == pytest.approx(13 * LANE_PX)
    # past COMM_ROW_MAX_PX the row stops growing: 60 lanes share 320 px, 5.3 px each
    assert comm_row_span(60) == comm_row_span(40) == pytest.approx(COMM_ROW_MAX_PX / (BAR * ROW_H))
    fig = timeline_figure(timeline_bars(overlapping(60, ranks=(0,))))
    bar = min(np.asarray(t.width, float).min() for t in fig.data if str(t.name).startswith("label"))
    assert bar * px_per_unit(fig) / 0.9 >= COMM_ROW_MAX_PX / 60 == pytest.approx(5.33, abs=0.01)


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run report.js's csRowSpan")
def test_report_js_sizes_added_rows_as_the_figure_does():
    """report.js's csRowSpan, given timeline_ranks.style's numbers, gives comm_row_span's heights."""
    lanes = [0, 1, 2, 3, 13, 40, 60]
    got = js_map("csRowSpan", lanes, style(timeline_bars(make_trace())))
    assert got == pytest.approx([comm_row_span(n) for n in lanes])
