"""Inputs that hold only some members of their collectives' groups (a partial trace set, one rank, no
collectives): who made whom wait cannot be judged there, and a bandwidth from the present ranks' shortest
duration includes their waiting for the absent ones. The report says so (null with a reason) instead of
listing zeros as measured or a bandwidth 3-4x too low; the full input keeps its numbers exactly.

Inputs: the trimmed 8xH100 traces (tests/data/modded-nanogpt-8xh100), ranks dropped into tmp_path."""
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from commscope.analyze import exposure, skew, waiting
from commscope.analyze.summary import summarize
from commscope.cli import app
from commscope.load import load_path
from paths import TESTS

GPU = TESTS / "data" / "modded-nanogpt-8xh100"
BANDWIDTH_LABELS = ["_allgather_base", "_reduce_scatter_base"]  # the labels of known size


def unjudged(present: str) -> str:
    return f"cannot be judged: no collective has every member of its group in the input{present}"


def withheld(present: str) -> str:
    return (f"no collective of the label has every member of its group in the input{present}, so the shortest "
            "duration over the ranks present includes waiting for the absent ones")


def ranks_folder(tmp_path, ranks) -> str:
    for r in ranks:
        shutil.copy(GPU / f"rank{r}.json.gz", tmp_path / f"rank{r}.json.gz")
    return str(tmp_path)


@pytest.fixture(scope="module")
def full():
    tr = load_path(str(GPU))
    return tr, summarize(tr, with_hta=False)


def test_the_full_input_keeps_its_numbers(full):
    """The figures before partial groups were told apart, to the digit: every instance of known size
    has all 8 members here."""
    _, doc = full
    assert doc["stragglers_reason"] is None
    assert doc["stragglers"] == [
        {"rank": 1, "times_last": 6, "last_share": 0.125, "wait_caused_ms": 88.898, "score": 0.682},
        {"rank": 0, "times_last": 7, "last_share": 0.1458, "wait_caused_ms": 31.8774, "score": 0.2446},
        {"rank": 5, "times_last": 18, "last_share": 0.375, "wait_caused_ms": 5.7781, "score": 0.0443},
        {"rank": 3, "times_last": 4, "last_share": 0.0833, "wait_caused_ms": 2.8285, "score": 0.0217},
        {"rank": 6, "times_last": 8, "last_share": 0.1667, "wait_caused_ms": 0.4959, "score": 0.0038},
        {"rank": 2, "times_last": 4, "last_share": 0.0833, "wait_caused_ms": 0.3113, "score": 0.0024},
        {"rank": 7, "times_last": 1, "last_share": 0.0208, "wait_caused_ms": 0.1503, "score": 0.0012},
        {"rank": 4, "times_last": 0, "last_share": 0.0, "wait_caused_ms": 0.0, "score": 0.0}]  # measured zero
    assert doc["skew"] == {"collectives": 48, "mean_ms": 0.4353, "max_ms": 6.114}
    assert doc["launch_skew"] == {"collectives": 28, "mean_ms": 37.1491, "max_ms": 43.479}
    bw = {lab: (v["algbw_gbps"], v["busbw_gbps"], v["bandwidth_withheld"]) for lab, v in doc["labels"].items()}
    assert bw == {"_allgather_base": (329.4, 288.2, None), "_reduce_scatter_base": (287.1, 251.2, None),
                  "all_gather": (None, None, None), "reduce_scatter": (None, None, None)}
    assert not any("withheld" in n or "cannot be judged" in n for n in doc["notes"])


def test_seven_of_eight_ranks_judge_nobody_and_withhold_bandwidth(tmp_path):
    doc = summarize(load_path(ranks_folder(tmp_path, range(7))), with_hta=False)
    assert doc["stragglers"] is None
    assert doc["stragglers_reason"] == unjudged(" (7 of 8 ranks)")
    assert doc["skew"] == {"collectives": 0, "mean_ms": None, "max_ms": None}
    # before: 28 instances, mean spread 37.1 ms, over 7 launches of 8
    assert doc["launch_skew"] == {"collectives": 0, "mean_ms": None, "max_ms": None}
    for lab in BANDWIDTH_LABELS:
        v = doc["labels"][lab]
        assert (v["algbw_gbps"], v["busbw_gbps"], v["bandwidth_withheld"]) == (None, None, withheld(" (7 of 8 ranks)"))
    # labels of unknown size have no bandwidth for that reason, which a note of its own gives
    assert doc["labels"]["all_gather"]["bandwidth_withheld"] is None
    assert ("Stragglers, arrival skew and launch skew " + unjudged(" (7 of 8 ranks)") + ".") in doc["notes"]
    assert ("Bandwidth withheld for _allgather_base, _reduce_scatter_base: none of their collectives has every "
            "member of its group in the input (7 of 8 ranks), so the shortest duration over the ranks present "
            "includes waiting for the absent ones.") in doc["notes"]
    assert doc["arrival_lateness"]["arrivals"] == 0


def test_one_rank_judges_nobody_and_withholds_bandwidth(tmp_path):
    doc = summarize(load_path(ranks_folder(tmp_path, [0])), with_hta=False)
    assert (doc["stragglers"], doc["stragglers_reason"]) == (None, unjudged(" (1 of 8 ranks)"))
    assert doc["launch_skew"]["collectives"] == 0
    # before: busbw 75.94 and 85.39 GB/s where the eight ranks give 288 and 251
    assert [doc["labels"][lab]["busbw_gbps"] for lab in BANDWIDTH_LABELS] == [None, None]
    assert [doc["labels"][lab]["bandwidth_withheld"] for lab in BANDWIDTH_LABELS] == [withheld(" (1 of 8 ranks)")] * 2
    # the "One rank" note says that no cross-rank comparison is possible: no second sentence for it
    assert not any(n.startswith("Stragglers, arrival skew") for n in doc["notes"])


def test_an_empty_trace_judges_nobody(tmp_path):
    f = tmp_path / "empty.json"
    f.write_text(json.dumps({"traceEvents": []}))
    doc = summarize(load_path(str(f)), with_hta=False)
    assert (doc["stragglers"], doc["stragglers_reason"]) == (None, "cannot be judged: the input holds no collectives")
    assert doc["labels"] == {} and doc["launch_skew"] == {"collectives": 0, "mean_ms": None, "max_ms": None}


def test_some_incomplete_instances_leave_the_complete_ones_judged(full):
    """Rank 7's collectives of step 10 removed: those instances lose their last arrival and transfer
    time; the others keep theirs, so a label's bandwidth is over its complete collectives only."""
    tr, _ = full
    part = tr.select_ranks(tr.ranks)
    c = part.collectives
    part.collectives = c[~((c["rank"] == 7) & (c["step"] == 10))].reset_index(drop=True)
    table = exposure.collective_table(part)
    n = table.groupby(["group", "seq"])["rank"].transform("nunique")
    assert table["group_complete"].tolist() == (n >= table["group_size"]).tolist()
    assert not table["group_complete"].all() and table["group_complete"].any()
    assert table.loc[~table["group_complete"], "transfer_ns"].isna().all()
    done = table[table["group_complete"]]
    assert (done["transfer_ns"] == done.groupby(["group", "seq"])["duration_ns"].transform("min")).all()

    doc = summarize(part, with_hta=False)
    assert doc["stragglers_reason"] is None and doc["stragglers"]
    assert doc["skew"]["collectives"] == len(waiting.instances(table)) < 48
    for lab in BANDWIDTH_LABELS:
        rows = done[(done["label"] == lab) & done["bytes"].notna() & (done["transfer_ns"] > 0)]
        want = (rows["busbw_gbps"] * rows["transfer_ns"]).sum() / rows["transfer_ns"].sum()
        v = doc["labels"][lab]
        assert v["bandwidth_withheld"] is None and v["busbw_gbps"] == pytest.approx(want, rel=5e-4)


def test_unjudged_reasons_on_small_frames():
    base = {"label": "x", "op": "all_reduce", "step": 0, "timing": "kernel", "call_ns": 0}
    rows = [dict(base, rank=r, group="0", seq=0, group_size=2, start_ns=10 * r) for r in (0, 1)]
    c = pd.DataFrame(rows)
    inst = waiting.instances(c)
    assert len(inst) == 1 and waiting.unjudged(inst, c, 2, 2) is None
    assert waiting.by_rank(inst, [0, 1])["wait_caused_ns"].tolist() == [10.0, 0.0]  # rank 0 waited 10 ns
    one = c[c["rank"] == 0]
    assert waiting.unjudged(waiting.instances(one), one, 1, 2) == unjudged(" (1 of 2 ranks)")
    assert waiting.by_rank(waiting.instances(one), [0]).empty  # no row of zeros
    alone = one.assign(group_size=1)  # a group of one: nothing to compare, nobody missing
    assert waiting.unjudged(waiting.instances(alone), alone, 1, 1) == (
        "cannot be judged: no collective has a known arrival on two or more ranks")
    assert skew.launch_skew(one.assign(call_ns=5)).empty
    assert list(skew.complete(c, np.array(["0"]), np.array([0]), np.array([1]))) == [False]


def test_page_and_terminal_say_why(tmp_path):
    (tmp_path / "in").mkdir()
    src = ranks_folder(tmp_path / "in", range(7))
    page = tmp_path / "page.html"
    res = CliRunner().invoke(app, ["report", src, "-o", str(page), "--no-hta"], terminal_width=200)
    assert res.exit_code == 0, res.output
    html = page.read_text()
    section = html[html.index('<details id="stragglers">'):]
    section = section[:section.index("</details>")]
    assert ('<p class="empty" id="stragglers-unjudged">Stragglers, arrival skew and launch skew '
            + unjudged(" (7 of 8 ranks)") + ".</p>") in section
    assert "stragglers-table" not in section and "launch-skew" not in section and "Wait caused" not in section
    assert (f'id="stragglers-unjudged-summary">Who made whom wait {unjudged(" (7 of 8 ranks)")}.</p>') in html
    assert ('<p class="note bandwidth-withheld">Bandwidth withheld for _allgather_base, _reduce_scatter_base (a '
            f"dash in the table): {withheld(' (7 of 8 ranks)')}.</p>") in html
    out = " ".join(res.output.split())  # the terminal wraps its notes
    assert "note: Stragglers, arrival skew and launch skew " + unjudged(" (7 of 8 ranks)") + "." in out
    assert "note: Bandwidth withheld for _allgather_base, _reduce_scatter_base:" in out
    top = res.output[:res.output.index("mean ms:")]  # the top exposed table: dashes in the busbw column
    assert re.search(r"_allgather_base .* – *$", top, re.M)


def test_a_job_without_collectives_is_said_to_hold_none_by_the_doctor_too(tmp_path):
    """Two ranks' traces with steps and no collective (a memory- or compute-only profile): the doctor says the
    input holds no collectives, as the report does, not that none was reached by every member."""
    from commscope.pipeline import diagnose_path

    for r in range(2):
        (tmp_path / f"rank{r}.json").write_text(json.dumps({
            "distributedInfo": {"rank": r, "world_size": 2, "backend": "nccl"},
            "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                             "ts": 1000.0 * s, "dur": 900.0} for s in range(3)]}))
    d = diagnose_path(str(tmp_path))
    assert d.verdict == "insufficient"
    assert d.summary.endswith("stragglers cannot be judged: the input holds no collectives.")
    assert summarize(load_path(str(tmp_path)), with_hta=False)["stragglers_reason"] == (
        "cannot be judged: the input holds no collectives")
