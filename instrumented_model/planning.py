"""What `commscope plan` needs from the trainer: the NorMuon matrix shapes of a preset, or of a recorded
run's model (its config.json), which only the trainer's config knows how to derive.

`commscope plan` reaches this module through its command module only (the profiler never imports the
trainer elsewhere); the planning algorithms and the calibration from a run's timings are the library
`commscope.plan`, which the trainer imports and which knows nothing of the trainer.
"""
from __future__ import annotations

from types import SimpleNamespace

from commscope.errors import UserError
from commscope.plan.matrices import Matrix, matrices_for_config
from instrumented_model.config import make_config

_MODEL_DIMS = ("model_dim", "num_layers", "attn_layers", "mlp_layers_padded")


def preset_matrices(preset: str, world_size: int) -> list[Matrix]:
    """The preset's NorMuon matrices. A world size the trainer cannot shard the banks over is still
    plannable (whole-matrix ownership does not need even bank chunks); the `bank` strategy then reports
    itself unavailable."""
    return matrices_for_config(make_config(preset, world_size, check_shards=False))


def trainer_refusal(preset: str, world_size: int) -> str | None:
    """Why the reference trainer would refuse to run `preset` on `world_size` ranks (a sharded tensor that
    does not split evenly: its embeddings and lm_head, not only the banks the plan lays out), or None."""
    try:
        make_config(preset, world_size)
    except UserError as e:
        return str(e)
    return None


def run_matrices(config: dict, world_size: int, where: str) -> list[Matrix]:
    """The matrices of the model a run trained, from its config.json document (`config`): the model's own
    dimensions when recorded, else its preset's. `where` names the run in errors."""
    cfg = config.get("config", {}) or {}
    model = cfg.get("model") or {}
    if all(k in model for k in _MODEL_DIMS):
        return matrices_for_config(SimpleNamespace(**{k: model[k] for k in _MODEL_DIMS}))
    preset = run_preset(config)
    if not preset:
        raise UserError(f"{where}: config.json has no model dimensions or preset to calibrate from")
    return matrices_for_config(make_config(preset, world_size))


def run_preset(config: dict) -> str | None:
    """The preset a run names in its config.json document (its arguments, else its summary), or None."""
    return (((config.get("config") or {}).get("args") or {}).get("preset")
            or (config.get("summary") or {}).get("preset"))
