"""What the figures cannot tell sits right under the page's headline (the summary's notes and the loader's
problems), and a missing HTA is said in the terminal and on the page while --json stays pure JSON."""
import re
import sys

import orjson
from typer.testing import CliRunner

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.cli import app
from commscope.load import load_path
from paths import TESTS
from reports.overview_section import render_summary

HTA_DATA = TESTS / "data" / "hta-testdata"
FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


def summary_page(path) -> tuple[dict, str]:
    tr = load_path(str(path))
    doc = summarize(tr, with_hta=False)
    return doc, render_summary(report_context(tr, doc, with_layout=False))


def box_items(page: str) -> list[str]:
    box = re.search(r'<div class="caveats" id="caveats">(.*?)</div>', page, flags=re.S).group(1)
    return [re.sub(r"<[^>]+>", "", li).replace("&#x27;", "'") for li in re.findall(r"<li[^>]*>(.*?)</li>", box)]


def test_partial_trace_notes_and_problems_sit_under_the_headline():
    doc, page = summary_page(HTA_DATA / "trace_filter")
    assert page.index('class="headline"') < page.index('id="caveats"') < page.index("Most exposed collectives")
    items = box_items(page)
    assert items[0] == "note: " + doc["notes"][0]
    assert items[0].startswith("note: Partial: 2 of the job's 128 ranks are present.")
    assert items[len(doc["notes"])] == "problem while loading: no trace for 126 of the job's 128 ranks (ranks present: 0, 1)"
    # 5 notes (partial, unsized collectives, unpaired collectives, no straggler judged, withheld bandwidth) and
    # 3 problems (missing ranks, unpaired collectives, groups of unknown size taken as spanning the job)
    assert len(items) == len(doc["notes"]) + len(doc["problems"]) == 8


def test_collectives_outside_the_steps_are_said_on_the_first_screen():
    doc, page = summary_page(FIXTURE)
    items = box_items(page)
    assert any(i.startswith("note: 189 of 413 collectives fall outside every step window") for i in items)
    assert doc["collectives_outside_steps"] == 189
    # who made whom wait counts them too: a rank's waiting total says it covers more than the steps
    assert " ".join(page.split()).count("for it in total over all steps 10–11 and the collectives outside "
                                         "every step") >= 1


def test_clean_input_has_no_box():
    doc, page = summary_page(TESTS / "data" / "cpurun-hooks-gloo2")
    assert not doc["notes"] and not doc["problems"] and doc["collectives_outside_steps"] == 0
    assert 'id="caveats"' not in page and "outside every step" not in page


def test_missing_hta_is_said_in_the_terminal_and_on_the_page(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)  # `import` raises ImportError: not installed
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(FIXTURE), "-o", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert re.search(r"note: HTA's analyses were asked for \(--hta, the default\) but did not run: HTA not "
                     r"importable \(\w*Error: ", said)
    assert "pip install 'commscope[hta]'; --no-hta leaves them out." in said
    page = out.read_text()
    assert "HTA&#x27;s analyses were asked for (--hta, the default) but did not run" in page[
        page.index('id="caveats"'):page.index("Most exposed collectives")]
    res = CliRunner().invoke(app, ["report", str(FIXTURE), "--json"])
    assert res.exit_code == 0
    doc = orjson.loads(res.stdout)  # nothing but the document on stdout
    assert doc["hta"]["status"] == "unavailable"
    assert not any("HTA" in n for n in doc["notes"])
    res = CliRunner().invoke(app, ["report", str(FIXTURE), "--no-hta", "-o", str(tmp_path / "n.html")])
    assert res.exit_code == 0 and "HTA's analyses were asked for" not in res.output



def test_unknown_exposure_is_said_unknown_not_zero_on_the_page():
    """A host-only trace whose collectives have no end time: the headline share and the label list say
    'unknown' instead of 0 % and 'No exposed communication'."""
    from commscope.analyze.report_overview import highlights

    doc, page = summary_page(HTA_DATA / "distributed_info_unavailable")
    h = highlights(doc)
    assert h.exposed_pct is None and h.exposed_unknown == ["all_to_all"]
    assert "<b>exposed communication unknown</b>" in page and "% of step time" not in page
    assert "Exposed time unknown for all_to_all" in page and "No exposed communication" not in page
    known, known_page = summary_page(FIXTURE)
    assert highlights(known).exposed_unknown == [] and "% of step time</b>" in known_page


def test_a_run_directory_says_which_collectives_were_outside_its_steps(tmp_path):
    """A run directory's steps are the script's rec.step(...) scopes, not a profiler's window."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    events = run / "rank0" / "events.jsonl"
    lines = events.read_text().splitlines()
    first = next(i for i, x in enumerate(lines) if '"kind":"collective"' in x)
    lines[first] = re.sub(r'"step":\d+', '"step":-1', lines[first])
    events.write_text("\n".join(lines) + "\n")
    doc, _ = summary_page(run)
    (note,) = [n for n in doc["notes"] if "fall outside every step window" in n]
    assert note.startswith("1 of ") and "(recorded outside every `rec.step(...)`)" in note
    assert "profiled" not in note and doc["collectives_outside_steps"] == 1
