"""commscope: see why communication does not overlap with compute in distributed PyTorch training."""

__version__ = "0.1.0"


def record(run_dir, **kwargs):
    """Record this rank into `run_dir`: `with commscope.record(run_dir, trace="light") as rec: ...`.
    Same as `commscope.recording.record` (docs/recording.md), imported on first call so that
    `import commscope` (the CLI, the loader) does not import torch."""
    from commscope.recording import record as _record

    return _record(run_dir, **kwargs)


def label(name):
    """`with commscope.label("attn"): dist.all_reduce(...)`: a `record_function("commscope:attn:")`
    scope that names the collectives launched inside it in any torch.profiler trace. Same as
    `commscope.recording.label.label` (docs/recording.md), imported on first call."""
    from commscope.recording.label import label as _label

    return _label(name)


def size_labels(named_parameters, group=None, element_size=None, *, flat=False, world_size=None):
    """`json.dump(commscope.size_labels(model.named_parameters()), f)` writes a `--label-map` file: label
    (the parameter name with layer indices collapsed, `blocks.*.attn.qkv.weight`, or `group(name)`) →
    byte sizes; `flat=True, world_size=N` sums each module's parameters as FSDP2 moves them. Same as
    `commscope.recording.label.size_labels` (docs/traces.md); imports no torch."""
    from commscope.recording.label import size_labels as _size_labels

    return _size_labels(named_parameters, group=group, element_size=element_size, flat=flat, world_size=world_size)


def ddp_comm_hook(rec, label="ddp_bucket", phase="allreduce"):
    """`model.register_comm_hook(state=None, hook=commscope.ddp_comm_hook(rec))`: DDP averages each gradient
    bucket as torch's `allreduce_hook` does, recorded through `rec` with the time backward() blocks on it.
    Same as `commscope.recording.ddp_comm_hook` (docs/recording.md, "DDP"), imported on first call."""
    from commscope.recording.ddp import ddp_comm_hook as _ddp_comm_hook

    return _ddp_comm_hook(rec, label=label, phase=phase)
