"""Bandwidths read the same on the page and in the terminal: 3 significant digits in fixed notation,
"<0.001" for tinier ones, "–" when unknown (null)."""
import copy
import re

from rich.console import Console

from commscope.analyze.report_context import ReportContext
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from reports.report_terminal import print_report_summary
from reports.sections import render_collectives_by_label
from reports.tables import bandwidth, fmt


def test_bandwidth_format():
    cases = {1.61e-06: "<0.001", 9.29e-07: "<0.001", 0.00134: "0.00134", 0.00525: "0.00525", 0.045: "0.0450",
             1.0: "1.00", 9.996: "10.0", 288.2: "288", 329.4: "329", 1234.5: "1,230", 0.0: "0", None: "–",
             float("nan"): "–"}
    assert {v: bandwidth(v) for v in cases} == cases
    assert fmt(0.00134, "busbw_gbps") == "0.00134" and fmt(None, "algbw_gbps") == "–"
    assert fmt(0.00134, "mean_ms") == "0.001"  # other floats keep their 3 decimals


def _terminal_busbw(doc) -> dict:
    con = Console(record=True, width=120)
    print_report_summary(doc, con)
    rows = [[c.strip() for c in line.split("│")] for line in con.export_text().splitlines() if line.count("│") == 7]
    return {r[0]: r[7] for r in rows}


def _page_busbw(doc) -> dict:
    page = render_collectives_by_label(ReportContext(trace=None, summary=doc, window=None))
    table = page[page.index('id="labels-table"'):]
    table = table[:table.index("</table>")]
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        out[cells[0]] = cells[7].replace("&lt;", "<")
    return out


def test_terminal_and_page_print_the_same_bandwidths():
    doc = copy.deepcopy(summarize(load_path(str(TESTS / "data" / "cpurun-hooks-gloo2")), with_hta=False))
    doc["labels"]["attn"]["busbw_gbps"] = None  # unknown
    term, page = _terminal_busbw(doc), _page_busbw(doc)
    assert term == {lab: page[lab] for lab in term}
    assert page["attn"] == "–"
    assert page["scalars"] == "<0.001"
    assert page["mlp"] == bandwidth(doc["labels"]["mlp"]["busbw_gbps"]) and "e" not in page["mlp"]
    assert not any(re.search(r"\de[-+]\d", v) for v in term.values())  # no scientific notation
