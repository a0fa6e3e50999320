"""What `doctor` and `layout` say where the input lacks something: the verdict or message names what is
missing (world size, device properties, a kernel's link to its op), never a confident conclusion the
data cannot support, and the JSON says the same as the text."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from paths import TESTS
from report_pages import report_page

HTA = TESTS / "data" / "hta-testdata"


def invoke(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


# --- doctor: one rank whose world size is a guess ------------------------------------------------

def test_doctor_older_nccl_trace_without_distributed_info_is_insufficient():
    """HTA's distributed_info_unavailable: 6 all_to_all collectives (named by nccl:all_to_all ranges inside
    record_param_comms), 8 GPUs listed, no distributedInfo. Its peers' traces are missing: not `ok`."""
    d = json.loads(invoke("doctor", HTA / "distributed_info_unavailable", "--json"))
    assert d["verdict"] == "insufficient"
    assert d["details"] == {"world_size": "unknown", "collectives": 6, "devices": 8}
    assert "world size is unknown" in d["summary"] and "ran 6 collective(s) on a machine with 8 GPUs" in d["summary"]
    assert "one rank" not in d["summary"]


def test_doctor_on_an_empty_trace_says_nothing_was_recorded(tmp_path):
    (tmp_path / "rank0.json").write_text('{"traceEvents": []}')
    d = json.loads(invoke("doctor", tmp_path, "--json"))
    assert d["verdict"] == "insufficient"
    assert d["summary"].startswith("insufficient: nothing recorded")
    assert invoke("doctor", tmp_path).startswith("insufficient")


def test_doctor_one_gpu_trace_without_collectives_stays_ok_and_says_the_world_size_is_a_guess():
    """triton_example: one kernel, no collectives, 8 GPUs in deviceProperties (what the machine had, not
    what the job used): still `ok`, saying the world size is taken as 1."""
    d = json.loads(invoke("doctor", HTA / "triton_example", "--json"))
    assert d["verdict"] == "ok" and d["details"] == {"world_size": "unknown", "devices": 8}
    assert "world size unknown, taken as 1" in d["summary"]


# --- layout: what is missing, said once, the same in text and JSON ---------------------------------

def test_layout_trace_without_device_properties_names_what_is_missing():
    """trace_filter: 2358 GPU kernels, no deviceProperties, cpu ops with shapes whose External ids match
    no kernel launch (a sampled trace)."""
    d = json.loads(invoke("layout", HTA / "trace_filter", "--json"))
    assert d["device"] is None and d["contention"] == []
    assert d["notes"][0].startswith("Device properties missing (no deviceProperties with an SM count): SM "
                                    "contention is not judged (2358 GPU kernels in the input)")
    assert {f["where"] for f in d["findings"]} == {"unknown (kernel not linked to a cpu op with shapes)"}
    assert d["notes"][1].startswith(f"{len(d['findings'])} kernel-only finding(s) have no place")
    text = " ".join(invoke("layout", HTA / "trace_filter").split())
    assert "no GPU kernels" not in text and "No SM contention" not in text
    assert "Device properties missing" in text and "not linked to a cpu op" in text


def test_layout_cpu_run_says_no_gpu_kernels_once(tmp_path):
    run = tmp_path / "gloo2"
    shutil.copytree(TESTS / "data" / "gloo2", run)
    text = invoke("layout", run)
    assert text.count("GPU kernels") == 1 and "No SM contention" not in text
    d = json.loads(invoke("layout", run, "--json"))
    assert d["notes"] == ["No GPU kernels: kernel-only layout evidence and SM contention do not apply."]


@pytest.mark.parametrize("folder", ["layout_h200/standard", "layout_h200/transposed"])
def test_layout_gpu_run_with_device_properties_says_none_found(folder, tmp_path):
    """An H200 run with deviceProperties and no contention: looked for and none found, no notes."""
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / folder, run)
    d = json.loads(invoke("layout", run, "--json"))
    assert d["device"] == "NVIDIA H200" and d["contention"] == [] and d["notes"] == []
    assert "No SM contention found." in invoke("layout", run)


# --- one wording for a missing input path, in every command ------------------------------------------

@pytest.mark.parametrize("command", [["report", "--json"], ["layout"], ["doctor"], ["hooks"],
                                     ["export", "--perfetto", "out.json"], ["compare", "."]])
def test_a_missing_path_is_one_line_and_exit_2_in_every_command(tmp_path, command):
    import subprocess
    import sys

    missing = tmp_path / "nope"
    r = subprocess.run([sys.executable, "-m", "commscope", command[0], str(missing), *command[1:]],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == f"commscope: error: {missing} does not exist\n"
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("command", [["report"], ["report", "--json"], ["layout"], ["doctor"], ["hooks"],
                                     ["export", "--perfetto", "out.json"], ["compare", "."]])
def test_a_path_through_a_symlink_loop_or_with_undecodable_bytes_is_named_as_it_is(tmp_path, command, monkeypatch):
    """A loop of symbolic links on the way is no missing file (and the report's default output name,
    taken from the input's resolved name, was a traceback); a name's undecodable bytes read as \\xNN, as
    the outputs print them."""
    import os

    from bad_inputs import invoke as run_in_process

    monkeypatch.chdir(tmp_path)
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    for given, said in ((tmp_path / "a" / "x.json", f"{tmp_path}/a/x.json: cannot resolve it, a loop of symbolic links"),
                        (tmp_path / "a", f"{tmp_path}/a: cannot resolve it, a loop of symbolic links"),
                        (os.fsdecode(bytes(tmp_path) + b"/nm\xff"), f"{tmp_path}/nm\\xff does not exist")):
        code, _, err = run_in_process([command[0], str(given), *command[1:]])
        assert (code, err) == (2, f"commscope: error: {said}\n")
    assert not (tmp_path / "out.json").exists()


def test_gen_job_documents_every_argument():
    """`bench/gen_job.py --help`: every argument says what it is (none listed bare)."""
    import re
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(TESTS.parent / "bench" / "gen_job.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    body = r.stdout.split("positional arguments:", 1)[1]
    for arg in ("src", "out", "--ranks", "--steps", "--straggler", "--delay-ms", "--desync", "--hang", "--at-step",
                "--at-index", "--jitter-ms", "--seed"):
        # an argument's line, or the line under it when the name is long, carries its help text
        m = re.search(rf"^  {re.escape(arg)}\b[^\n]*\n", body, re.M)
        assert m, arg
        first = m.group(0).strip()
        after = body[m.end():].split("\n", 1)[0]
        assert len(first.split()) > 2 or after.startswith(" " * 10), arg


# --- report --steps: the doctor's line says it judged the whole run ----------------------------------

def test_report_steps_labels_the_doctor_verdict_as_the_whole_run(tmp_path):
    from commscope.analyze.doctor import diagnose_trace
    from commscope.load import load_path

    trace = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    whole = diagnose_trace(trace)
    part = diagnose_trace(trace, selected=(11, 12))
    assert part.verdict == whole.verdict == "straggler"
    assert part.summary == "(whole run, not only the selected step 11) " + whole.summary
    assert diagnose_trace(trace, selected=(10, 12)).summary == whole.summary  # every step selected: no label
    assert diagnose_trace(trace, selected=(0, 100)).summary == whole.summary
    out = tmp_path / "r.html"
    text = invoke("report", TESTS / "data" / "modded-nanogpt-8xh100", "--steps", "11:12", "--no-hta", "-o", out)
    assert " ".join(text.split()).startswith("doctor: (whole run, not only the selected step 11) straggler: rank 1")
    assert "(whole run, not only the selected step 11)" in out.read_text()


def test_a_rank_folder_passed_for_its_run_directory_is_named_as_such(tmp_path):
    from bad_inputs import invoke as run_cli

    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    for command in (["report", "--json"], ["doctor"], ["export", "--perfetto", str(tmp_path / "x.json")]):
        code, out, err = run_cli([command[0], str(run / "rank1"), *command[1:]])
        assert code == 2 and err == (f"commscope: error: {run / 'rank1'} is one rank's folder of the run "
                                     f"directory {run}: pass the run directory\n"), err


def test_the_timeline_says_how_many_collectives_it_cannot_draw(tmp_path):
    """distributed_info_unavailable: a host-side trace of a GPU job, whose 6 all_to_all have launches but no
    device execution: the tables count them, and the timeline's caption says why its comm row is empty."""
    assert ("6 collectives of these ranks and steps have no execution start or end in the input (e.g. a host-side "
            "trace of a GPU job): not drawn, though the tables count them.") in report_page(
        HTA / "distributed_info_unavailable", tmp_path / "r.html")
    full = report_page(TESTS / "data" / "modded-nanogpt-8xh100", tmp_path / "full.html")
    assert "not drawn, though the tables count them" not in full
