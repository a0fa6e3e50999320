"""`commscope report` and `commscope export` end to end through the real loader and summarize(): a
hand-built run directory with known numbers, the gloo CPU traces in tests/data, and the 8-rank H100 fixture."""
from __future__ import annotations

from collections import Counter
import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from commscope.analyze.left_in_flight import left_in_flight
from commscope.analyze.summary import summarize
from commscope.cli import app
from commscope.errors import UserError
from reports.perfetto import build_perfetto
from reports.sections import NOTE_FIELDS
from commscope.load import load_path
from report_trace import make_trace, write_run_dir
from test_export import check_no_overlap
from test_report import parse, value
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"
GLOO2 = TESTS / "data" / "gloo2"


def listing(p: Path) -> list:
    return sorted((str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns) for f in p.rglob("*"))


def table_values(table) -> dict:
    """Rows by their first cell, columns by the header's data-key, cells as exact values (test_report.value)."""
    header, *rows = table
    cols = [c[0] for c in header]
    return {r[0][1]: {cols[i]: value(r[i]) for i in range(1, len(cols))} for r in rows}


def comparable(labels: dict) -> dict:
    """summarize()'s label dict as the main table shows it: numbers as floats, missing values as the '–'
    text; per-rank dicts are separate tables, dicts by label (`queued_behind_ms`) one cell of text, reasons
(`bandwidth_withheld`) a note under the table."""
    out = {}
    for lab, v in labels.items():
        out[lab] = {k: (float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else
                        "–" if x is None or x != x else str(x)) for k, x in v.items()
                    if not isinstance(x, dict) and k not in NOTE_FIELDS}  # reasons: a note under the table
        if "queued_behind_ms" in v:
            out[lab]["queued_behind_ms"] = ", ".join(f"{k}: {x:,.3f}" for k, x in v["queued_behind_ms"].items()) or "–"
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs") / "handbuilt-run"
    write_run_dir(make_trace(style="run"), d)
    return d


def test_report_html_matches_summary_and_leaves_input_alone(run_dir, tmp_path):
    before = listing(run_dir)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"report: {out}" in res.output.replace("\n", "") and "Top exposed collectives" in res.output
    assert listing(run_dir) == before
    p = parse(out.read_text(encoding="utf-8"))
    assert p.external == []
    summary = orjson.loads(orjson.dumps(summarize(load_path(run_dir)), option=orjson.OPT_SERIALIZE_NUMPY))
    assert set(summary["labels"]) == {"attn", "mlp", "scalars"}
    assert table_values(p.tables["labels-table"]) == comparable(summary["labels"])
    # known numbers of the hand-built run: per rank and step attn and mlp are waited on for 20 µs, scalars
    # never → per rank (summarize's unit) 2 calls and 2 × 0.02 ms exposed for attn and mlp, 0 for scalars
    assert summary["labels"]["attn"]["count_per_rank"] == 2 and summary["labels"]["attn"]["count"] == 4
    assert isinstance(summary["labels"]["attn"]["count"], int) and summary["labels"]["scalars"]["exposed_ms"] == 0
    assert summary["labels"]["attn"]["exposed_ms"] == pytest.approx(0.04, abs=1e-3)
    by_rank = table_values(p.tables["labels-exposed_ms_by_rank"])
    assert by_rank == {lab: {k: float(x) for k, x in v["exposed_ms_by_rank"].items()}
                       for lab, v in summary["labels"].items()}


def test_report_json_is_only_the_summary(run_dir):
    res = CliRunner().invoke(app, ["report", str(run_dir), "--json"])  # click >= 8.2: stdout kept apart
    assert res.exit_code == 0
    doc = orjson.loads(res.stdout)
    assert doc == orjson.loads(orjson.dumps(summarize(load_path(run_dir)), option=orjson.OPT_SERIALIZE_NUMPY
                                            | orjson.OPT_NON_STR_KEYS))
    assert doc["ranks"] == 2


def test_report_steps_and_default_output(run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["report", str(run_dir), "--steps", "1:2"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "handbuilt-run-report.html").read_text(encoding="utf-8")
    assert "1 ≤ step &lt; 2" in page or "1 ≤ step < 2" in page
    counts = table_values(parse(page).tables["labels-table"])
    assert counts["attn"]["count_per_rank"] == 1.0 and counts["attn"]["count"] == 2  # one step: 1 per rank


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "commscope", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_bad_input_is_one_line_exit_2(run_dir, tmp_path):
    r = run_cli("report", str(tmp_path / "missing"))  # one real process: exit code and stderr format
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("commscope: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for args, msg in ((["report", str(run_dir), "--steps", "7:9", "-o", str(tmp_path / "x.html")], "selects none"),
                      (["report", str(run_dir), "--steps", "x"], "--steps must look like"),
                      (["report", str(run_dir), "-o", str(run_dir / "r.html")], "inside the input directory"),
                      (["export", str(run_dir)], "--perfetto"),
                      (["export", str(run_dir), "--perfetto", str(run_dir / "p.json")], "inside the input")):
        res = CliRunner().invoke(app, args)
        assert isinstance(res.exception, UserError) and msg in str(res.exception), (args, res.exception)
    assert not (tmp_path / "x.html").exists()


def test_export_cli_on_run_dir(run_dir, tmp_path):
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--perfetto", str(out)])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(out.read_bytes())
    check_no_overlap(doc)
    comm = [e for e in doc["traceEvents"] if e.get("cat") == "comm"]
    assert len(comm) == 12 and {e["args"]["label"] for e in comm} == {"attn", "mlp", "scalars"}
    res = CliRunner().invoke(app, ["export", str(run_dir), "--perfetto", str(out), "--steps", "1"])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(out.read_bytes())
    comm = [e for e in doc["traceEvents"] if e.get("cat") == "comm"]
    assert len(comm) == 6 and {e["args"]["step"] for e in comm} == {1}


def test_gloo_cpu_traces_report(tmp_path):
    src = tmp_path / "gloo2"
    shutil.copytree(GLOO2, src)
    out = tmp_path / "g.html"
    res = CliRunner().invoke(app, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    p = parse(out.read_text(encoding="utf-8"))
    summary = orjson.loads(orjson.dumps(summarize(load_path(src)), option=orjson.OPT_SERIALIZE_NUMPY))
    assert table_values(p.tables["labels-table"]) == comparable(summary["labels"])


@pytest.fixture(scope="module")
def fixture_trace(tmp_path_factory):
    src = tmp_path_factory.mktemp("fx") / "modded-nanogpt-8xh100"
    shutil.copytree(FIXTURE, src)
    return load_path(src)


def test_fixture_report_size_and_export(fixture_trace, tmp_path):
    from commscope.analyze.report_context import report_context
    from reports.page import render_html

    # the layout analysis (~25 s here) is tested by its owner (tests/test_layout*); this one is about size
    # and the report's own tables

    tr = fixture_trace
    summary = summarize(tr, with_hta=False)  # HTA's own numbers are tested with the loader (tests/test_hta*)
    page = render_html(report_context(tr, summary, with_layout=False))
    assert len(page.encode()) < 10e6
    p = parse(page)
    assert p.external == [] and "Timeline" in p.h2
    assert table_values(p.tables["labels-table"]) == comparable(
        orjson.loads(orjson.dumps(summary["labels"], option=orjson.OPT_SERIALIZE_NUMPY)))
    doc = build_perfetto(tr, left_in_flight(tr))
    check_no_overlap(doc)
    procs = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == set(range(8))
    cats = Counter(e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X")
    assert cats["comm"] == len(tr.collectives.dropna(subset=["end_ns"])) > 0
    # one step range per rank and CPU ProfilerStep annotation of the raw traces (2 steps × 8 ranks)
    raw_steps = sum(e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
                    for f in sorted(FIXTURE.glob("rank*.json.gz"))
                    for e in orjson.loads(gzip.decompress(f.read_bytes()))["traceEvents"])
    assert cats["compute"] == len(tr.compute) and cats["step"] == len(tr.steps) == raw_steps == 16


RECORDED = TESTS / "data" / "cpurun-hooks-gloo2"


def test_recorded_cpu_run_report_matches_events(tmp_path):
    """A real 2-rank gloo run: the page's per-label numbers equal summarize()'s, and count / bytes / exposed
    time recomputed here straight from events.jsonl (independently of the loader) agree with them."""
    import statistics

    src = tmp_path / "cpurun"
    shutil.copytree(RECORDED, src)
    out = tmp_path / "c.html"
    res = CliRunner().invoke(app, ["report", str(src), "-o", str(out), "--no-hta"])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    shown = table_values(parse(page).tables["labels-table"])
    summary = orjson.loads(orjson.dumps(summarize(load_path(src), with_hta=False), option=orjson.OPT_SERIALIZE_NUMPY))
    assert shown == comparable(summary["labels"])

    per = {}  # label → rank → list of collective records
    hooks = 0
    for rank_dir in sorted(src.glob("rank*")):
        for line in (rank_dir / "events.jsonl").read_text().splitlines():
            ev = orjson.loads(line)
            if ev["kind"] == "collective":
                per.setdefault(ev["label"], {}).setdefault(ev["rank"], []).append(ev)
            hooks += ev["kind"] == "hook"
    assert set(shown) == set(per) and len(per) >= 13 and hooks > 0
    for label, ranks in per.items():
        count = statistics.mean(len(v) for v in ranks.values())
        # blocked from the wait until the collective completed (its end), no longer
        exposed = statistics.mean(sum(max(min(e["wait_end_ns"], e["end_ns"]) - e["wait_ns"], 0) for e in v
                                      if e["wait_ns"] is not None) for v in ranks.values()) / 1e6
        nbytes = statistics.median(e["bytes"] for v in ranks.values() for e in v)
        assert shown[label]["count_per_rank"] == pytest.approx(count)
        assert shown[label]["count"] == sum(len(v) for v in ranks.values())
        assert shown[label]["bytes"] == pytest.approx(nbytes)
        assert shown[label]["exposed_ms"] == pytest.approx(exposed, abs=1e-3)  # summarize rounds to 4 decimals
        # gloo moves tiny tensors at MB/s: 4 significant digits, never a rounded-away 0
        assert summary["labels"][label]["busbw_gbps"] > 0 and summary["labels"][label]["algbw_gbps"] > 0
    from commscope.analyze.timeline_bars import timeline_bars
    from reports.timeline import timeline_figure

    fig = timeline_figure(timeline_bars(load_path(src)))  # 6 steps: drawn whole by default
    assert sum(len(t.x) for t in fig.data if (t.name or "").startswith("hook ")) == hooks
