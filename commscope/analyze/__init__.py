"""Analyses: each module one analysis, frames in, frames out (HTA analyzers/ is the style model)."""
