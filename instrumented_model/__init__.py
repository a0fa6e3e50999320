"""The reference trainer commscope measures: a modded-nanogpt-style GPT with parameter banks, a switchable
LM-head layout, tied-embedding transpose kernels, and the unified NorMuon+Adam optimizer.

It is one user of the public recording API (commscope.record); commscope itself never imports it.
"""
from .config import PRESETS, ModelConfig, make_config
from .model import GPT, LABELS

__all__ = ["GPT", "LABELS", "ModelConfig", "PRESETS", "make_config"]
