"""Under --steps, HTA's side-by-side compares the same window on both sides: HTA reads the whole files, so
commscope's number beside it is the whole trace's too (not the selected steps'), and the document says so.
HTA itself is stood in for by the whole trace's own numbers: what is checked is which numbers meet."""
from __future__ import annotations

from commscope.analyze import hta_bridge
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS


def test_the_comparison_under_steps_is_over_the_whole_trace(monkeypatch):
    tr = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    whole = summarize(tr, with_hta=False)["hta_comm_overlap_pct_by_rank"]
    monkeypatch.setattr(hta_bridge, "run_hta", lambda files: {"status": "ok", "hta_comm_overlap_pct_by_rank": whole})
    doc = summarize(tr, steps=(11, 12))
    assert doc["hta_comm_overlap_pct_by_rank"] != whole  # the window's own numbers differ from the whole's
    rows = doc["hta"]["overlap_comparison"]
    assert [x["hta_comm_overlap_pct"] for x in rows] == [whole[str(r)] for r in range(8)]
    assert {x["diff_pp"] for x in rows} == {0.0} and doc["hta"]["max_hta_comm_overlap_diff_pp"] == 0.0
    assert doc["hta"]["overlap_scope"] == "the whole trace (HTA reads whole files), not the --steps window"
    assert "overlap_scope" not in summarize(tr)["hta"]  # no window: nothing to say
