"""The reference trainer commscope measures: a modded-nanogpt-style GPT with parameter banks, a switchable
LM-head layout, tied-embedding transpose kernels, and the unified NorMuon+Adam optimizer.

It is one user of the public recording API (commscope.recording); commscope itself never imports the model.
Importing this package is cheap (no torch): `GPT` and `LABELS` load the model module on first access, so
CLI commands that only need preset dimensions (`instrumented_model.config`) stay fast.
"""
from .config import PRESETS, ModelConfig, make_config

__all__ = ["GPT", "LABELS", "ModelConfig", "PRESETS", "make_config"]


def __getattr__(name: str):
    if name in ("GPT", "LABELS"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
