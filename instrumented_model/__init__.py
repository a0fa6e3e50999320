"""The reference trainer commscope measures: a modded-nanogpt-style GPT with parameter banks, a switchable
LM-head layout, tied-embedding transpose kernels, and the unified NorMuon+Adam optimizer.

It is one user of the public recording API (commscope.recording) and of the planning library (commscope.plan).
It also holds what drives it from the command line: its option table (options), the launcher that runs it
under torch.distributed.run and writes summary.json (launcher, run_summary), fault injection (faults) and
what `commscope plan` needs from it (planning). commscope reaches these only through the `run` and `plan`
command modules (the option table when the CLI starts, the rest on first use); no other commscope module
imports this package.

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
