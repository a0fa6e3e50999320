"""Strings from the user's data reach the terminal as the characters they hold, and never cost a number.

A run directory (tests/data/cpurun-hooks-gloo2, relabelled) whose labels hold rich markup ("w[/a]" would end
`report` with a MarkupError traceback if read as markup, "[bold]x" print bold), an emoji code ("enc:x:proj" printed
❌) and a 73-character HuggingFace parameter name (which squeezed every number of report's table to nothing
at 100 columns). Rank 1 is made 5 s late at "enc:x:proj" in step 1, so that `doctor` names the label in its
verdict. Each command runs in-process through commscope.cli.main at fixed terminal widths.
"""
from __future__ import annotations

import json
import re
import shutil

import orjson
import pytest

from cli_result import run_main
from paths import TESTS
from reports.tables import bandwidth, fmt

LONG = "model.transformer.encoder.layers.23.self_attention.query_key_value.weight"  # 73 characters
LONG2 = "model.transformer.decoder.layers.11.cross_attention.dense_h_to_4h.weight"
# LONG2 exposes enough to be among report's top labels, LONG is among the doctor's instances
NAMES = {"attn": "w[/a]", "mlp": "[bold]x", "scalars": "enc:x:proj", "ve0": LONG, "smear_gate": LONG2}
LATE_NS = 5_000_000_000
EMOJI = re.compile("[\u2600-\u27bf\U0001f000-\U0001faff]")  # ❌ and the other emoji rich would put in


def _renamed(v):
    """`v` (a record or config value) with every label of NAMES, and "update:<label>" region names, renamed."""
    if isinstance(v, str):
        head, _, tail = v.rpartition(":")
        return NAMES.get(v, f"{head}:{NAMES[tail]}" if head and tail in NAMES else v)
    if isinstance(v, list):
        return [_renamed(x) for x in v]
    if isinstance(v, dict):
        return {k: _renamed(x) for k, x in v.items()}
    return v


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # the folder's own name is user data too: compare prints it as the group's name
    dst = tmp_path_factory.mktemp("runs") / "[bold]run:x:"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", dst)
    config = dst / "config.json"
    config.write_text(json.dumps(_renamed(json.loads(config.read_text()))))
    for events in dst.glob("rank*/events.jsonl"):
        late, lines = False, []
        for line in events.read_text().splitlines():
            e = _renamed(json.loads(line))
            late = late or (events.parent.name == "rank1" and e["kind"] == "collective" and e.get("step") == 1
                            and e.get("label") == "enc:x:proj")
            if late:  # rank 1 arrives 5 s late at enc:x:proj, and everything after it shifts with it
                e = {k: x + LATE_NS if k.endswith("_ns") and isinstance(x, int) else x for k, x in e.items()}
            lines.append(json.dumps(e))
        events.write_text("\n".join(lines) + "\n")
    return dst


def _cli(capsys, monkeypatch, width: int, *args) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out = run_main(capsys, *args)
    assert code == 0, out.err
    assert "Traceback" not in out.err and "MarkupError" not in out.err
    return out.out


def _rows(text: str, title: str, edge: bool = True) -> list[list[str]]:
    """The body rows of the rich table under `title` (`edge`: drawn with an outer border), each cell whole:
    a folded cell's lines joined."""
    lines = text[text.index(title):].splitlines()
    body = lines[next(i for i, line in enumerate(lines) if "╇" in line) + 1:]
    rows = []
    for line in body:
        if "│" not in line:
            break
        cells = [c.strip() for c in line.split("│")]
        cells = cells[1:-1] if edge else cells
        if rows and not any(cells[-4:]):  # a continuation line: its numbers' cells are empty
            rows[-1] = [a + b for a, b in zip(rows[-1], cells)]
        else:
            rows.append(cells)
    return rows


def _no_markup_or_emoji(text: str) -> None:
    for name in ("w[/a]", "[bold]x", "enc:x:proj"):
        assert name in text
    assert not EMOJI.search(text)


@pytest.mark.parametrize("width", [100, 120])
def test_report_prints_labels_literally_and_every_number_whole(run, tmp_path, capsys, monkeypatch, width):
    doc = orjson.loads(_cli(capsys, monkeypatch, width, "report", run, "--json", "--no-hta"))
    text = _cli(capsys, monkeypatch, width, "report", run, "-o", tmp_path / f"r{width}.html", "--no-hta")
    _no_markup_or_emoji(text)
    rows = {r[0]: r for r in _rows(text, "Top exposed collectives", edge=False)}
    shown = sorted(doc["labels"].items(), key=lambda kv: -(kv[1].get("exposed_ms") or 0.0))[:8]
    assert set(rows) == {lab for lab, _ in shown} and LONG2 in rows  # each label whole, the long one folded
    for lab, v in shown:
        row = rows[lab]
        assert row[1] == v["op"]
        assert row[2] == fmt(v["count"]) and row[3] == fmt(v["exposed_ms"]) and row[5] == fmt(v["mean_ms"])
        assert row[7] == bandwidth(v.get("busbw_gbps"))
    assert max(len(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", [100, 120])
def test_doctor_names_the_late_label_literally_and_keeps_its_numbers(run, capsys, monkeypatch, width):
    text = _cli(capsys, monkeypatch, width, "doctor", run)
    assert text.startswith("straggler") and "most at 'enc:x:proj'" in " ".join(text.split())
    _no_markup_or_emoji(text)
    rows = _rows(text, "collective instances that caused the most waiting")
    assert {r[2] for r in rows} >= {"enc:x:proj", "w[/a]", "[bold]x", LONG}
    for r in rows:  # step, sequence, then after label and op: last rank, four ms figures, launched last
        # (launched last is left out, and named, where the terminal is too narrow for it)
        assert all(re.fullmatch(r"\d+", c) for c in r[:2] + [r[4]] + r[9:]), r
        # one decimal with thousands separators, as the verdict's prose; three below 1 ms
        assert all(re.fullmatch(r"\d{1,3}(,\d{3})*\.\d|0\.\d{3}", c) for c in r[5:9]), r
    assert max(len(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", [100, 120])
def test_hooks_prints_the_parameter_names_whole(run, capsys, monkeypatch, width):
    text = _cli(capsys, monkeypatch, width, "hooks", str(run))
    _no_markup_or_emoji(text)
    lines = text[text.index("┡"):].splitlines()[1:]
    rows = []
    for line in lines:
        if "│" not in line:
            break
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[0]:
            rows.append(cells)
        else:  # a folded name's next line
            rows[-1] = [a + b for a, b in zip(rows[-1], cells)]
    assert [r[0] for r in rows] == [str(i) for i in range(len(rows))]
    scatter = [r[1] for r in rows]
    assert scatter[:4] + scatter[6:7] == ["w[/a]", "[bold]x", "enc:x:proj", LONG, LONG2]


def test_compare_prints_a_group_name_literally(run, capsys, monkeypatch):
    text = _cli(capsys, monkeypatch, 100, "compare", run, run)
    assert re.search(r"│ \[bold\]run:x: +│ +1 │", text)  # the folder's name, as the group's, in the table
    _no_markup_or_emoji(text)


def test_export_keeps_the_labels(run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "p.json"
    _cli(capsys, monkeypatch, 100, "export", run, "--perfetto", out)
    names = {e.get("name") for e in orjson.loads(out.read_bytes())["traceEvents"]}
    assert {"w[/a]", "[bold]x", "enc:x:proj", LONG, LONG2} <= {n for n in names if isinstance(n, str)} | {
        n.split(" ")[0] for n in names if isinstance(n, str)}


def test_the_commands_console_reads_no_markup_or_emoji(capsys, monkeypatch):
    """The guarantee itself: whatever a renderer hands the console as a str prints as it is."""
    from commscope.commands._shared import output_console

    monkeypatch.setenv("COLUMNS", "80")
    output_console().print("w[/a] [bold]x enc:x:proj")
    assert capsys.readouterr().out == "w[/a] [bold]x enc:x:proj\n"


def test_step_boundary_table_counts_the_ranks_it_leaves_out():
    from rich.console import Console

    from reports.report_terminal import print_report_summary

    def rank(r, pct):
        return {"rank": r, "steps": 3, "gap_median_ms": 1.0, "gap_max_ms": 2.0, "start_delay_median_ms": 0.5,
                "host_pct": pct}

    con = Console(record=True, width=100)
    print_report_summary({"labels": {}, "ranks": 4,
                          "step_boundaries": [rank(0, 30.0), rank(1, 1.5), rank(2, 0.2), rank(3, None)]}, con)
    text = " ".join(con.export_text().split())
    assert "not shown: 2 ranks under 2 % of wall time, 1 rank without a step period (every rank: --json)" in text
