"""Lazy Triton jitting for the trainer's kernels (transposes, fused optimizer updates).

Why lazy: importing Triton costs about a second in every CPU rank that never runs a kernel, and the
interpret mode (`TRITON_INTERPRET=1` → Triton's CPU interpreter) is read when a kernel is jitted, not
when Triton is imported. Jitting at the first call, once per (kernel, interpret mode), lets tests run the
same kernels on CPU in the same process as everything else.

Invariants: importing this module never imports Triton; `kernel(module, name)` returns the same jitted
object for the same (module, name, interpret mode).
"""
from __future__ import annotations

import importlib
import importlib.util

HAVE_TRITON = importlib.util.find_spec("triton") is not None
_jitted: dict[tuple[str, str, bool], object] = {}


def interpret_mode() -> bool:
    """Whether Triton kernels jitted now would run in the CPU interpreter."""
    import triton

    return bool(triton.knobs.runtime.interpret)


def kernel(module: str, name: str):
    """The function `name` of `module` (a module of @triton.jit-free kernel bodies), jitted in the
    current interpret mode."""
    import triton

    key = (module, name, interpret_mode())
    if key not in _jitted:
        _jitted[key] = triton.jit(getattr(importlib.import_module(module), name))
    return _jitted[key]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
