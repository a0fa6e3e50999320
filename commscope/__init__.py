"""commscope: see why communication does not overlap with compute in distributed PyTorch training."""

__version__ = "0.1.0"


def record(run_dir, **kwargs):
    """Record this rank into `run_dir`: `with commscope.record(run_dir, trace="light") as rec: ...`.
    Same as `commscope.recording.record` (docs/recording.md), imported on first call so that
    `import commscope` (the CLI, the loader) does not import torch."""
    from commscope.recording import record as _record

    return _record(run_dir, **kwargs)
