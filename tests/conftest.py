"""Fixtures shared by several test modules."""
from __future__ import annotations

import pytest
import torch


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
