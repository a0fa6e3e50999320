"""Fixtures shared by several test modules, and the suite's layout.

tests/unit: fast, in-process (`pytest tests/unit`: under a minute); tests/integration: multi-process runs
of the trainer, real profiler traces, HTA, a browser (marked `slow`); tests/gpu: the CUDA and Triton code
paths (on a CPU machine in Triton's interpreter). Helpers shared by all three (paths.py, rundirs.py, ...)
live in tests/ itself, which pytest puts on sys.path with this file."""
from __future__ import annotations

import os
import sys

import pytest
import torch


def _import_triton_interpreted() -> None:
    """Triton decides when `triton.language` is imported whether its own library functions (`tl.sum`, ...)
    are interpreted or compiled. A test that turns on the interpreter (TRITON_INTERPRET=1, triton_device
    below) can only call them if that import happened under the interpreter, so on a machine without a GPU
    it happens here, first, whatever test would import triton first; the variable is then restored, and no
    process the tests start inherits it."""
    if torch.cuda.is_available():
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401
    except ImportError:  # triton is optional outside the test extra: the Triton tests skip themselves
        pass
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


_import_triton_interpreted()


@pytest.fixture
def triton_device(monkeypatch):
    """Where a Triton kernel test runs: the GPU when there is one, else CPU tensors in Triton's interpreter
    (TRITON_INTERPRET=1; kernels are jitted lazily in the mode of their first call, so this does not leak
    into other tests)."""
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


@pytest.fixture
def gloo1():
    """A world-size-1 gloo process group for the test, destroyed afterwards."""
    import torch.distributed as dist

    from ports import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True, scope="module")
def _no_rank_workers_outlive_their_module():
    """The optimizer tests' gloo rank workers (optim_fakes.run_gloo_ranks) are reused within a module and
    ended with it, so no test of another module sees them among its process's children."""
    yield
    fakes = sys.modules.get("optim_fakes")
    if fakes is not None:
        fakes.stop_workers()


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration is `slow`: `pytest -m "not slow"` skips them all."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.slow)
