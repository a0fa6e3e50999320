"""No analysis reads a file or prints (docs/architecture.md): no function of commscope/analyze calls the
loader, open(), print() or a Path's readers and writers. The exceptions are listed here by name, each with
why it stays, so a new one fails this test instead of slipping in. A path's analysis loads in
commscope.pipeline, not here."""
from __future__ import annotations

import ast

from paths import ROOT

CALLS = {"load_path", "open", "print", "input"}
METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "load_path", "echo", "symlink", "mkdtemp"}
KNOWN: set[tuple[str, str, str]] = set()  # HTA reads Kineto files itself, given their paths


def _io_calls() -> set[tuple[str, str, str]]:
    found = set()
    for path in sorted((ROOT / "commscope" / "analyze").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Name) and f.id in CALLS or isinstance(f, ast.Attribute) and f.attr in METHODS:
                    found.add((path.stem, fn.name, f.id if isinstance(f, ast.Name) else f.attr))
    return found


def test_no_analysis_reads_a_file_or_prints_but_the_known_entry_points():
    assert _io_calls() == KNOWN


def test_compare_labels_compares_frames_without_touching_a_file():
    """compare_labels is a pure function of run_samples frames (`commscope compare` loads the runs): frames
    made here, of runs that exist nowhere, compare; a note names a run by its frame's `run`."""
    import pandas as pd
    import pytest

    from commscope.analyze.compare_labels import STEP_LABEL, compare_labels

    def run(name, step_ms, attn_ms, left_out=None):
        df = pd.DataFrame({"step": [1, 2, 1, 2], "label": [STEP_LABEL, STEP_LABEL, "attn", "attn"],
                           "ms": [step_ms, step_ms, attn_ms, attn_ms]})
        df.attrs.update(left_out=left_out or {}, run=name)
        return df

    base = [run(f"b{i}", 10.0 + 0.1 * i, 2.0) for i in range(5)]
    cand = [run(f"c{i}", 8.0 + 0.1 * i, 2.0, {3: "profiler window"} if i == 0 else None) for i in range(5)]
    t = compare_labels([base, cand], ["base", "cand"])
    by = {r["label"]: r for r in t.to_dict("records")}
    assert by[STEP_LABEL]["delta_ms"] == pytest.approx(-2.0) and by[STEP_LABEL]["verdict"] == "better"
    assert by["attn"]["delta_ms"] == 0.0 and by["attn"]["verdict"] == "unchanged"
    assert t.attrs["ci"].startswith("CI: Welch's t interval over runs")
    assert t.attrs["notes"] == ["cand, run c0: steps 3 (profiler window) give no sample (the profiler's "
                                "start-up and trace export)"]
