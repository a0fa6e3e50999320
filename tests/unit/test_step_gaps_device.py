"""Step boundaries on GPU profiler traces (analyze.step_gaps, docs/analysis.md): between two consecutive
device windows the time no device activity of the rank covers is the device waiting for the host, which
the step rows (device windows) leave out; a trace has no start delay, and a CPU trace no rows."""
import pandas as pd
import pytest

from commscope.analyze import step_gaps
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from report_trace import T, US, make_trace

MS = 1000 * US


def device_trace(kernels):
    """make_trace's 2 ranks × 3 steps as device windows: step s of rank r is [s ms, s ms + 0.8 ms), so
    0.2 ms lie between windows; `kernels`: (rank, start µs, end µs) of device work on the axis."""
    t = make_trace(ranks=(0, 1), steps=(0, 1, 2), style="kineto")
    st = t.steps.copy()
    st["start_ns"] = T + st["step"] * MS
    st["end_ns"] = st["start_ns"] + 800 * US
    st["host_start_ns"], st["host_end_ns"] = st["start_ns"], st["start_ns"] + MS
    st["basis"] = "launch-correlation"
    t.steps = st
    t.kernels = pd.DataFrame({"rank": [k[0] for k in kernels], "start_ns": [T + k[1] * US for k in kernels],
                              "end_ns": [T + k[2] * US for k in kernels], "kind": "memcpy"})
    return t


def test_the_gap_is_the_device_idle_between_windows():
    # rank 1 runs a memcpy over 50 µs of its first boundary [800, 1000) µs
    g = step_gaps.step_gaps(device_trace([(1, 850, 900)])).set_index(["rank", "step"])
    assert g.loc[(0, 1), "gap_ns"] == 200 * US and g.loc[(0, 2), "gap_ns"] == 200 * US
    assert g.loc[(1, 1), "gap_ns"] == 150 * US and g.loc[(1, 2), "gap_ns"] == 200 * US
    assert g["start_delay_ns"].isna().all()
    assert g.loc[(0, 1), "period_ns"] == MS and g.loc[(0, 1), "host_pct"] == pytest.approx(20.0)
    summary = step_gaps.gap_summary(g.reset_index()).set_index("rank")
    assert summary.loc[1, "gap_median_ms"] == pytest.approx(0.175) and summary.loc[1, "gap_max_ms"] == 0.2
    assert summary.loc[1, "host_pct"] == pytest.approx(100 * 0.35 / 2)


def test_overlapping_windows_and_missing_steps_give_no_negative_or_invented_gap():
    t = device_trace([])
    st = t.steps
    # rank 0's step 1 window starts before step 0's ends (two streams): no idle; rank 1 lacks step 1
    st.loc[(st["rank"] == 0) & (st["step"] == 1), "start_ns"] = T + 700 * US
    t.steps = st[~((st["rank"] == 1) & (st["step"] == 1))]
    g = step_gaps.step_gaps(t).set_index(["rank", "step"])
    assert g.loc[(0, 1), "gap_ns"] == 0
    assert (1, 1) not in g.index and (1, 2) not in g.index  # steps 0 and 2 are not consecutive


def test_host_windows_give_no_rows():
    t = device_trace([])
    t.steps = t.steps.assign(basis="host")
    assert step_gaps.step_gaps(t).empty


def test_the_8xh100_traces_rank_0_idles_between_steps_10_and_11():
    doc = summarize(load_path(str(TESTS / "data" / "modded-nanogpt-8xh100")), with_hta=False)
    bounds = {b["rank"]: b for b in doc["step_boundaries"]}
    assert bounds[0]["gap_median_ms"] == pytest.approx(1.250, abs=1e-3) and bounds[0]["steps"] == 1
    assert all(bounds[r]["gap_max_ms"] < 0.002 for r in range(1, 8))
    assert all(b["start_delay_median_ms"] is None for b in bounds.values())
    rows = {(r["rank"], r["step"]): r for r in doc["steps"]}
    assert rows[(0, 11)]["gap_before_ms"] == pytest.approx(1.250, abs=1e-3) and rows[(0, 10)]["gap_before_ms"] is None
    assert rows[(0, 11)]["start_delay_ms"] is None


def test_the_page_and_terminal_say_what_a_traces_gap_is():
    from rich.console import Console

    from commscope.analyze.report_context import report_context
    from reports import report_terminal
    from reports.sections import render_steps

    trace = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    doc = summarize(trace, with_hta=False)
    con = Console(width=160, record=True)
    report_terminal.print_report_summary(doc, con)
    text = " ".join(con.export_text().split())
    assert "Device idle at step boundaries (waiting for the host)" in text and "start delay" not in text
    assert "idle % of period" in text and "host % of wall" not in text
    assert "gap: the device idle between one step's last device work and the next one's first" in text
    page = render_steps(report_context(trace, doc, with_layout=False))
    assert "it waited for the host to launch the next step" in page
    assert "start_delay" not in page.lower().replace(" ", "_")
    assert "No delay to a step&#x27;s first compute" in page or "No delay to a step's first compute" in page
