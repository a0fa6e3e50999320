"""A path in, an analysis out: the loader (commscope.load) then one analyzer (commscope.analyze).

For the command layer and for Python callers who hold a path rather than a loaded `Trace`. The analyzers
themselves take frames and never read a file; this module is where the two meet, and it holds nothing
but that composition.
"""
from __future__ import annotations

import os
from typing import Any


def diagnose_path(path: str | os.PathLike, scheduler: Any = None, **thresholds: Any):
    """The doctor's `Diagnosis` of the run or traces at `path` (loaded on the Dask cluster at `scheduler`
    if given); `thresholds` are `diagnose_trace`'s."""
    from commscope.analyze.doctor import diagnose_trace
    from commscope.load import load_path

    return diagnose_trace(load_path(os.fspath(path), scheduler=scheduler), **thresholds)


def load_hook_orders(path: str | os.PathLike):
    """The `HookOrders` of the run directory at `path` (hooks_order.hook_orders_from_trace)."""
    from commscope.analyze.hooks_order import hook_orders_from_trace
    from commscope.load import load_path

    return hook_orders_from_trace(load_path(os.fspath(path)))
