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

import contextlib
import warnings
from typing import Any, Callable

from commscope.errors import UserError

Progress = Callable[[int, int], None]
DEFAULT_PORT = 8786  # a Dask scheduler's
CONNECT_TIMEOUT_S = 30.0  # Dask's own default: a scheduler under load may take seconds to answer
POLL_S = 0.5  # how often the stage reports progress and looks whether the cluster still has workers


def map_files(fn: Callable[[str], Any], files: list[str], *, scheduler: Any = None, workers: int | None = None,
              progress: Progress | None = None, connect_timeout_s: float | None = None) -> list:
    """`[fn(f) for f in files]` on a local pool (`scheduler` None; `workers` caps its processes) or on the
    Dask cluster at `scheduler` (an address, a `distributed.Client`, or a cluster such as `LocalCluster`)."""
    if isinstance(scheduler, str):  # COMMSCOPE_SCHEDULER=" " (set, but to nothing) means local, as unset does
        scheduler = scheduler.strip() or None
    if isinstance(scheduler, str):
        scheduler = _full_address(scheduler)
    if not files:  # e.g. a rank selection without profiler traces: no pool, no connection
        return []
    if scheduler is None:
        from commscope.load.kineto_pool import parse_all

        return parse_all(list(files), progress=progress, workers=workers, fn=fn)
    return _on_dask(fn, list(files), scheduler, progress, connect_timeout_s or CONNECT_TIMEOUT_S)


def _full_address(text: str) -> str:
    """HOST, HOST:PORT or tcp://HOST as tcp://HOST:PORT, port DEFAULT_PORT where none is named: Dask
    refuses an address without a port ("missing port number"), whatever its scheme. Other schemes, and
    text that is no URL, are left to Dask."""
    from urllib.parse import urlsplit

    text = text if "://" in text else f"tcp://{text}"
    try:
        url = urlsplit(text)
        if url.scheme in ("tcp", "tls") and url.hostname and url.port is None:
            return f"{url.scheme}://{url.netloc}:{DEFAULT_PORT}{url.path}"
    except ValueError:  # a malformed port: Dask's message names it
        pass
    return text


def _connect(address: Any, timeout_s: float) -> Any:
    """A Client of the scheduler at `address` with at least one worker, or UserError. The connection is
    made on a daemon thread bounded by `timeout_s`: Dask's own connect timeout does not cover a peer that
    accepts and then says nothing (an HTTP port such as the dashboard's), which would hang the command."""
    import threading

    from distributed import Client

    _probe(address, timeout_s)
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = Client(address, timeout=timeout_s)
        except BaseException as e:  # noqa: BLE001 - a non-Dask peer can raise anything (even MemoryError)
            box["error"] = e

    t = threading.Thread(target=connect, name="commscope-dask-connect", daemon=True)
    # Dask warns (a table on stderr) of package versions that differ between client, scheduler and
    # workers; what matters to the stage is commscope's own version, which _check_workers says in one line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.start()
        t.join(timeout_s + 5)
    if t.is_alive():
        raise UserError(f"cannot reach the Dask scheduler at {address}: no Dask answer within {timeout_s:.0f} s "
                        "(is it a scheduler's address, e.g. tcp://HOST:8786, not the dashboard's?)")
    if "error" in box:
        e = box["error"]
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if not isinstance(e, (OSError, TimeoutError, ValueError)):  # its text is the peer's noise, not a reason
            first = "it does not answer as a Dask scheduler (is it a scheduler's address, e.g. tcp://HOST:8786?)"
        raise UserError(f"cannot reach the Dask scheduler at {address}: {first}")
    client = box["client"]
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - a timeout, or the scheduler going away meanwhile
        client.close()
        raise UserError(f"the Dask scheduler at {address} has no workers (waited {timeout_s:.0f} s): start "
                        f"some with `dask worker {address}`") from None
    try:
        _check_workers(client, address)
    except BaseException:
        client.close()
        raise
    return client


def _check_workers(client: Any, address: Any) -> None:
    """UserError where a worker cannot import commscope, or runs another version of it than this machine:
    a worker without it fails its first task (and its process exits), and one of another version parses
    differently from what this machine would."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            versions = client.get_versions(packages=["commscope"])
    except Exception:  # noqa: BLE001 - a worker that does not answer: the stage's own bounds apply
        return
    mine = (versions.get("client") or {}).get("packages", {}).get("commscope")
    theirs = {w: (v or {}).get("packages", {}).get("commscope") for w, v in (versions.get("workers") or {}).items()}
    missing = sorted(w for w, v in theirs.items() if v is None)
    if missing:
        raise UserError(f"{len(missing)} of the {len(theirs)} Dask worker(s) of the scheduler at {address} cannot "
                        f"import commscope (e.g. {missing[0]}): install commscope {mine} in the workers' "
                        "environment (pip install 'commscope[dask]'), or start workers from one that has it")
    other = sorted((w, v) for w, v in theirs.items() if v != mine)
    if other:
        raise UserError(f"{len(other)} of the {len(theirs)} Dask worker(s) of the scheduler at {address} run "
                        f"commscope {other[0][1]} (e.g. {other[0][0]}) where this machine runs {mine}: the "
                        "per-rank stage must parse as this machine would; install the same version on both")


def _probe(address: Any, timeout_s: float) -> None:
    """UserError at once when nothing listens at a tcp:// or tls:// `address` (connection refused, unknown
    host): Dask itself retries a refused connection until its timeout. Other addresses (a cluster
    object, inproc://, ucx://) and anything the probe cannot tell are left to Dask."""
    import socket
    from urllib.parse import urlsplit

    if not isinstance(address, str) or not address.startswith(("tcp://", "tls://")):
        return
    try:
        url = urlsplit(address)
        host, port = url.hostname, url.port or DEFAULT_PORT
    except ValueError:  # a malformed port: Dask's message names it
        return
    if not host:
        return
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except socket.timeout:  # no answer at all (a firewall that drops): Dask's own timeout applies
        return
    except OSError as e:
        tried = "" if url.port else f" (port {DEFAULT_PORT}, Dask's default: the address names none)"
        raise UserError(f"cannot reach the Dask scheduler at {address}{tried}: {e.strerror or e}") from None


def _on_dask(fn: Callable, files: list[str], scheduler: Any, progress: Progress | None, timeout_s: float) -> list:
    try:
        import distributed  # noqa: F401 - only whether it is installed
    except ImportError:
        raise UserError("a scheduler address needs Dask distributed: pip install 'commscope[dask]'") from None
    with _dask_quiet():
        return _gather(fn, files, scheduler, progress, timeout_s)


@contextlib.contextmanager
def _dask_quiet():
    """Dask's loggers (`distributed`, `distributed.client`, … each with its own level and stderr handler)
    silenced while the command uses a cluster: its client logs reconnection attempts with tracebacks, and
    the command says in one line what happened instead. Their levels are restored afterwards."""
    import logging

    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "distributed" or name.startswith("distributed.")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _gather(fn: Callable, files: list[str], scheduler: Any, progress: Progress | None, timeout_s: float) -> list:
    from concurrent.futures import CancelledError

    from distributed import Client
    from distributed.comm.core import CommClosedError

    own = not isinstance(scheduler, Client)
    client = _connect(scheduler, timeout_s) if own else scheduler
    try:
        # pure=False: the same path may hold new contents on a second call; one task per file
        futures = client.map(fn, files, pure=False)
        _settle(client, futures, scheduler, progress, timeout_s)  # every task settled, or UserError
        for path, f in zip(files, futures):  # the first failure in file order, as the local pool raises it
            if f.status == "error":
                _raise_task_error(f, path)
        return client.gather(futures)
    except (CancelledError, CommClosedError) as e:  # the scheduler (or the connection to it) went away
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(":")
        raise UserError(f"the Dask scheduler at {scheduler} went away before the per-rank stage finished "
                        f"({first}); start it and its workers again, then rerun") from None
    finally:
        if own:
            client.close()


def _settle(client: Any, futures: list, scheduler: Any, progress: Progress | None, timeout_s: float) -> None:
    """Wait until every task has finished or failed, reporting progress. A cluster left without workers
    (all of them killed, or each exiting on a task it could not run) leaves the tasks waiting forever:
    after `timeout_s` with no worker, UserError. One wait over all the futures per POLL_S, so the cost of
    waiting stays linear in the files, not quadratic."""
    import time

    from distributed import wait

    reported, alone_since = -1, None
    while True:
        try:
            wait(futures, timeout=POLL_S)
            settled = True
        except TimeoutError:
            settled = False
        done = sum(f.done() for f in futures)
        if progress and done != reported:
            progress(done, len(futures))
            reported = done
        if settled:
            return
        if (client.scheduler_info() or {}).get("workers"):
            alone_since = None
            continue
        alone_since = alone_since or time.monotonic()
        if time.monotonic() - alone_since >= timeout_s:
            raise UserError(f"the Dask scheduler at {scheduler} has had no workers for {timeout_s:.0f} s with "
                            f"{len(futures) - done} of {len(futures)} files left to parse (its workers ended, or "
                            "exited on a task they could not run): start workers with commscope installed, then "
                            "rerun")


def _raise_task_error(future: Any, path: str) -> None:
    """Raise a failed task's error; where a worker found missing a path this machine sees, say why."""
    import os

    from commscope.load.files import Missing

    try:
        future.result()
    except Missing as e:
        if not os.path.exists(path):
            raise
        raise UserError(f"{e} on the Dask worker that read it, though this machine sees it: the workers read "
                        "every file at the same path (a filesystem they share with this machine, the same "
                        "absolute path)") from None
