"""`commscope export` says what the loader could not read: a corrupt rank file, a missing rank folder and an
empty trace each print report's `problem while loading: …` lines on stderr (stdout keeps its one line naming
the trace) and the same problems go into the trace's otherData.problems; the export still exits 0, like
`report`, since the ranks it read are drawn."""
from __future__ import annotations

import json
import shutil

import orjson

from cli_result import run_main
from commscope.load import load_path
from paths import TESTS
from reports.report_terminal import CAVEATS_SHOWN

GLOO2_TRACES = TESTS / "data" / "gloo2"  # two ranks' Kineto traces
GLOO2_RUN = TESTS / "data" / "cpurun-hooks-gloo2"  # a completed 2-rank run directory


def export(capsys, src, out):
    code, cap = run_main(capsys, "export", src, "--perfetto", out)
    return code, cap.out, cap.err, orjson.loads(out.read_bytes())


def stdout_line(out) -> str:
    return f"perfetto trace: {out} (open in https://ui.perfetto.dev or chrome://tracing)\n"


def test_a_truncated_rank_file_is_said_on_stderr_and_in_other_data(tmp_path, capsys):
    src = tmp_path / "traces"
    src.mkdir()
    shutil.copy(GLOO2_TRACES / "rank0.json", src)
    (src / "rank1.json").write_bytes((GLOO2_TRACES / "rank1.json").read_bytes()[:30_000])
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, src, out)
    assert code == 0
    assert stdout == stdout_line(out)
    lines = stderr.splitlines()
    assert len(lines) == 4  # then two the intact rank's trace has of its own (no ProfilerStep, gloo groups)
    assert lines[0].startswith(f"problem while loading: {src / 'rank1.json'}: not valid JSON (truncated or corrupt:")
    assert lines[0].endswith("; skipped")
    assert lines[1] == "problem while loading: no trace for rank(s) 1 of 2"
    assert doc["otherData"]["problems"] == [ln.removeprefix("problem while loading: ") for ln in lines]
    assert doc["otherData"]["problems"] == load_path(str(src)).problems
    assert sorted({e["pid"] for e in doc["traceEvents"]}) == [0]  # the rank it read is drawn


def test_a_missing_rank_folder_is_said(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(GLOO2_RUN, run)
    shutil.rmtree(run / "rank1")
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, run, out)
    assert code == 0
    assert stdout == stdout_line(out)
    assert "problem while loading: no folder for rank(s) 1 of 2\n" in stderr
    assert "no folder for rank(s) 1 of 2" in doc["otherData"]["problems"]
    assert stderr == "".join(f"problem while loading: {p}\n" for p in doc["otherData"]["problems"])


def test_an_empty_trace_is_said(tmp_path, capsys):
    src = tmp_path / "empty.json"
    src.write_text(json.dumps({"traceEvents": []}))
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, src, out)
    assert code == 0
    assert stdout == stdout_line(out)
    assert stderr.splitlines() == [f"problem while loading: {p}" for p in load_path(str(src)).problems]
    assert f"problem while loading: {src}: no distributedInfo (recorded without a process group)" in stderr
    assert doc["otherData"]["problems"] == load_path(str(src)).problems


def test_a_clean_input_prints_no_problem(tmp_path, capsys):
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, GLOO2_RUN, out)
    assert (code, stdout, stderr, doc["otherData"]["problems"]) == (0, stdout_line(out), "", [])


def test_many_problems_are_capped_on_stderr_and_all_kept_in_the_trace(tmp_path, capsys):
    """CAVEATS_SHOWN lines, then how many more and where they are: the trace holds them all (export has no
    --json)."""
    src = tmp_path / "traces"
    src.mkdir()
    shutil.copy(GLOO2_TRACES / "rank0.json", src)
    for i in range(1, 8):  # seven corrupt files, a problem each, and three others
        (src / f"rank{i}.json").write_text("{")
    out = tmp_path / "t.json"
    code, _, stderr, doc = export(capsys, src, out)
    problems = doc["otherData"]["problems"]
    assert code == 0 and len(problems) == 10
    assert sum("not valid JSON" in p for p in problems) == 7  # the world size (2) is rank 0's
    assert stderr.splitlines() == [f"problem while loading: {p}" for p in problems[:CAVEATS_SHOWN]] + [
        f"… {10 - CAVEATS_SHOWN} more problem(s), all in the trace's otherData.problems"]


def test_collectives_without_an_execution_span_are_counted_not_silently_dropped(tmp_path, capsys):
    """A host-side trace of an NCCL job (hta-testdata distributed_info_unavailable: 6 all_to_all with a
    launch and no device kernel) has nothing to draw for its collectives: the export says how many on stderr
    and in otherData, where it would otherwise look as if the job never communicated."""
    src = TESTS / "data" / "hta-testdata" / "distributed_info_unavailable"
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, src, out)
    assert code == 0 and stdout == stdout_line(out)
    assert len(load_path(str(src)).collectives) == 6
    assert doc["otherData"]["collectives_not_drawn"] == 6
    assert not [e for e in doc["traceEvents"] if e.get("cat") == "comm"]
    assert ("note: 6 collectives of the input have no execution start or end (e.g. a host-side trace of a GPU "
            "job): not drawn (otherData.collectives_not_drawn); `commscope report` counts them\n") in stderr
    code, _, stderr, doc = export(capsys, GLOO2_TRACES, tmp_path / "u.json")  # every collective drawn: no note
    assert doc["otherData"]["collectives_not_drawn"] == 0 and "note:" not in stderr


def test_counts_in_args_stay_integers_where_the_frame_holds_floats(tmp_path, capsys):
    """trace_filter's collectives hold group_size (128), seq and step as float64 beside NaN elsewhere: the
    slices' args carry them as JSON integers, as they do for bytes."""
    src = TESTS / "data" / "hta-testdata" / "trace_filter"
    code, _, _, doc = export(capsys, src, tmp_path / "t.json")
    comm = [e["args"] for e in doc["traceEvents"] if e.get("cat") == "comm"]
    assert code == 0 and len(comm) == 20
    for key in ("group_size", "seq", "step", "bytes"):
        assert {type(a[key]) for a in comm} <= {int, type(None)}, key
    assert {a["group_size"] for a in comm} == {128}


def test_an_empty_output_name_is_said_to_be_empty(tmp_path, capsys):
    """`-o ''` and `--perfetto ''` name no file: said so, not "'.' is a directory" (a Path reads '' as '.')."""
    code, cap = run_main(capsys, "report", GLOO2_TRACES, "-o", "")
    assert code == 2 and cap.err == "commscope: error: -o/--output is empty: give the HTML file to write\n"
    code, cap = run_main(capsys, "export", GLOO2_TRACES, "--perfetto", "")
    assert code == 2 and cap.err == "commscope: error: --perfetto is empty: give the file (e.g. OUT.json) to write\n"


def test_an_output_name_ending_in_a_slash_or_a_page_named_gz_is_refused(tmp_path, capsys):
    """`-o dest/r.html/` names a folder (a Path would drop the slash and write the file dest/r.html); a page
    named .gz would be plain HTML under a compressed name (export, whose traces are read by tools, gzips)."""
    (tmp_path / "dest").mkdir()
    code, cap = run_main(capsys, "report", GLOO2_TRACES, "-o", f"{tmp_path}/dest/r.html/")
    assert code == 2 and cap.err == (f"commscope: error: -o/--output {tmp_path}/dest/r.html/ ends in '/', which "
                                     "names a folder: give the HTML file to write\n")
    code, cap = run_main(capsys, "export", GLOO2_TRACES, "--perfetto", f"{tmp_path}/dest/t.json/")
    assert code == 2 and "ends in '/', which names a folder" in cap.err
    code, cap = run_main(capsys, "report", GLOO2_TRACES, "-o", f"{tmp_path}/dest/r.html.gz")
    assert code == 2 and cap.err == (f"commscope: error: -o {tmp_path}/dest/r.html.gz: the report is an HTML page "
                                     "a browser opens as it is, written uncompressed: name it .html\n")
    assert list((tmp_path / "dest").iterdir()) == []


def test_a_problem_of_every_rank_is_one_line_as_report_lists_it(tmp_path, capsys):
    """The same problem on every rank is one line naming the ranks, on stderr and in otherData, as in
    `report --json`'s problems: at a thousand ranks a list of problems stays a few lines."""
    run = tmp_path / "run"
    shutil.copytree(GLOO2_RUN, run)
    for r in (0, 1):
        path = run / f"rank{r}" / "events.jsonl"
        path.write_bytes(b'{"kind": "region", "rank": %d, "name": "x", "start_ns": NaN}\n' % r + path.read_bytes())
    out = tmp_path / "t.json"
    code, stdout, stderr, doc = export(capsys, run, out)
    said = ("ranks 0-1: events.jsonl: ignored 1 region record: NaN or Infinity, which JSON has no value for "
            "(Python's json.dumps writes them for a non-finite float) (line 1: start_ns=nan)")
    assert code == 0 and doc["otherData"]["problems"] == [said]
    assert stderr == f"problem while loading: {said}\n"
    code, cap = run_main(capsys, "report", run, "--json", "--no-hta")
    assert code == 0 and json.loads(cap.out)["problems"] == [said]


def test_an_empty_label_map_is_said_to_be_empty_and_a_page_named_gz_in_capitals_is_refused(tmp_path, capsys):
    code, cap = run_main(capsys, "report", GLOO2_TRACES, "--json", "--label-map", "")
    assert code == 2 and cap.err == "commscope: error: --label-map is empty: give the size → label map's JSON file\n"
    code, cap = run_main(capsys, "report", GLOO2_TRACES, "-o", str(tmp_path / "r.HTML.GZ"))
    assert code == 2 and "name it .html" in cap.err and not (tmp_path / "r.HTML.GZ").exists()
