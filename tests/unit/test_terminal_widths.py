"""The terminal tables of `doctor` (straggler, hang, crash), `report` and `compare` at 80, 100 and 160 columns:
no line wider than the terminal, no cell broken inside a word or a number, every number the --json figure
as rounded on screen, no raw epoch-ns time, headers in words (never snake_case), booleans as yes/no; a column
left out for width is named under its table. Each command runs in-process through commscope.cli.main, as a
user's shell would run it with COLUMNS set."""
from __future__ import annotations

import json
import os
import re
import shutil

import orjson
import pytest

from cli_result import run_main
from commscope.analyze.diagnosis import evidence_tables
from paths import TESTS
from report_trace import make_trace, write_run_dir
from rundirs import write_json
from test_compare_labels import make_run

WIDTHS = [80, 100, 160]
LATE_NS = 3_000_000_000
NUMBER = re.compile(r"[+-]?\d{1,3}(,\d{3})*(\.\d+)?|[+-]?\d+(\.\d+)?")
EPOCH_NS = re.compile(r"\d{13,}")


def _cli(capsys, monkeypatch, width: int, *args, code: int = 0) -> tuple[str, str]:
    monkeypatch.setenv("COLUMNS", str(width))
    got, out = run_main(capsys, *args)
    assert got == code, out.err
    return out.out, out.err


def _json(capsys, monkeypatch, *args) -> dict:
    return orjson.loads(_cli(capsys, monkeypatch, 160, *args, "--json")[0])


def _split(line: str, sep: str) -> list[str]:
    parts = line.split(sep)
    if line.startswith(sep):  # an outer border: nothing outside it
        parts = parts[1:-1]
    return [p.strip() for p in parts]


def table(text: str, title: str, key: str) -> tuple[list[str], list[dict[str, list[str]]]]:
    """The headers (each column's header lines joined) and the rows of the table printed after `title`,
    each row {header: its cell's lines}; a line whose `key` cell is empty continues the row above it."""
    lines = text[text.index(title):].splitlines()
    start = next(i for i, line in enumerate(lines) if "┃" in line)
    end = next(i for i in range(start, len(lines)) if "┃" not in lines[i])
    heads = [" ".join(x for x in col if x) for col in zip(*(_split(line, "┃") for line in lines[start:end]))]
    rows: list[dict[str, list[str]]] = []
    for line in lines[end + 1:]:
        if "│" not in line:
            break
        cells = dict(zip(heads, _split(line, "│")))
        if cells[key] or not rows:
            rows.append({h: [c] if c else [] for h, c in cells.items()})
        else:
            for h, c in cells.items():
                if c:
                    rows[-1][h].append(c)
    return heads, rows


def assert_fits(text: str, width: int) -> None:
    assert max(len(line) for line in text.splitlines()) <= width, text
    assert not EPOCH_NS.search(text), "a raw epoch-ns time"


def assert_number(cell: list[str], figure) -> None:
    """One line, a whole number, and `figure` rounded as many decimals as it shows."""
    assert len(cell) == 1 and NUMBER.fullmatch(cell[0]), cell
    shown = cell[0].replace(",", "")
    decimals = len(shown.partition(".")[2])
    assert float(shown) == pytest.approx(round(float(figure), decimals), abs=10 ** -decimals / 2 + 1e-12), (cell, figure)


def assert_word(cell: list[str], value) -> None:
    """`value` whole: its lines break only between its words."""
    assert " ".join(cell) == " ".join(str(value).split()), (cell, value)


def assert_header_words(heads: list[str], known: list[str]) -> None:
    assert all("_" not in h for h in heads), heads
    assert set(heads) <= set(known), heads


# ---- doctor --------------------------------------------------------------------------------------------------
# the header, in words with its unit, of each evidence key the doctor prints
HEADS = {"rank": "rank", "step": "step", "instances": "collectives", "waiting_caused_ms": "waiting caused (ms)",
         "mean_wait_ms": "mean wait (ms)", "pct_of_median_step": "% of median step", "step_ms": "step time (ms)",
         "sequence": "seq", "label": "label", "op": "op", "last_rank": "last rank",
         "arrival_skew_ms": "arrival skew (ms)", "launch_skew_ms": "launch skew (ms)",
         "launched_last_rank": "launched last", "last_finished_step": "last finished step", "status": "status",
         "role": "role", "launched": "launched", "finished": "finished", "source": "source",
         "last_launched_seq": "last launched seq", "last_launched_label": "last launched label",
         # times as the page shows them (diagnosis.evidence_tables): ms since the evidence's earliest
         "last_launch_ms": "last launch (ms)", "call_ms": "call (ms)", "wait_ms": "wait (ms)",
         "watchdog_fired_ms": "watchdog fired (ms)", "last_step_end_ms": "last step end (ms)",
         "last_region": "last region", "last_region_step": "last region step", "last_region_ms": "last region (ms)",
         "last_region_typical_ms": "last region typical (ms)"}
HEAD_KEY = {head: key for key, head in HEADS.items()}
INSTANCE_KEYS = ["step", "sequence", "label", "op", "last_rank", "waiting_caused_ms", "mean_wait_ms",
                 "arrival_skew_ms", "launch_skew_ms", "launched_last_rank"]


def check_doctor_table(text: str, title: str, key: str, records: list[dict]) -> list[str]:
    """The doctor's table under `title` against `records` (--json's); the headers it shows."""
    heads, rows = table(text, title, key)
    assert_header_words(heads, list(HEAD_KEY))
    assert len(rows) == len(records)
    for row, rec in zip(rows, records):
        for head, cell in row.items():
            v = rec.get(HEAD_KEY[head])  # a key a record lacks prints as a missing value
            if v is None:
                assert cell == ["–"]
            elif isinstance(v, bool):
                assert cell == ["yes" if v else "no"]
            elif isinstance(v, (int, float)):
                assert_number(cell, v)
            else:
                assert_word(cell, v)
    return heads


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    """The recorded CPU run, rank 1 arriving 3 s late at step 1's first reduce_scatter and everything after."""
    dst = tmp_path_factory.mktemp("widths") / "straggler"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", dst)
    events = dst / "rank1" / "events.jsonl"
    late, lines = False, []
    for line in events.read_text().splitlines():
        e = json.loads(line)
        late = late or (e["kind"] == "collective" and e.get("step") == 1 and e.get("op") == "reduce_scatter")
        if late:
            e = {k: x + LATE_NS if k.endswith("_ns") and isinstance(x, int) else x for k, x in e.items()}
        lines.append(json.dumps(e))
    events.write_text("\n".join(lines) + "\n")
    return dst


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_straggler_tables_read_at_every_width(straggler, capsys, monkeypatch, width):
    d = _json(capsys, monkeypatch, "doctor", straggler)
    assert d["verdict"] == "straggler"
    text, _ = _cli(capsys, monkeypatch, width, "doctor", straggler)
    assert_fits(text, width)
    assert text.startswith("straggler: ") and not text.startswith("straggler  straggler")  # the verdict once
    heads = check_doctor_table(text, "Waiting caused per judged step", "rank", d["evidence"])
    assert {"rank", "step", "waiting caused (ms)"} <= set(heads)
    inst = sorted(d["details"]["instances"], key=lambda i: -i["waiting_caused_ms"])[:10]
    title = "collective instances that caused the most waiting"
    heads = check_doctor_table(text, title, "step", inst)
    assert {"label", "op", "waiting caused (ms)"} <= set(heads)
    shown_keys = {HEAD_KEY[h] for h in heads}
    missing = [HEADS[k] for k in INSTANCE_KEYS if k not in shown_keys]
    if missing:  # named under the table
        after = " ".join(text[text.index(title):].split())
        assert "not shown at this width: " in after and all(m in after for m in missing)
    if width >= 160:
        assert not missing


@pytest.fixture
def run4(tmp_path):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), path)
    return path


def _inflight(rank, seq, label, op="reduce_scatter", wait=True):
    t = 1_764_670_000_000_000_000 + 3_000_000_000
    return {"kind": "collective", "rank": rank, "step": 3, "label": label, "phase": "reduce", "op": op,
            "bytes": 8_000_000, "dtype": "bf16", "group": "0", "group_size": 4, "seq": seq, "call_ns": t + rank,
            "return_ns": t + rank + 5, "wait_ns": t + 100 if wait else None, "wait_end_ns": None}


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_hang_prints_no_epoch_times_and_booleans_as_words(run4, capsys, monkeypatch, width):
    # seq 9 launched by ranks 0, 1, 3 (their watchdogs fired); rank 2 never did (as test_doctor's hang)
    for r in (0, 1, 3):
        rows = [_inflight(r, 9, "attn"), _inflight(r, 10, "mlp", wait=False)]
        write_json(run4 / f"rank{r}" / "watchdog.json", {
            "schema_version": 1, "rank": r, "world_size": 4, "timeout_s": 3, "fired_ns": 1_764_670_005_000_000_000,
            "waiting_on": rows[0], "inflight": rows, "last_step": 2, "stacks": {}})
        write_json(run4 / f"rank{r}" / "status.json", {"status": "failed", "error": "hang watchdog: waited",
                                                       "last_step": 2})
    write_json(run4 / "rank2" / "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)",
                                                "last_step": 2})
    d = _json(capsys, monkeypatch, "doctor", run4)
    assert d["verdict"] == "hang" and any(k.endswith("_ns") for e in d["evidence"] for k in e)
    text, _ = _cli(capsys, monkeypatch, width, "doctor", run4)
    assert_fits(text, width)
    # the page's tables: the culprit's first, under the title; the waiting ranks' next, times in ms
    groups, _ = evidence_tables([{k: v for k, v in e.items() if k != "error"} for e in d["evidence"]])
    assert [len(g) for g in groups] == [1, 3] and groups[0][0]["rank"] == 2
    heads = check_doctor_table(text, "Evidence", "rank", groups[0])
    assert "launched" in heads and not any("ns" in h.split() for h in heads)
    rest = text[text.index("Evidence"):]
    second = rest[rest.index("┘") + 1:]  # after the culprit's table
    heads, rows = table(second, "┏", "rank")
    assert "watchdog fired (ms)" in heads and [r["rank"] for r in rows] == [["0"], ["1"], ["3"]]
    # the error, whole, under the table
    assert "rank 2's error: Terminated: terminated by signal 15 (SIGTERM)" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_crash_prints_no_last_step_end_ns(run4, capsys, monkeypatch, width):
    os.remove(run4 / "rank3" / "status.json")
    lines = (run4 / "rank3" / "events.jsonl").read_text().splitlines()
    (run4 / "rank3" / "events.jsonl").write_text("".join(x + "\n" for x in lines if json.loads(x)["step"] != 2))
    write_json(run4 / "rank1" / "status.json", {"status": "failed", "last_step": 2, "error": (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
        "by peer [127.0.0.1]:30413. This is typically caused by a remote worker crashing.")})
    d = _json(capsys, monkeypatch, "doctor", run4)
    assert d["verdict"] == "crash" and "last_step_end_ns" in d["evidence"][0]
    text, _ = _cli(capsys, monkeypatch, width, "doctor", run4)
    assert_fits(text, width)
    groups, _ = evidence_tables([{k: v for k, v in e.items() if k != "error"} for e in d["evidence"]])
    heads = check_doctor_table(text, "Evidence", "rank", groups[0])
    assert {"rank", "last finished step", "status"} <= set(heads)
    assert "Connection closed by peer" in " ".join(text.split())


# ---- report --------------------------------------------------------------------------------------------------
REPORT_HEADS = {"label": None, "op": "op", "calls": "count", "exposed ms/rank": "exposed_ms", "queued %": None,
                "mean ms": "mean_ms", "hidden %": "hidden_pct", "busbw GB/s": "busbw_gbps"}


@pytest.mark.parametrize("width", WIDTHS)
def test_report_keeps_the_label_and_every_number_whole(straggler, tmp_path, capsys, monkeypatch, width):
    doc = _json(capsys, monkeypatch, "report", straggler, "--no-hta")
    text, _ = _cli(capsys, monkeypatch, width, "report", straggler, "-o", tmp_path / "r.html", "--no-hta")
    assert_fits(text, width)
    title = "Top exposed collectives"
    heads, rows = table(text, title, "exposed ms/rank")
    assert_header_words(heads, list(REPORT_HEADS))
    assert heads[0] == "label" and "exposed ms/rank" in heads
    ranked = sorted(doc["labels"].items(), key=lambda kv: -(kv[1].get("exposed_ms") or 0.0))[:8]
    assert len(rows) == len(ranked)
    for row, (label, v) in zip(rows, ranked):
        assert_word(row["label"], label)
        for head, cell in row.items():
            key = REPORT_HEADS[head]
            if key == "op":
                assert cell == [v["op"]]
            elif key and not cell[0].startswith("<"):
                assert_number(cell, v[key])
    missing = [h for h in REPORT_HEADS if h not in heads]
    caption = " ".join(text[text.index(title):].split())
    if missing:
        assert "not shown at this width: " + ", ".join(h.removesuffix(" GB/s") for h in reversed(missing)) in caption
    if width >= 100:
        assert not missing
    # the caption is one left-aligned paragraph: no centred orphan line such as "compute hid"
    assert not any(line.startswith("  ") and line.strip() in caption and len(line.strip()) < 20
                   for line in text.splitlines()), text


# ---- compare -------------------------------------------------------------------------------------------------
def _groups(tmp_path, runs):
    base, cand = tmp_path / "base", tmp_path / "cand"
    for i in range(runs):
        make_run(base / f"r{i}", {"attn_gate_bank": [9, 2.0 + 0.1 * i, 2.1, 1.9], "reduce_scatter_mlp": [9, 1, 1.1, 0.9]},
                 [50, 10 + 0.2 * i, 10.1, 9.9])
        make_run(cand / f"r{i}", {"attn_gate_bank": [9, 0.5 + 0.1 * i, 0.6, 0.4], "reduce_scatter_mlp": [9, 1.05, 1.0, 0.95]},
                 [50, 8.5 + 0.1 * i, 8.6, 8.4])
    return base, cand


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_label_deltas_fit_the_terminal(tmp_path, capsys, monkeypatch, width):
    base, cand = _groups(tmp_path, runs=5)
    doc = _json(capsys, monkeypatch, "compare", base, cand)
    text, _ = _cli(capsys, monkeypatch, width, "compare", base, cand)
    assert_fits(text, width)
    heads, rows = table(text, "Per label, ms per step", "base ms")
    assert {"label", "base ms", "cand ms", "Δ ms", "verdict"} <= set(heads)
    assert len(rows) == len(doc["labels"])
    for row, rec in zip(rows, doc["labels"]):
        assert_word(row["label"], rec["label"])
        assert_number(row["base ms"], rec["base_ms"])
        assert_number(row["cand ms"], rec["cand_ms"])
        assert_number(row["Δ ms"], rec["delta_ms"])
        assert_word(row["verdict"], rec["verdict"])


def test_compare_says_when_the_gate_cannot_be_evaluated(tmp_path, capsys, monkeypatch):
    base, cand = _groups(tmp_path, runs=1)
    # a gate that cannot show the candidate is not slower fails (docs/compare.md), saying so in one line
    out, err = _cli(capsys, monkeypatch, 80, "compare", base, cand, "--fail-if-slower", "0.05", code=1)
    assert len(err.strip().splitlines()) == 1 and "could not be evaluated" in err and "at least two runs" in err
    assert err.strip().endswith("so it fails (exit 1): a gate that cannot show a candidate is not slower does not pass.")
    base, cand = _groups(tmp_path / "more", runs=3)
    out, err = _cli(capsys, monkeypatch, 80, "compare", base, cand, "--fail-if-slower", "0.05")
    assert "could not be evaluated" not in err


# ---- report: overlap and step-boundary tables ----------------------------------------------------------------
def _boundary_run(path):
    from rundirs import write_run
    from test_load_rundir import _two_step_records

    write_run(str(path), {r: _two_step_records(r) for r in (0, 1)}, world_size=2,
              summary={"status": "completed", "backend": "gloo", "device": "cpu", "steps": 2},
              config={"args": {"preset": "tiny"}}, meta={"backend": "gloo", "device": "cpu"})
    return path


BOUNDARY_HEADS = {"rank": "rank", "host % of wall": "host_pct", "gap median ms": "gap_median_ms",
                  "gap max ms": "gap_max_ms", "start delay median ms": "start_delay_median_ms"}


@pytest.mark.parametrize("width", WIDTHS)
def test_report_overlap_and_step_boundary_tables_fit(tmp_path, capsys, monkeypatch, width):
    """Both tables are fitted like the others: the title a left-aligned line of its own, every header
    whole words, every number the --json figure, whole; no line wider than the terminal."""
    run = _boundary_run(tmp_path / "run")
    doc = _json(capsys, monkeypatch, "report", run, "--no-hta")
    text, _ = _cli(capsys, monkeypatch, width, "report", run, "-o", tmp_path / "r.html", "--no-hta")
    assert_fits(text, width)
    lines = text.splitlines()
    for title in ("Communication overlap by rank", "Host time at step boundaries"):
        assert title in lines, text  # not centred over the table
    heads, rows = table(text, "Communication overlap by rank", "rank")
    assert heads == ["rank", "recorded spans %"]
    overlap = doc["recorded_comm_overlap_pct_by_rank"]
    assert [r["rank"] for r in rows] == [[str(k)] for k in overlap]
    for row, v in zip(rows, overlap.values()):
        assert_number(row["recorded spans %"], v)
    heads, rows = table(text, "Host time at step boundaries", "rank")
    assert heads == list(BOUNDARY_HEADS)  # 5 short numbers fit at 80 columns: nothing left out
    assert len(rows) == len(doc["step_boundaries"]) == 2
    for row, b in zip(rows, doc["step_boundaries"]):
        for head, cell in row.items():
            assert_number(cell, b[BOUNDARY_HEADS[head]])


def test_step_boundary_table_leaves_columns_out_rather_than_cut_a_number():
    """Where the figures are too wide for every column, the start delay goes first, named under the
    table; the numbers shown are whole."""
    from rich.console import Console

    from reports.report_terminal import print_report_summary

    def rank(r):
        return {"rank": r, "steps": 3, "gap_median_ms": 123456.789, "gap_max_ms": 1234567.891,
                "start_delay_median_ms": 23456.5, "host_pct": 30.0}

    con = Console(record=True, width=50)
    print_report_summary({"labels": {}, "ranks": 1024, "step_boundaries": [rank(1000), rank(1001)]}, con)
    text = con.export_text()
    assert_fits(text, 50)
    heads, rows = table(text, "Host time at step boundaries", "rank")
    assert heads == ["rank", "host % of wall", "gap median ms", "gap max ms"]
    assert [(r["gap median ms"], r["gap max ms"]) for r in rows] == [(["123,456.789"], ["1,234,567.891"])] * 2
    tail = " ".join(text[text.index("Host time at step boundaries"):].split())
    assert "not shown at this width: start delay median ms; --json has every figure." in tail
    assert "start delay:" not in tail  # the caption explains only the columns shown
