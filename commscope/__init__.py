"""commscope: see why communication does not overlap with compute in distributed PyTorch training."""

__version__ = "0.1.0"
