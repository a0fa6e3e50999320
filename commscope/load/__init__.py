"""Loading run directories and Kineto traces into the frames of docs/frames.md: `load_path(path) -> Trace`.

The names below are imported on first use (PEP 562): importing a light submodule (`files`, `run_groups`,
`speedrun_log`) does not import pandas through the loader, so commands that never load a trace start fast.
"""
from __future__ import annotations

import importlib

_NAMES = {"COLUMNS": "commscope.load.frames", "Trace": "commscope.load.frames", "frame": "commscope.load.frames",
          "load_path": "commscope.load.loader"}
__all__ = list(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value
