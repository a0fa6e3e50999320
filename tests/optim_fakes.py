"""A stand-in for the reference model in optimizer tests: tensors shaped like the 13 real labels (small
dims that split over 1, 2 and 4 ranks) and a deterministic quadratic loss per sample, so a global batch
of SAMPLES samples can be divided over any world size and micro-step count and still average to the same
gradient. Keeps optimizer tests independent of instrumented_model's GPT, and fast.

Also the launcher the multi-rank optimizer tests share (`run_gloo_ranks`: gloo ranks on spawned worker
processes that the test session reuses).
"""
from __future__ import annotations

import contextlib
import multiprocessing.connection as mp_connection
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from commscope.recording.api import NullRecorder
from ports import free_port

D, V = 16, 64
SAMPLES = 8  # global batch: divisible by world size (≤ 4) × grad_accum (2)


def label_shapes(head_layout: str) -> dict[str, tuple[int, ...]]:
    return {
        "attn": (2, 4 * D, D),  # (L_attn, 4D, D) → 8 square matrices
        "mlp": (2, 2, 4 * D, D),  # (L_pad, 2, 4D, D) → 4 tall matrices
        "scalars": (6,),
        "ve0": (V, D), "ve1": (V, D), "ve2": (V, D),
        "smear_gate": (1, 12), "skip_gate": (1, 12),
        "attn_gate_bank": (2, 6, 12), "ve_gate_bank": (1, 6, 12),
        "x0_lambdas": (3,),
        "lm_head": (D, V) if head_layout == "transposed" else (V, D),
        "embed": (V, D),
    }


def make_params(head_layout: str = "transposed", seed: int = 0) -> dict[str, nn.Parameter]:
    """Same seed → same values; lm_head starts tied to embed (its transpose in the transposed layout)."""
    g = torch.Generator().manual_seed(seed)
    params = {label: nn.Parameter(torch.randn(shape, generator=g) * 0.5)
              for label, shape in label_shapes(head_layout).items()}
    with torch.no_grad():
        emb = params["embed"]
        params["lm_head"].copy_(emb.T if head_layout == "transposed" else emb)
    return params


def sample_loss(params: dict[str, nn.Parameter], step: int, sample: int, head_layout: str) -> torch.Tensor:
    """Σ_label ½‖tanh(p) − T‖² with targets depending on (step, sample): non-linear in p, so the
    parameters' history matters, and every label (embed included) gets a gradient."""
    g = torch.Generator().manual_seed(1000 * step + sample + 1)
    loss = torch.zeros(())
    for label, shape in label_shapes(head_layout).items():
        target = torch.randn(shape, generator=g) * 0.3
        loss = loss + 0.5 * (torch.tanh(params[label]) - target).square().sum()
    return loss


def backward_step(opt, params, step: int, rank: int, world_size: int, head_layout: str,
                  grad_accum: int = 2) -> None:
    """This rank's share of the global batch, over `grad_accum` micro-steps, gradient = share mean."""
    per_rank = SAMPLES // world_size
    per_micro = per_rank // grad_accum
    for m in range(grad_accum):
        opt.set_last_micro_step(m == grad_accum - 1)
        first = rank * per_rank + m * per_micro
        loss = sum(sample_loss(params, step, j, head_layout) for j in range(first, first + per_micro))
        (loss / per_rank).backward()


class ListRecorder(NullRecorder):
    """Logs collective launches and region enter/exit in order, for schedule assertions."""

    def __init__(self):
        self.log: list[tuple] = []

    @contextlib.contextmanager
    def region(self, name: str):
        self.log.append(("enter", name))
        yield
        self.log.append(("exit", name))

    def collective(self, fn, *args, label, phase, **kwargs):
        self.log.append(("collective", label, phase, fn.__name__))
        return super().collective(fn, *args, label=label, phase=phase, **kwargs)


def _rank_main(rank: int, body, world_size: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)  # several ranks share 2 cores: intra-op threads would only contend
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        torch.save(body(rank, world_size), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _rank_worker(conn) -> None:
    """A spawned process that runs one rank per task it receives, until the parent goes away. Reused
    across launches so that the session pays torch's import (seconds per process on 2 cores) once per
    worker rather than once per rank of every launch."""
    while True:
        try:
            task = conn.recv()  # unpickling imports `body`'s module
        except EOFError:
            return
        try:
            _rank_main(*task)
            conn.send(None)
        except BaseException:  # noqa: BLE001 - every failure goes back to the parent, which raises it
            conn.send(traceback.format_exc())


LAUNCH_TIMEOUT_S = 600  # far above any optimizer test's few seconds, far below CI's limit

# (process, connection) of each spawned worker, kept until the test module that started them ends
# (tests/conftest.py calls stop_workers then: other modules assert that no child process is left)
_workers: list[tuple[Any, Any]] = []


def _stop_workers() -> None:
    """Kill every worker: after a failed launch, ranks may be blocked in a collective that never ends."""
    for proc, conn in _workers:
        proc.kill()
        proc.join()
        conn.close()
    _workers.clear()


def stop_workers() -> None:
    """End every idle worker: closing its pipe ends its loop (EOFError); one that does not end is killed."""
    for proc, conn in _workers:
        conn.close()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    _workers.clear()


def run_gloo_ranks(body, world_size: int, out_dir) -> list:
    """Run `body(rank, world_size)` on `world_size` spawned gloo CPU ranks (free port, process group set
    up and torn down around it) and return the ranks' results in rank order. `body` is pickled by name:
    a module-level function of an importable module (a test module is one).

    Results come back through torch.save files in `out_dir` so that the assertions run in the parent,
    where pytest reports them; a rank that raises or dies makes this raise, after every worker is killed.
    One launcher for every multi-rank optimizer test, so a fix to the spawning (threads, start method,
    teardown) reaches them all.
    """
    # spawned, not forked: a child forked from a process whose torch already runs threads (the test
    # session's) can crash inside torch; a SIGSEGV was seen on a loaded 2-core machine (tests/trace_corpus.py)
    ctx = mp.get_context("spawn")
    _workers[:] = [(proc, conn) for proc, conn in _workers if proc.is_alive()]
    while len(_workers) < world_size:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_rank_worker, args=(child,), name=f"gloo-rank-worker{len(_workers)}", daemon=True)
        proc.start()
        child.close()
        _workers.append((proc, parent))
    port = free_port()
    ranks = _workers[:world_size]
    for rank, (_, conn) in enumerate(ranks):
        conn.send((rank, body, world_size, port, str(out_dir)))
    pending = dict(enumerate(ranks))
    errors: dict[int, str] = {}
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while pending:
        # after a failure, the others get a moment to report theirs: the first in is often only a peer's
        # "connection closed", the cause is another rank's
        left = deadline - time.monotonic()
        if not mp_connection.wait([w for proc, conn in pending.values() for w in (conn, proc.sentinel)],
                                  timeout=1.0 if errors else max(left, 0.0)):
            if not errors:  # a rank stuck in a collective would otherwise hang the whole test session
                errors.update({r: f"no result within {LAUNCH_TIMEOUT_S} s (hung)" for r in pending})
            break
        for rank, (proc, conn) in list(pending.items()):
            if conn.poll():  # a result, or the end of the pipe of a process that died
                try:
                    error = conn.recv()
                except EOFError:
                    error = f"the process died (exit code {proc.exitcode})"
            elif not proc.is_alive():
                error = f"the process died (exit code {proc.exitcode})"
            else:
                continue
            del pending[rank]
            if error is not None:
                errors[rank] = error
    if errors:
        _stop_workers()
        raise RuntimeError("\n".join(f"rank {r} of {world_size} failed:\n{e}" for r, e in sorted(errors.items())))
    return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
