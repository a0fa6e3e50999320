"""The terminal `report` says what the input cannot show (the document's problems and notes, capped in
number, each whole), and
how much of each top label's exposed time is queueing behind earlier collectives, within 100 columns."""
import json

from rich.console import Console

from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from reports.report_terminal import CAVEATS_SHOWN, print_report_summary


def render(doc, width=100) -> str:
    con = Console(record=True, width=width)
    print_report_summary(doc, con)
    return con.export_text()


def test_problems_and_notes_are_printed_under_the_tables():
    doc = summarize(load_path(str(TESTS / "data" / "hta-testdata" / "triton_example")), with_hta=False)
    text = render(doc)
    tail = text[text.index("Communication overlap by rank"):]
    assert "problem while loading: the job's world size is unknown" in tail and "taken as 1" in tail
    assert "problem while loading: rank unknown" in tail and "taken as rank 0" in tail
    assert "note: One rank: no cross-rank comparison" in tail
    # 3 problems + 4 notes (one: the device idles through the step): CAVEATS_SHOWN of them, the rest in --json
    assert len(doc["problems"]) + len(doc["notes"]) == CAVEATS_SHOWN + 1 and "… 1 more: 1 note(s), see --json" in text
    assert "keep the device busy for under 1%" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 100


def test_caveats_are_capped_and_long_ones_printed_whole():
    long = " ".join(f"word{i}" for i in range(200))  # ~1,400 characters
    doc = {"labels": {}, "ranks": 2, "problems": [f"problem {i}" for i in range(5)] + [long],
           "notes": ["note a", "note b"]}
    text = render(doc)
    lines = [line for line in text.splitlines() if line.startswith(("problem while loading:", "note:", "…"))]
    assert lines[:CAVEATS_SHOWN] == [f"problem while loading: problem {i}" for i in range(5)] + [lines[5]]
    assert " ".join(text.split()).count(long) == 1  # whole, every word intact across the wrapped lines
    assert "…" not in text[:text.index("… 2 more")]
    assert lines[-1] == "… 2 more: 2 note(s), see --json"  # what is left out, by kind, as doctor counts problems
    assert "note a" not in text


def test_queued_share_beside_the_exposed_time_in_100_columns():
    doc = summarize(load_path(str(TESTS / "data" / "cpurun-hooks-gloo2")), with_hta=False)
    s = doc["labels"]["scalars"]
    # all of its exposed time is queueing: the 4 ms it waited after its own completion is wake-up delay
    assert round(100 * s["queued_ms"] / s["exposed_ms"], 1) == 100.0 and s["wake_delay_ms"] == 3.9671
    text = render(doc)
    assert max(len(line) for line in text.splitlines()) <= 100
    rows = {c[0]: c[1:] for c in ([x.strip() for x in line.split("│")] for line in text.splitlines()
                                  if line.count("│") == 7)}
    # op, calls, exposed ms/rank, queued %, mean ms, hidden %, busbw: whole, not cut with "…"
    assert rows["scalars"][:6] == ["all_reduce", "6", "139.229", "100.0", "59.535", "0.0"]
    assert rows["mlp"][0] == "reduce_scatter+all_gather" and rows["mlp"][3] == "0.0"
    assert "queued %: share of the exposed time spent behind earlier collectives" in " ".join(text.split())
    assert json.dumps(doc, allow_nan=False)
