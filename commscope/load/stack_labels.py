"""Labels from the Python stack of a Kineto trace recorded with `torch.profiler.profile(with_stack=True)`.

Such a trace holds a `python_function` event (a complete event, `cat` "python_function") per Python call
that ran while the profiler did, nesting on the CPU timeline of the thread that made it: in torch 2.x its
`tid` is the thread's system id, the one the thread's cpu ops carry, frames already live when the profiler
started included (they begin at its start). Its name is `<file>(<line>): <function>`, the file relative to
the `sys.path` entry it was found under (torch.profiler.python_tracer strips those prefixes:
`torch/nn/modules/module.py(1750): _call_impl`, `train.py(40): step`), or absolute where none held it;
`<line>` is the line the function is defined on. Calls into C are named `<built-in …>`.

A collective without a commscope label scope takes the innermost user-code frame enclosing its launch on
the launching thread (commscope.load.kineto_comms; `frame_label`: any but a script's top-level code),
written `<file name>:<line> <function>`
(`model.py:88 forward`): the file name without its folders, so the label is the same on every rank
whatever the job's paths. User code is any frame but these (`user_frame`):
- calls into C (`<built-in …>`) and code that is not a file (`<frozen os>`, `<string>`);
- torch's own files (`torch/`, `torchgen/`, `functorch/`), commscope's, and `typing_extensions` (torch's
  c10d wrappers call through it);
- files under `site-packages/` or `dist-packages/`, or an absolute path under `lib/pythonX.Y/` (the
  standard library), where the name is absolute;
- the standard library by module name (`threading.py`, `concurrent/futures/thread.py`:
  `sys.stdlib_module_names`). A file that shares its name with a standard-library module (`trace.py`,
  `code.py`) is taken for it: stripped names cannot tell them apart.
Other installed packages' files are stripped of their site-packages prefix too (`deepspeed/runtime/…`):
they count as user code.

Memory: a trace holds one such event per Python call. The readers (commscope.load.kineto_events) keep
only `user_frame` events on threads that launch collectives, and `kineto_comms` only asks about those.
"""
from __future__ import annotations

import functools
import re
import sys

PY_CAT = "python_function"
_FRAME_RE = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$", re.S)
_LIBRARY_ROOTS = frozenset({"torch", "torchgen", "functorch", "typing_extensions.py"})
# commscope's packages (a folder named `commscope` holding other things may well be the user's project)
_COMMSCOPE = frozenset({"recording", "load", "analyze", "commands", "rundir", "util", "plan", "__init__.py",
                        "cli.py", "__main__.py", "errors.py"})
_STDLIB_ABS = re.compile(r"/lib(64)?/python\d+(\.\d+)*/")
_PACKAGES = ("/site-packages/", "/dist-packages/")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))

@functools.lru_cache(maxsize=1 << 16)  # a trace repeats a few thousand distinct names
def user_frame(name: str) -> str | None:
    """The label of a `python_function` event named `name` when it is user code (`model.py:88 forward`),
    else None."""
    m = _FRAME_RE.match(name)
    if m is None:
        return None
    path = m["file"].replace("\\", "/")
    if path.startswith("<") or not path.strip():
        return None
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    absolute = path.startswith("/") or re.match(r"^[A-Za-z]:/", path) is not None
    if absolute:
        if any(p in path for p in _PACKAGES) or _STDLIB_ABS.search(path):
            return None
        inner = parts
    else:
        inner = parts[:1]  # a stripped name: its first part is the top-level module or package
        if parts[0].removesuffix(".py") in _STDLIB:
            return None
    for i, p in enumerate(inner):
        if p in _LIBRARY_ROOTS and (i + 1 < len(parts) or p.endswith(".py")):
            return None
        if p == "commscope" and i + 1 < len(parts) and parts[i + 1] in _COMMSCOPE:
            return None
    return f"{parts[-1]}:{m['line']} {m['func']}"


def frame_label(name: str) -> str | None:
    """The label a profiler trace's `python_function` event named `name` gives a collective it encloses:
    user_frame's, but never a module's top-level code (`<module>`). That frame began before the profiler, so
    its line is where the script stood then (the `prof.step()` line, not a call site), and it encloses
    everything the script launches outside a function (DDP's buckets and hand-written calls alike): a label
    from it would merge them."""
    m = _FRAME_RE.match(name)
    return None if m is None or m["func"] == "<module>" else user_frame(name)
