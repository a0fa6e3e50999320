"""The per-rank stage on one machine or on a cluster: `map_files(fn, files)` returns `[fn(f) for f in files]`,
in the order of `files`, computed by a local process pool or by a Dask distributed cluster.

- Local (`scheduler=None`): commscope's fork pool (`commscope.load.kineto_pool.parse_all`: one process per
  core, this one included).
- Cluster (`scheduler="tcp://HOST:8786"`, or a `distributed.Client` / cluster object): every file is one
  task of `fn` on the cluster's workers, and only `fn`'s results travel back. The files must be readable
  at the same path on the workers (a shared filesystem); `fn` must be importable there (commscope installed
  in the workers' environment), as `commscope.load.kineto.parse_file` is.

Why Dask distributed rather than Ray: its unit is a plain function call on a path, which is exactly the
per-rank stage; it installs from PyPI as pure Python (`pip install 'commscope[dask]'`), runs the same code
on a laptop's `LocalCluster` and on a cluster started with `dask scheduler` / `dask worker` (or dask-jobqueue
under Slurm), and returns pandas frames without a conversion layer. Ray would add a native runtime of its
own for a stage that needs none of its actors or object store.

Invariant: results come back in the order of `files` whatever finished first; the first failing file's
error (in that order) is raised.
"""
from __future__ import annotations

from typing import Any, Callable

from commscope.errors import UserError

Progress = Callable[[int, int], None]
CONNECT_TIMEOUT_S = 30.0  # Dask's own default: a scheduler under load may take seconds to answer


def map_files(fn: Callable[[str], Any], files: list[str], *, scheduler: Any = None, workers: int | None = None,
              progress: Progress | None = None, connect_timeout_s: float | None = None) -> list:
    """`[fn(f) for f in files]` on a local pool (`scheduler` None; `workers` caps its processes) or on the
    Dask cluster at `scheduler` (an address, a `distributed.Client`, or a cluster such as `LocalCluster`)."""
    if scheduler is None:
        from commscope.load.kineto_pool import parse_all

        return parse_all(list(files), progress=progress, workers=workers, fn=fn)
    return _on_dask(fn, list(files), scheduler, progress, connect_timeout_s or CONNECT_TIMEOUT_S)


def _on_dask(fn: Callable, files: list[str], scheduler: Any, progress: Progress | None, timeout_s: float) -> list:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UserError("a scheduler address needs Dask distributed: pip install 'commscope[dask]'") from None
    own = not isinstance(scheduler, Client)
    try:
        client = Client(scheduler, timeout=timeout_s) if own else scheduler
    except (OSError, TimeoutError, ValueError) as e:
        raise UserError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    try:
        # pure=False: the same path may hold new contents on a second call; one task per file
        futures = client.map(fn, files, pure=False)
        if progress:
            for i, _ in enumerate(as_completed(futures), 1):
                progress(i, len(files))
        for f in futures:  # the first failure in file order, as the local pool raises it
            if f.status == "error":
                f.result()
        return client.gather(futures)
    finally:
        if own:
            client.close()
