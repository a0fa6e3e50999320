"""One byte format on the whole page: reports.tables.byte_size (decimal units, 3 significant digits), in
every table cell of a byte size and in the timeline's hovers (the plotly figure's and the rows report.js
draws, csBytes, run here in node where it is installed); bandwidths in GB/s by reports.tables.bandwidth.
Checked on pages of recorded test data: every byte figure the page shows reads in that format and formats
its exact value (`data-value`), and no other byte format (raw "… bytes", KiB, MiB, KB) is left."""
from __future__ import annotations

import html
import json
import re
import shutil

import pytest

from commscope.analyze.report_context import report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from report_js import js_map
from reports.page import render_html
from reports.tables import bandwidth, byte_size, is_bytes

BYTE_TEXT = re.compile(r"(?:\d{1,3} B|\d{1,3}(?:\.\d{1,2})? [kMGTPE]B|–)")
OTHER_BYTE_FORMATS = re.compile(r"\b\d[\d,.]*\s*(?:bytes|[KMGT]iB|KB)\b")
VALUES = [0, 1, 512, 999, 1000, 4096, 65_536, 999_999, 1_048_576, 268_435_456, 81_559_781_376, 2 ** 50, None,
          float("nan")]


def test_byte_size_is_decimal_with_three_significant_digits():
    assert [byte_size(v) for v in VALUES] == ["0 B", "1 B", "512 B", "999 B", "1.00 kB", "4.10 kB", "65.5 kB",
                                              "1.00 MB", "1.05 MB", "268 MB", "81.6 GB", "1.13 PB", "–", "–"]


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run report.js's csBytes")
def test_report_js_writes_bytes_as_the_page_does():
    vals = [v for v in VALUES if v is not None and v == v] + [123_456_789, 5_000, 999_499]
    assert js_map("csBytes", vals + [None]) == [byte_size(v) for v in vals] + ["–"]


def page(src: str) -> str:
    tr = load_path(str(TESTS / "data" / src))
    return render_html(report_context(tr, summarize(tr, with_hta=False)))


def cells(doc: str):
    """(column key, text, exact value) of every numeric table cell, the key from its column's header."""
    for table in re.findall(r"<table.*?</table>", doc, flags=re.S):
        keys = re.findall(r'<th data-key="([^"]*)"', table)
        for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S):
            tds = re.findall(r'<td( class="num")?( data-value="([^"]*)")?>(.*?)</td>', row, flags=re.S)
            if len(tds) == len(keys):
                for key, (num, _, exact, text) in zip(keys, tds):
                    if num:
                        yield html.unescape(key), html.unescape(text), exact or text.replace(",", "")
            elif len(tds) == 2 and not keys:  # a key/value table: the key in the first cell
                (_, _, _, key), (num, _, exact, text) = tds
                if num:
                    yield html.unescape(key), html.unescape(text), exact or text.replace(",", "")


@pytest.mark.parametrize("src", ["cpurun-hooks-gloo2", "modded-nanogpt-8xh100"])
def test_every_byte_figure_on_the_page_has_the_one_format(src):
    doc = page(src)
    found = {"bytes": 0, "gbps": 0}
    for key, text, exact in cells(doc):
        if is_bytes(key):
            assert BYTE_TEXT.fullmatch(text) and text == byte_size(float(exact)), (key, text, exact)
            found["bytes"] += 1
        elif key.endswith("_gbps"):
            assert text == bandwidth(float(exact)), (key, text, exact)
            found["gbps"] += 1
    assert found["bytes"] >= 20 and found["gbps"] >= 5, found  # the labels tables: bytes per call and per rank, GB/s
    # the timeline's hovers: each collective's bytes in the same format
    hovers = re.findall(r'running %\{customdata\[4\][^"]*","hovertext":\[([^\]]*)\]', doc)  # the collectives'
    texts = [json.loads(f"[{h}]") for h in hovers]
    assert sum(map(len, texts)) >= 20 and all(BYTE_TEXT.fullmatch(t.split("<br>")[0]) for ts in texts for t in ts)
    # nothing else on the page writes a byte figure another way (the scripts' data is not text)
    text = re.sub(r"<script.*?</script>", "", doc, flags=re.S)
    assert OTHER_BYTE_FORMATS.findall(html.unescape(text)) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run report.js's ms3")
def test_report_js_writes_milliseconds_as_the_tables_do():
    """The heatmap's hover text writes ms as the page's tables do: three decimals, thousands separated."""
    vals = [0, 0.0004, 1.5, 999.9996, 1431.216, 2538.689, 1234567.891]
    assert js_map("ms3", vals) == [f"{v:,.3f}" for v in vals]
