"""The Triton kernel-body modules call nothing but Triton's language and Python builtins.

Why: the bodies are jitted lazily (instrumented_model.triton_jit), one function at a time. A body that
calls another plain function of its module runs fine in Triton's CPU interpreter but fails to compile on
a GPU ("Unsupported function referenced"), so CPU tests alone would not catch it (a GPU compile error that the interpreter lets through).
"""
from __future__ import annotations

import ast
import builtins

import pytest
from paths import ROOT

BODY_MODULES = ["transpose_triton", "optim_triton", "softcap_ce_triton"]
MODEL_DIR = ROOT / "instrumented_model"


def offending_calls(source: str) -> list[str]:
    """Calls inside the module's functions to anything but tl.*, builtins and methods on values."""
    tree = ast.parse(source)
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    imported = {(a.asname or a.name).split(".")[0] for node in tree.body
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    bad = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            f = call.func
            if isinstance(f, ast.Name) and (f.id in defined or not hasattr(builtins, f.id)):
                bad.append(f"{fn.name} calls {f.id}()")
            elif isinstance(f, ast.Attribute):
                base = f
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in imported and base.id != "tl":
                    bad.append(f"{fn.name} calls {ast.unparse(f)}()")
    return bad


@pytest.mark.parametrize("module", BODY_MODULES)
def test_kernel_bodies_call_only_triton_and_builtins(module):
    assert offending_calls((MODEL_DIR / f"{module}.py").read_text()) == []


def test_the_check_catches_helpers_and_other_modules():
    src = ("import math\nimport triton.language as tl\ndef _h(x):\n    return x\n"
           "def k(p):\n    tl.store(p, _h(1) + math.sqrt(2) + abs(-1))\n    p.to(tl.int64)\n")
    assert offending_calls(src) == ["k calls _h()", "k calls math.sqrt()"]
