"""Every command against the adversarial corpus (tests/adversarial/, written by make_corpus.py) and the
cases that cannot live in git (missing path, empty directory): exit 0 (a report naming what is missing)
or 2 with exactly one `commscope: error:` line on stderr — never a traceback, never a write into the input.

Runs the CLI in-process (commscope.cli.main, through tests/bad_inputs.py) so ~200 invocations take
seconds, not a torch import each. Generated kinds (FIFOs, symlink loops, sizes, typed fields) are in
tests/test_bad_inputs_corpus.py.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bad_inputs import invoke, tree_digest
from commscope.errors import UserError
from paths import TESTS

CORPUS = TESTS / "adversarial"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and not p.name.startswith("_"))
# exit 2 expected whatever the command (nothing usable in the input)
MUST_REFUSE = {"truncated_trace", "not_json_trace", "json_array_trace", "gzip_garbage", "gzip_truncated",
               "duplicate_ranks", "mismatched_world_traces", "non_utf8_trace", "future_schema_run",
               "future_schema_meta", "mismatched_world_run", "rank_folder_mismatch", "non_utf8_events",
               "events_not_objects", "summary_not_object", "status_garbage", "config_empty", "plain_file_not_trace",
               "missing", "empty"}


def commands(path: Path, out: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", str(path), "-o", str(out / "r.html"), "--no-hta"],
        "report-json": ["report", str(path), "--json", "--no-hta"],
        "export": ["export", str(path), "--perfetto", str(out / "p.json")],
        "hooks": ["hooks", str(path)],
        "layout": ["layout", str(path)],
        "plan": ["plan", str(path), "--cost", "measured"],
        "doctor": ["doctor", str(path)],
        "doctor-json": ["doctor", str(path), "--json"],
        "compare": ["compare", str(path), str(path)],
    }


def case_path(case: str, tmp_path: Path) -> Path:
    if case == "missing":
        return tmp_path / "does-not-exist"
    if case == "empty":
        (tmp_path / "empty").mkdir()
        return tmp_path / "empty"
    dst = tmp_path / case  # a copy: a command that wrongly wrote would not dirty the committed corpus
    shutil.copytree(CORPUS / case, dst)
    return dst


@pytest.mark.parametrize("case", [*CASES, "missing", "empty"])
def test_every_command_answers_bad_input_in_one_line(case, tmp_path, monkeypatch):
    path = case_path(case, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)  # default outputs (report's ./<name>-report.html) land here, not in the input
    before = tree_digest(path)
    results = {}
    for name, argv in commands(path, out).items():
        code, stdout, stderr = invoke(argv)
        results[name] = code
        assert "Traceback" not in stderr and "Traceback" not in stdout, (name, stderr[-2000:])
        assert code in (0, 2), (name, code, stderr[-2000:])
        if code == 2:
            lines = [ln for ln in stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("commscope: error: "), (name, stderr)
        assert tree_digest(path) == before, f"{name} wrote into its input"
    if case in MUST_REFUSE:
        # compare reads run folders of many kinds and reports unusable ones itself; the rest must refuse
        refused = {n for n, c in results.items() if c == 2}
        assert refused >= set(results) - {"compare", "plan"}, results
    assert not os.path.exists("/tmp/commscope-pwned")


def test_partial_run_is_reported_with_what_is_missing(tmp_path):
    path = case_path("partial_run", tmp_path)
    code, stdout, _ = invoke(["report", str(path), "--json", "--no-hta"])
    assert code == 0
    import json

    doc = json.loads(stdout)
    problems = " ".join(doc["problems"])
    assert "torn last line" in problems and "rank(s) 1 of" in problems
    code, stdout, _ = invoke(["doctor", str(path), "--json"])
    assert code == 0 and json.loads(stdout)["verdict"] == "insufficient"  # no rank wrote a status, no summary


def test_future_schema_names_the_version(tmp_path):
    code, _, err = invoke(["doctor", str(case_path("future_schema_run", tmp_path))])
    assert code == 2 and "schema_version 99" in err


# ---- property tests of the parsers ------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_jsonl_reader_only_ever_raises_user_error(tmp_path, data):
    from commscope.load.files import read_jsonl

    p = tmp_path / "events.jsonl"
    p.write_bytes(data)
    try:
        rows, torn = read_jsonl(str(p))
    except UserError as e:
        assert "\n" not in str(e)
    else:
        assert all(isinstance(r, dict) for r in rows) and torn in (0, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400), st.booleans())
def test_json_and_flight_recorder_readers_only_ever_raise_user_error(tmp_path, data, gz):
    import gzip

    from commscope.load.flight_recorder import read_flight_recorder
    from commscope.load.files import read_json

    p = tmp_path / ("doc.json.gz" if gz else "doc.json")
    p.write_bytes(gzip.compress(data) if gz and data[:1] == b"{" else data)
    for reader in (read_json, read_flight_recorder):
        try:
            reader(str(p))
        except UserError as e:
            assert "\n" not in str(e)


def _refusing(real, refused: Path):
    """os.listdir that refuses `refused` as the system does a folder the user may not read (a test run as
    root reads every folder whatever its mode, so the refusal is made here)."""
    def listdir(path="."):
        if Path(path) == refused:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    return listdir


def test_a_folder_the_system_refuses_is_one_line_never_a_traceback(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    (run / "flight_recorder").mkdir()
    monkeypatch.setattr(os, "listdir", _refusing(os.listdir, run / "flight_recorder"))
    # doctor needs the fault evidence: it refuses, naming the folder; the report goes on without it
    code, _, err = invoke(["doctor", str(run)])
    assert (code, err) == (2, f"commscope: error: {run / 'flight_recorder'}: Permission denied\n")
    code, out, err = invoke(["report", str(run), "--json", "--no-hta"])
    assert code == 0 and json.loads(out)["problems"] == [
        f"fault evidence not read: {run / 'flight_recorder'}: Permission denied"]
    # a folder of no traces whose subfolder cannot be listed: the usual answer, the subfolder skipped
    (tmp_path / "traces" / "sub").mkdir(parents=True)
    monkeypatch.setattr(os, "listdir", _refusing(os.listdir, tmp_path / "traces" / "sub"))
    code, _, err = invoke(["doctor", str(tmp_path / "traces")])
    assert code == 2 and err.startswith(f"commscope: error: {tmp_path / 'traces'} holds no run directory")
    # a refusal no check foresaw: the path and the system's reason, exit 2
    monkeypatch.setattr(os, "listdir", _refusing(os.listdir, run))
    code, _, err = invoke(["doctor", str(run)])
    assert (code, err.count("\n"), "Traceback" in err) == (2, 1, False) and "Permission denied" in err
