"""The page's key/value tables and nested data read as labels, not raw keys, and percentages print with
one decimal (the exact value stays in data-value); shares the document keeps as fractions print as
percentages too, and HTA's per-rank results as tables with a rank column and their unit."""
import html
import re

from commscope.analyze.report_context import ReportContext
from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from reports.sections import render_hta, render_steps, render_stragglers
from reports.tables import fmt, key_text, nested, records_table, scalar_table


def _rows(fragment: str) -> list[list[str]]:
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)]
            for r in re.findall(r"<tr>(.*?)</tr>", fragment, flags=re.S)]


def test_key_value_tables_show_labels_and_keep_the_key():
    out = scalar_table({"collectives": 3, "gap_median_ms": 1.5, "max_ms": 2.25, "world_size_from": "ranks read"})
    assert [r[0] for r in _rows(out)[1:]] == ["Collectives", "Gap median (ms)", "Max (ms)", "World size taken from"]
    assert '<td data-key="gap_median_ms">Gap median (ms)</td>' in out
    assert [key_text(k) for k in ("deviceProperties", "0", "/a/b_c.json.gz", "status")] == [
        "deviceProperties", "0", "/a/b_c.json.gz", "Status"]


def test_nested_config_headings_are_labels():
    out = nested({"world_size_from": "ranks read", "rank_from": {"0": "assumed"}, "files": {"0": "/x/rank_0.json"}})
    assert re.findall(r"<h4>(.*?)</h4>", out) == ["Rank taken from", "Trace file by rank"]
    assert ["0", "assumed"] in _rows(out) and ["0", "/x/rank_0.json"] in _rows(out)
    assert "rank_from" not in re.sub(r'data-key="[^"]*"', "", out)


def test_percentages_have_one_decimal():
    assert fmt(0.75, "host_pct") == "0.8" and fmt(9.86, "hidden_pct") == "9.9" and fmt(30.353, "pct_of_step") == "30.4"
    assert fmt(0.01, "idle_pct") == "<0.1" and fmt(0.0, "idle_pct") == "0.0"
    # fractions of 1 in the document, percentages on the page like every other share
    assert fmt(0.75, "last_share") == "75.0" and fmt(0.682, "score") == "68.2" and fmt(1, "score") == "100.0"
    assert fmt(0.0004, "score") == "<0.1" and fmt(None, "score") == "–"
    assert fmt(22.88, "idle_time_pctg") == "22.9" and fmt(82.1, "percentage") == "82.1"
    out = records_table([{"rank": 0, "host_pct": 0.75}])
    assert '<td class="num" data-value="0.75">0.8</td>' in out


def test_page_tables_of_a_run_dir():
    doc = summarize(load_path(str(TESTS / "data" / "cpurun-hooks-gloo2")), with_hta=False)
    ctx = ReportContext(trace=None, summary=doc, window=None)
    skew = render_stragglers(ctx)
    skew_table = skew[skew.index('id="skew"'):]
    keys = [r[0] for r in _rows(skew_table[:skew_table.index("</table>")])[1:]]
    assert keys == ["Collective instances", "Mean spread (ms)", "Largest spread (ms)"]
    steps = render_steps(ctx)
    head = re.findall(r'data-key="([^"]+)"', steps[steps.index('id="steps-table"'):])
    body = _rows(steps[steps.index('id="steps-table"'):])[1]
    pct = head.index("compute_pct")
    row0 = doc["steps"][0]
    assert body[pct] == f"{row0['compute_pct']:.1f}" and body[head.index("step_ms")] == f"{row0['step_ms']:,.3f}"

    # the step-gap prose names the columns as their headers read
    note = steps[:steps.index('id="step-boundaries"')] if 'id="step-boundaries"' in steps else steps
    assert "host_pct" not in note and "excluded_steps" not in re.sub(r'data-key="[^"]*"', "", note)


def test_straggler_shares_print_as_percentages_and_keep_the_fraction():
    doc = {"stragglers": [{"rank": 1, "times_last": 6, "last_share": 0.125, "wait_caused_ms": 88.898,
                           "score": 0.6824}]}
    out = render_stragglers(ReportContext(trace=None, summary=doc, window=None))
    table = out[out.index('id="stragglers-table"'):]
    head = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    assert head == ["Rank", "Times last", "Last (% of its collectives)", "Wait caused (ms)",
                    "Share of all waiting caused (%)"]
    assert _rows(table)[1] == ["1", "6", "12.5", "88.898", "68.2"]
    assert 'data-value="0.125">12.5<' in table and 'data-value="0.6824">68.2<' in table


def test_hta_results_by_rank_are_tables_with_a_rank_column_and_units():
    hta = {"status": "ok", "hta_comm_overlap_pct_by_rank": {"0": 29.23, "1": 21.08},
           "temporal_breakdown": {"0": {"idle_time(us)": 9883.3479, "idle_time_pctg": 22.88}}}
    out = render_hta(ReportContext(trace=None, summary={"hta": hta}, window=None))
    assert re.findall(r"<h4>(.*?)</h4>", out) == ["Comm overlap by rank, computed by HTA", "Temporal breakdown"]
    head = [html.unescape(re.sub(r"<[^>]+>", "", h)) for h in re.findall(r"<th[^>]*>(.*?)</th>", out)]
    assert head[2:] == ["Rank", "Comm overlap, HTA's rule, computed by HTA (%)",
                        "Rank", "Idle time (µs)", "Idle time (%)"]  # after the scalars' Key, Value
    assert ["0", "29.2"] in _rows(out) and ["1", "21.1"] in _rows(out) and ["0", "9,883.348", "22.9"] in _rows(out)
    text = re.sub(r'data-key="[^"]*"', "", out)
    assert "pctg" not in text and "Hta comm" not in text and "Idle_time" not in text
