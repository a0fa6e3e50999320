"""`commscope layout` on the CPU reference-trainer run (tests/data/layout/standard, copied to a temp dir):
a mismatched op that ran no slower than its aligned reference is not a finding, and GB/s keeps its
significant digits; a run directory recorded without the profiler is read, with a note saying why there is
nothing to conclude."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from bad_inputs import invoke
from commscope.analyze.layout import FINDING_COLUMNS
from commscope.analyze.layout_report import split_unflagged
from paths import TESTS

STANDARD = TESTS / "data" / "layout" / "standard"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    copy = tmp_path_factory.mktemp("layout") / "standard"  # never analyze inside the repository's fixture
    shutil.copytree(STANDARD, copy)
    return copy


def test_json_keeps_no_cost_mismatches_apart(run):
    code, out, err = invoke(["layout", str(run), "--json"])
    assert code == 0 and err == "", err
    doc = json.loads(out)
    # the optimizer's second mul and its sub ran faster than their aligned twins: not findings
    assert [(f["op"], round(f["slowdown"], 3)) for f in doc["unflagged"]] == [("aten::mul", 0.908),
                                                                              ("aten::sub", 0.033)]
    assert [f["severity"] for f in doc["unflagged"]] == [None, None]  # nothing found to cost time
    assert len(doc["findings"]) == 4
    assert min(f["slowdown"] for f in doc["findings"]) == pytest.approx(4.2, abs=0.05)
    assert {f["severity"] for f in doc["findings"]} == {"severe"}


def test_terminal_counts_findings_only_and_shows_small_bandwidths(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = invoke(["layout", str(run)])
    assert code == 0, err
    assert "Layout findings (4 op executions: 4 stride order;" in out
    assert "mismatched layout, no measured cost: 2 op execution(s) (mul ×1, sub ×1), slowdown at most 0.91×" in out
    copy_row = next(x for x in out.splitlines() if x.lstrip().startswith("copy_") and "8×64×256" in x)
    assert copy_row.split()[5:7] == ["11,732.8", "0.0894"]  # µs, GB/s (0.0894 GB/s, not "0")
    assert not any(x.lstrip().startswith("sub ") for x in out.splitlines())


def test_split_keeps_findings_without_a_reference():
    f = pd.DataFrame([{c: None for c in FINDING_COLUMNS} | {"op": op, "slowdown": s}
                      for op, s in (("a", 5.0), ("b", 1.29), ("c", None), ("d", 1.3), ("e", float("nan")))],
                     columns=FINDING_COLUMNS)
    kept, apart = split_unflagged(f)
    assert list(kept["op"]) == ["a", "c", "d", "e"] and list(apart["op"]) == ["b"]
    kept, apart = split_unflagged(pd.DataFrame(columns=FINDING_COLUMNS))
    assert kept.empty and apart.empty and list(apart.columns) == FINDING_COLUMNS


def test_run_without_profile_is_read_with_a_note(tmp_path, monkeypatch):
    """A run recorded without --profile: exit 0, empty findings and the note in JSON and on the terminal,
    as for a Kineto trace without kernels; a missing path stays an error (exit 2)."""
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    code, out, err = invoke(["layout", str(run), "--json"])
    assert code == 0 and err == "", err
    doc = json.loads(out)
    assert doc["findings"] == [] and doc["unflagged"] == [] and doc["contention"] == []
    assert doc["notes"] == ["No profiler trace in this run directory (recorded without --profile): layout "
                            "mismatches and SM contention are read from one; record with `commscope run --profile "
                            "START:STOP`, or `commscope.record(..., profile_steps=\"START:STOP\")` in your own "
                            "script."]
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = invoke(["layout", str(run)])
    assert code == 0 and err == "", err
    assert out.splitlines() == ["note: " + doc["notes"][0]]  # no "none found" line: nothing was looked for
    code, out, err = invoke(["layout", str(tmp_path / "missing")])
    assert (code, out) == (2, "") and err == f"commscope: error: {tmp_path / 'missing'} does not exist\n"


def test_steps_outside_the_profiled_window_say_so(run):
    """The fixture profiled step 3 only: --steps 0:2 leaves no profiled op, and the note says that, not
    that the run was recorded without the profiler."""
    code, out, err = invoke(["layout", str(run), "--steps", "0:2", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"] == [] and doc["notes"] == [
        "The run's profiler trace covers none of the selected steps: layout mismatches and SM contention are read "
        "from it; choose --steps inside the profiled window."]


def test_unflagged_summary_counts_per_op_in_first_seen_order_and_takes_the_largest_slowdown():
    from commscope.analyze.layout_report import unflagged_summary
    rows = pd.DataFrame({"op": ["aten::sub", "aten::mul", "aten::sub"], "slowdown": [0.5, 0.93, 0.7]})
    # 0.5 and 0.7: the op ran 1.3× or more faster than its reference, a reference that slow is noise
    assert unflagged_summary(rows) == (3, {"sub": 2, "mul": 1}, 0.93, 2)
    assert unflagged_summary(rows.iloc[:0]) is None


def test_no_none_found_line_when_no_check_could_run(tmp_path):
    """A trace without cpu ops or GPU kernels (here: empty) gives neither check anything to read: no "No layout
    mismatches found." headline, notes saying why (naming both reasons an op may lack shapes), and the loader's
    problems, as report and doctor print them."""

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.json").write_text('{"traceEvents": []}')
    code, out, err = invoke(["layout", str(tmp_path / "t")])
    assert code == 0, err
    assert "No layout mismatches found" not in out
    assert ("note: No cpu op with recorded shapes in the input (none recorded, or torch.profiler ran with "
            "record_shapes=False)") in " ".join(out.split())
    assert "note: No GPU kernels: kernel-only layout evidence and SM contention do not apply." in out
    assert "problem while loading: rank 0: no ProfilerStep annotations" in " ".join(out.split())
