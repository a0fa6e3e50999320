"""The package structure docs/architecture.md describes holds in the source.

scripts/import_graph.py reads every import (AST) of commscope/, reports/ and instrumented_model/; these
tests fail on an import cycle between packages, on a library module that reaches the trainer or the
renderers outside the command layer, and on a graph in docs/architecture.md that no longer matches.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from paths import ROOT

spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def test_no_cycles_and_only_the_command_layer_reaches_trainer_and_renderers():
    edges, lazy, problems = import_graph.graph()
    assert problems == []
    reached = edges["commscope.commands"] | lazy["commscope.commands"]
    assert {"instrumented_model", "reports"} <= reached
    library = [p for p in edges if p.startswith("commscope") and p not in ("commscope.commands", "commscope.cli")]
    assert all(not ({"reports", "instrumented_model"} & (edges[p] | lazy.get(p, set()))) for p in library)


def test_the_rules_catch_a_library_module_importing_the_trainer(tmp_path, monkeypatch):
    """The check can fail: a copy of the tree whose loader imports the trainer breaks the rule."""
    for top in import_graph.TOP:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    bad = tmp_path / "commscope" / "load" / "bad.py"
    bad.write_text("from instrumented_model import train\n")
    monkeypatch.setattr(import_graph, "ROOT", tmp_path)
    _, _, problems = import_graph.graph()
    assert problems == ["commscope/load/bad.py imports instrumented_model (only the command layer may)"]


def test_the_rules_catch_the_trainer_reaching_downstream(tmp_path, monkeypatch):
    """The trainer writes run directories: a trainer module that imports a renderer, or lazily an analyzer,
    breaks the one-way flow."""
    for top in import_graph.TOP:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "instrumented_model" / "bad.py").write_text(
        "from reports.run_terminal import print_run_dir\n\n\ndef f():\n    from commscope.analyze import doctor\n")
    monkeypatch.setattr(import_graph, "ROOT", tmp_path)
    _, _, problems = import_graph.graph()
    assert problems == [
        "instrumented_model/bad.py imports reports.run_terminal (the trainer reaches nothing downstream of the run directory)",
        "instrumented_model/bad.py imports commscope.analyze (the trainer reaches nothing downstream of the run directory)"]


def test_a_cycle_is_reported():
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_architecture_doc_shows_the_current_graph():
    edges, lazy, _ = import_graph.graph()
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert import_graph.with_graph(doc, import_graph.mermaid(edges, lazy)) == doc, \
        "run: python scripts/import_graph.py --write"


def test_check_exit_code():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_graph.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# The checkout's top level as docs/architecture.md lays it out; anything else tracked there is a stray
# (a run directory or report written into the checkout and committed by mistake).
TOP_LEVEL = {".ci", ".gitignore", "README.md", "pyproject.toml", "bench", "commscope", "docs", "examples",
             "instrumented_model", "reports", "scripts", "tests"}


def test_only_the_documented_layout_is_tracked_at_the_top_level():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        import pytest
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    tracked = {line.split("/", 1)[0] for line in listed.splitlines() if line}
    assert tracked - TOP_LEVEL == set(), "tracked at the top level but not part of the layout"
