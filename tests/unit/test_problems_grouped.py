"""`report --json` and `doctor --json` list the loader's problems through one analyzer step
(commscope.analyze.problems.loading_problems): the same lines, grouped by rank the same way, in the same order."""
from __future__ import annotations

import json

from cli_result import run_main
from commscope.analyze.problems import loading_problems
from commscope.load import load_path
from report_trace import make_trace, write_run_dir


def _run_with_problems(tmp_path):
    """A 4-rank run whose ranks 0, 1 and 3 end in a torn line (one problem each, the same words) and a label
    map that matches no collective (a problem of no rank, added by the command layer)."""
    run = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), run)
    for r in (0, 1, 3):
        with open(run / f"rank{r}" / "events.jsonl", "a") as f:
            f.write('{"kind": "coll')
    label_map = tmp_path / "sizes.json"
    label_map.write_text(json.dumps({"never_seen": [12_345]}))
    return run, label_map


def test_report_and_doctor_json_list_the_same_grouped_problems(tmp_path, capsys):
    run, label_map = _run_with_problems(tmp_path)
    raw = load_path(str(run)).problems
    assert raw == [f"rank {r}: ignored a torn last line in events.jsonl" for r in (0, 1, 3)]

    code, out = run_main(capsys, "report", run, "--json", "--no-hta", "--label-map", label_map)
    assert code == 0, out.err
    report = json.loads(out.out)["problems"]
    code, out = run_main(capsys, "doctor", run, "--json", "--label-map", label_map)
    assert code == 0, out.err
    doctor = json.loads(out.out)["problems"]

    assert report == doctor
    assert len(report) == 2
    assert report[0] == "ranks 0-1,3: ignored a torn last line in events.jsonl"
    assert "never_seen" in report[1] and not report[1].startswith("rank")


def test_loading_problems_groups_ranks_at_the_first_ones_place(tmp_path):
    run, _ = _run_with_problems(tmp_path)
    trace = load_path(str(run))
    trace.problems = ["config.json: assumed", *trace.problems, "rank 2: rank2/events.jsonl: odd",
                      "rank 0: rank0/events.jsonl: odd"]
    assert loading_problems(trace) == ["config.json: assumed",
                                       "ranks 0-1,3: ignored a torn last line in events.jsonl",
                                       "ranks 0,2: rank<N>/events.jsonl: odd"]
