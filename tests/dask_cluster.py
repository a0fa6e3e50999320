"""A Dask LocalCluster for tests, its scratch space in a folder the test owns: every Dask server, the
scheduler and each worker, makes `dask-scratch-space` in the system temp folder unless told where, and
leaves it there (LocalCluster's local_directory reaches the workers only; the scheduler takes its own).
Skips where Dask distributed is not installed."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def local_cluster(scratch: Path, **kwargs) -> Iterator:
    distributed = pytest.importorskip("distributed", reason="Dask distributed not installed (extra 'dask')")
    with distributed.LocalCluster(dashboard_address=None, local_directory=str(scratch),
                                  scheduler_kwargs={"local_directory": str(scratch)}, **kwargs) as cl:
        yield cl
