"""Every third-party import is declared in pyproject.toml, for the install that uses it.

A package that happens to be installed on the developer's machine (click, pulled in by an older typer,
say) hides a missing declaration until a user installs commscope into a fresh environment. These tests
read the imports from the source (AST) and the declarations from the installed distribution's metadata
(what pip saw in pyproject.toml), so an undeclared import fails here, on any machine.

Rules:
- the packages users install (commscope, reports, instrumented_model) and the examples import only
  core dependencies, an extra's packages, or torch;
- tests import only what `scripts/test.sh` installs: core, the `test` and `hta` extras, and torch;
- importing the CLI and every command with only the core dependencies works: an extra's package is
  imported lazily, where it is used.

torch is the one runtime requirement not listed: `scripts/setup.sh` installs a pinned CPU build only when no
torch is importable, so pip never replaces a torch (often a CUDA build) the user already has.
"""
from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from paths import ROOT

FIRST_PARTY = {"commscope", "instrumented_model", "reports"}
UNDECLARED_RUNTIME = {"torch"}  # see the module docstring
EXTRA_RE = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, set[str]]:
    """Distribution name -> the installs that bring it ('core' or the extra's name)."""
    out: dict[str, set[str]] = defaultdict(set)
    for req in md.requires("commscope") or []:
        name = _norm(re.match(r"[A-Za-z0-9._-]+", req).group(0))
        extra = EXTRA_RE.search(req)
        out[name].add(extra.group(1) if extra else "core")
    return out


def local_modules(folder: Path) -> set[str]:
    """Module names a script in `folder` can import from beside it (bench/benchlib.py, tests/ports.py)."""
    return {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}


def third_party_imports(paths: list[Path]) -> dict[str, set[str]]:
    """Top-level module name -> files importing it, outside the standard library and the project."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        # a test imports helpers from its own folder or from tests/ (conftest puts it on sys.path)
        local = set().union(*(local_modules(d) for d in (path.parent, *path.parents) if d == path.parent
                              or (d.is_relative_to(ROOT) and d != ROOT and (d / "conftest.py").exists())))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY and top not in local:
                    found[top].add(str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name)
    return found


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    return md.packages_distributions()  # scans every installed distribution: once per session


def distributions_of(module: str) -> set[str]:
    """The installed distributions providing `module`; for an extra's package that is not installed here
    (dask's `distributed` without the extra), the distribution of the same name."""
    return {_norm(d) for d in _packages_distributions().get(module, [])} or {_norm(module)}


def sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def undeclared(paths: list[Path], allowed_installs: set[str] | None) -> list[str]:
    """'module (files)' for each import whose distribution no allowed install declares (None: any)."""
    decl = declared()
    problems = []
    for module, files in sorted(third_party_imports(paths).items()):
        if module in UNDECLARED_RUNTIME:
            continue
        installs = set().union(*(decl.get(d, set()) for d in distributions_of(module))) if distributions_of(module) else set()
        ok = installs if allowed_installs is None else installs & allowed_installs
        if not ok:
            problems.append(f"{module} ({', '.join(sorted(files))})")
    return problems


def test_scanner_reports_an_undeclared_import(tmp_path):
    """The check can fail: click (not declared) is reported; numpy (core), os and a sibling module are not."""
    (tmp_path / "helper.py").write_text("")
    (tmp_path / "mod.py").write_text("import numpy\nfrom click import echo\nimport os\nimport helper\n")
    assert undeclared([tmp_path / "mod.py"], None) == ["click (mod.py)"]


def test_declarations_are_read_from_the_installed_metadata():
    decl = declared()
    assert "core" in decl["typer"] and "core" in decl["pandas"]
    assert decl["holistictraceanalysis"] == {"hta"} and "test" in decl["pytest"]
    assert "click" not in decl  # the CLI uses typer's own API only


def test_installed_packages_import_only_declared_dependencies():
    assert undeclared(sources("commscope", "reports", "instrumented_model", "examples"), None) == []


def test_bench_scripts_import_only_declared_dependencies():
    assert undeclared(sources("bench"), None) == []


def test_tests_import_only_what_the_test_command_installs():
    assert undeclared(sources("tests"), {"core", "test", "hta"}) == []


BLOCK_EXTRAS = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not a core dependency")
sys.meta_path.insert(0, Block())
import pkgutil, importlib
import commscope.cli, commscope.commands
for m in pkgutil.iter_modules(commscope.commands.__path__):
    importlib.import_module("commscope.commands." + m.name)
from commscope.cli import main
main(["--help"])
"""


def test_cli_imports_with_core_dependencies_only():
    """With every extra's package made unimportable, the CLI and all commands still import and run --help."""
    decl = declared()
    extras_only = {d for d, installs in decl.items() if "core" not in installs}
    modules = {m for m, dists in _packages_distributions().items() if {_norm(d) for d in dists} & extras_only}
    modules -= {"_distutils_hack", "setuptools", "pkg_resources"}  # shared by many distributions
    assert "hta" in modules and "pytest" in modules  # the block is real
    proc = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, ",".join(sorted(modules))],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "report" in proc.stdout and "doctor" in proc.stdout


@pytest.mark.parametrize("missing", ["typer", "pandas"])
def test_a_removed_declaration_is_caught(missing, monkeypatch):
    """Removing a core dependency from the declarations makes the import check fail for its module."""
    real = declared()
    monkeypatch.setitem(globals(), "declared", lambda: {k: v for k, v in real.items() if k != missing})
    assert any(p.startswith(f"{missing} (") for p in undeclared(sources("commscope", "reports"), None))
