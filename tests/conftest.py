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
