"""The command line's rough edges, each under a test: undefined statistics are NaN, group names are unique,
JSON counts are integers, unwritable outputs are one line and exit 2, `.gz` exports are gzip, --steps
errors echo what was typed, and the Perfetto export links one collective call across ranks."""
from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import orjson
import pytest
from typer.testing import CliRunner

from commscope.analyze.compare import compare_groups
from commscope.cli import app
from commscope.load.run_groups import Group, RunResult, load_group, unique_names
from report_trace import make_trace, write_run_dir
from test_compare_labels import make_run


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "commscope", *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def one_line_exit_2(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("commscope: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and all(n in r.stderr for n in needles), r.stderr


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hyg") / "handbuilt-run"
    write_run_dir(make_trace(style="run", steps=(0, 1, 2)), d)
    return d


def test_identical_losses_and_times_give_nan_not_zero(tmp_path):
    def group(name, times, losses):
        return Group(name, tmp_path / name, [RunResult(tmp_path / f"{name}{i}", "log", t, l)
                                             for i, (t, l) in enumerate(zip(times, losses))])

    t = compare_groups([group("a", [10.0, 10.0, 10.0], [3.0, 3.0, 3.0]),
                        group("b", [10.0, 10.0, 10.0], [3.1, 3.2, 3.3])], target_loss=3.28)
    a, b = t.to_dict("records")
    assert math.isnan(a["loss_p"])  # identical losses: the one-sample t-test is undefined (was "p 0.0000")
    assert 0 < b["loss_p"] < 1
    assert math.isnan(b["time_p"]) and math.isnan(b["slower_p"])  # no spread on either side


def test_single_runs_with_one_name_get_unique_names(tmp_path):
    for side in ("a", "b"):
        make_run(tmp_path / side / "r1", {"attn": [1, 1]}, [10, 10])
    groups = unique_names([load_group(tmp_path / "a" / "r1"), load_group(tmp_path / "b" / "r1")])
    assert [g.name for g in groups] == ["a/r1", "b/r1"]
    same = unique_names([load_group(tmp_path / "a" / "r1"), load_group(tmp_path / "a" / "r1")])
    assert [g.name for g in same] == ["r1", "r1#2"]  # the same folder twice: numbered, not lengthened
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "a" / "r1"), str(tmp_path / "b" / "r1"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [g["name"] for g in doc["groups"]] == ["a/r1", "b/r1"]
    # integer fields are integers in the JSON (never 1.0)
    assert all(isinstance(g["runs"], int) for g in doc["groups"])
    assert all(isinstance(r["n_base"], int) and isinstance(r["n_cand"], int) for r in doc["labels"])
    assert doc["groups"][0]["loss_p"] is None  # one run: undefined, null in JSON


def test_report_json_counts_are_integers(run_dir):
    res = CliRunner().invoke(app, ["report", str(run_dir), "--json", "--no-hta"])
    doc = orjson.loads(res.stdout)
    for v in doc["labels"].values():
        assert isinstance(v["count"], int) and v["count"] == 6 and v["count_per_rank"] == 3.0


def test_outputs_that_cannot_be_written_are_one_line(run_dir, tmp_path):
    one_line_exit_2(run_cli("report", run_dir, "-o", tmp_path, "--no-hta"), "is a directory")
    one_line_exit_2(run_cli("export", run_dir, "--perfetto", tmp_path), "is a directory")
    one_line_exit_2(run_cli("report", run_dir, "-o", "/proc/x.html", "--no-hta"), "cannot write /proc/x.html")
    one_line_exit_2(run_cli("export", run_dir, "--perfetto", "/proc/x.json"), "cannot write /proc/x.json")


def test_json_and_an_output_page_are_refused_together(run_dir, tmp_path):
    """--json prints the document and writes no page: an -o beside it would be dropped without a word."""
    one_line_exit_2(run_cli("report", run_dir, "--json", "-o", tmp_path / "r.html", "--no-hta"),
                    "give --json or -o, not both")
    assert not (tmp_path / "r.html").exists()


def test_steps_error_echoes_what_was_typed(run_dir, tmp_path):
    one_line_exit_2(run_cli("report", run_dir, "--steps", "20:", "-o", tmp_path / "r.html", "--no-hta"),
                    "--steps 20: selects none", "(0…2)")
    one_line_exit_2(run_cli("export", run_dir, "--steps", ":-3", "--perfetto", tmp_path / "p.json"),
                    "--steps :-3 selects none")


def test_gz_export_when_the_name_says_so(run_dir, tmp_path):
    for name, zipped in (("p.json.gz", True), ("p.json", False)):
        out = tmp_path / name
        res = CliRunner().invoke(app, ["export", str(run_dir), "--perfetto", str(out)])
        assert res.exit_code == 0, res.output
        raw = out.read_bytes()
        assert (raw[:2] == b"\x1f\x8b") == zipped
        doc = orjson.loads(gzip.decompress(raw) if zipped else raw)
        assert any(e["ph"] == "X" for e in doc["traceEvents"])


def test_perfetto_flows_link_one_call_across_ranks(run_dir):
    from commscope.load import load_path
    from commscope.analyze.left_in_flight import left_in_flight
    from reports.perfetto import build_perfetto

    tr = load_path(run_dir)
    doc = build_perfetto(tr, left_in_flight(tr))
    slices = {(e["pid"], e["tid"], e["args"].get("seq")): e for e in doc["traceEvents"]
              if e["ph"] == "X" and e.get("cat") == "comm"}
    flows = {}
    for e in doc["traceEvents"]:
        if e["ph"] in "stf":
            flows.setdefault(e["id"], []).append(e)
    # 2 ranks × 3 steps × 3 labels: every call is one flow from rank 0 (s) to rank 1 (f)
    assert len(flows) == 9
    for evs in flows.values():
        assert [e["ph"] for e in evs] == ["s", "f"] and [e["pid"] for e in evs] == [0, 1]
        assert evs[1]["bp"] == "e"
        # each end sits inside a comm slice of the same call on its rank
        for e in evs:
            inside = [s for (pid, tid, _), s in slices.items() if pid == e["pid"] and tid == e["tid"]
                      and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
            assert len(inside) == 1
        seqs = {next(s for (pid, tid, _), s in slices.items() if pid == e["pid"] and tid == e["tid"]
                     and s["ts"] <= e["ts"] <= s["ts"] + s["dur"])["args"]["seq"] for e in evs}
        assert len(seqs) == 1


def test_progress_bar_never_shows_none():
    """The loading bar's count column reads "0/?" until the number of files is known, never "0/None"."""
    from rich.console import Console
    from rich.progress import Progress

    from commscope.commands._shared import progress_columns

    con = Console(record=True, force_terminal=True, width=100)
    with Progress(*progress_columns(), console=con, auto_refresh=False) as bar:
        task = bar.add_task("loading run", total=None)
        bar.refresh()
        bar.update(task, completed=3, total=8)
        bar.refresh()
    text = con.export_text()
    assert "0/?" in text and "3/8" in text and "None" not in text
