"""The import graph between commscope's packages, read from the source (AST), and its rule checks.

Usage:  python scripts/import_graph.py            # print the mermaid graph
        python scripts/import_graph.py --write    # put it into docs/architecture.md between its markers
        python scripts/import_graph.py --check    # exit 1 if a rule below is broken

A node is a package (commscope.recording, commscope.load, ..., reports, instrumented_model); an edge A -> B
means some module of A imports a module of B when it is imported; a dotted edge A -.-> B, that some
function of A imports B when it is called (a lazy import: the command layer's seams to the trainer and the
renderers). The rules look at both kinds, where the one-way flow could otherwise be bypassed quietly.

Rules (docs/architecture.md):
- no cycle between packages;
- commscope never imports reports or instrumented_model, except in the command layer (commscope.cli, commscope.commands)
  (the seam through which `commscope run`, `plan` and the renderers are reached);
- the trainer (instrumented_model) imports nothing downstream of the run directory it writes: not the
  loader, the analyzers, the pipeline or the renderers (data flows one way; what `commscope run` shows is
  the command layer's RunView).
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("commscope", "reports", "instrumented_model")
COMMAND_LAYER = ("commscope.commands", "commscope.cli", "commscope.__main__")
DOWNSTREAM = ("commscope.load", "commscope.analyze", "commscope.pipeline", "reports")


def package_of(module: str) -> str:
    """The graph node of a module: commscope's subpackages and top-level modules are nodes of their own
    (commscope.load.kineto -> commscope.load, commscope.errors -> commscope.errors); the other top
    packages are one node each (reports.page -> reports)."""
    parts = module.split(".")
    if parts[0] != "commscope" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, runs at import time) for each import of a first-party module in `path`.

    An import inside a function runs only when the function is called (a lazy import); any other import
    (module body, class body, under a top-level if/try) runs when the module is imported."""
    tree = ast.parse(path.read_text(), str(path))
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, lazy: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        found.extend((n, not lazy) for n in names if n.split(".")[0] in TOP)
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]], list[str]]:
    """Package edges of imports at import time, of lazy imports only, and rule violations."""
    edges: dict[str, set[str]] = defaultdict(set)
    lazy: dict[str, set[str]] = defaultdict(set)
    problems = []
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            src_mod = module_name(path)
            src_pkg = package_of(src_mod)
            edges.setdefault(src_pkg, set())
            for target, at_top in imports(path):
                dst_pkg = package_of(target)
                if dst_pkg != src_pkg:
                    (edges if at_top else lazy)[src_pkg].add(dst_pkg)
                if src_mod.startswith("commscope") and not src_mod.startswith(COMMAND_LAYER) \
                        and target.split(".")[0] in ("reports", "instrumented_model"):
                    problems.append(f"{path.relative_to(ROOT)} imports {target} (only the command layer may)")
                if src_pkg == "instrumented_model" and dst_pkg in DOWNSTREAM:
                    problems.append(f"{path.relative_to(ROOT)} imports {target} (the trainer reaches nothing "
                                    "downstream of the run directory)")
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    for src in lazy:
        lazy[src] -= edges.get(src, set())
    return edges, lazy, problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp) + [sorted(comp)[0]])

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def mermaid(edges: dict[str, set[str]], lazy: dict[str, set[str]]) -> str:
    """The graph in mermaid, without the edges into commscope.errors (every package raises UserError)."""
    lines = ["```mermaid", "graph LR"]
    for kind, arrow in ((edges, "-->"), (lazy, "-.->")):
        for src in sorted(kind):
            for dst in sorted(kind[src]):
                if dst != "commscope.errors" and src != "commscope.__main__":
                    lines.append(f"  {src.replace('.', '_')}[{src}] {arrow} {dst.replace('.', '_')}[{dst}]")
    lines.append("```")
    return "\n".join(lines)


DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- import-graph:begin -->", "<!-- import-graph:end -->"


def with_graph(doc: str, graph_text: str) -> str:
    """`doc` with the text between the import-graph markers replaced by `graph_text`."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{graph_text}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the rules instead of printing the graph")
    parser.add_argument("--write", action="store_true", help="write the graph into docs/architecture.md")
    args = parser.parse_args()
    edges, lazy, problems = graph()
    if args.check:
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    text = mermaid(edges, lazy)
    if args.write:
        DOC.write_text(with_graph(DOC.read_text(), text))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
