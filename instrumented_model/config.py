"""Model dimensions of the reference trainer: the `tiny` (CPU) and `speedrun` (GPU) presets.

`ModelConfig` fixes every shape of the 13 labelled parameters (as the 2026-01-18 modded-nanogpt record).
`make_config(preset, world_size)` returns a preset checked against a world size: every tensor the optimizer shards (row
chunks of dim 0 of ve0–2/embed/lm_head, matrix chunks of the attn and mlp bank views) must split evenly,
otherwise a UserError says which one does not.

Invariants:
- For world sizes 1, 2, 4 and 8 the shapes are identical (the MLP bank pads to a multiple of 8 matrices),
  so the same seed gives the same model and the same losses whatever the world size.
- Layer `no_attn_layer` has an MLP but no attention; every other layer has both. Attention-indexed
  parameters (attn bank, attn_gate_bank) are indexed by the attention layer's ordinal, not its layer index.
- Value embeddings feed `ve_layers` (all attention layers); `ve_tables[i]` names the table for
  `ve_layers[i]`; ve_gate_bank has one (num_heads, gate_dim) gate per entry of `ve_layers`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from commscope.errors import UserError

GATE_DIM = 12  # gates read the first 12 channels of the residual stream (the record's Linear 12→1)
NUM_VE_TABLES = 3  # ve0, ve1, ve2
SHARD_QUANTUM = 8  # banks are padded so their matrix views split over 8 ranks whatever the world size


def padded_mlp_layers(num_layers: int, world_size: int) -> int:
    """Smallest L_pad >= num_layers such that the (2·L_pad, 4D, D) view splits over lcm(8, world_size)."""
    quantum = math.lcm(SHARD_QUANTUM, world_size)
    layers = num_layers
    while (2 * layers) % quantum:
        layers += 1
    return layers


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    model_dim: int
    num_layers: int
    num_heads: int
    head_dim: int
    seq_len: int
    no_attn_layer: int  # the one middle layer without attention (speedrun: layer 6)
    ve_layers: tuple[int, ...]  # layers whose attention adds a value embedding to v
    ve_tables: tuple[int, ...]  # which of ve0..ve2 each of ve_layers uses
    skip_from: int  # U-net skip: the output of this layer ...
    skip_to: int  # ... is added (gated by skip_gate) to the input of this layer
    mlp_layers_padded: int
    attn_scale: float = 0.12  # softmax scale; q and k are rms-normed so 1/sqrt(head_dim) is not needed
    logit_softcap: float = 15.0
    rope_base: float = 1024.0
    gate_dim: int = GATE_DIM

    @property
    def attn_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if i != self.no_attn_layer)

    @property
    def num_attn_layers(self) -> int:
        return len(self.attn_layers)

    @property
    def mlp_dim(self) -> int:
        return 4 * self.model_dim

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attn_layers"] = list(self.attn_layers)
        return d


PRESETS: dict[str, ModelConfig] = {
    # The 2026-01-18 record: 11 layers, 10 with attention; the MLP bank has 1 padding layer (24 = 3×8 matrices).
    "speedrun": ModelConfig(
        name="speedrun", vocab_size=50304, model_dim=768, num_layers=11, num_heads=6, head_dim=128,
        seq_len=2048, no_attn_layer=6, ve_layers=(0, 1, 2, 9, 10), ve_tables=(0, 1, 2, 1, 2),
        skip_from=3, skip_to=6, mlp_layers_padded=12,
    ),
    # Same structure scaled down: 7 layers, 6 with attention (attn view 24 = 3×8 matrices), MLP bank
    # 7 + 1 padding layer (16 = 2×8), 5 value-embedding layers, every label present.
    "tiny": ModelConfig(
        name="tiny", vocab_size=512, model_dim=64, num_layers=7, num_heads=4, head_dim=16,
        seq_len=64, no_attn_layer=3, ve_layers=(0, 1, 2, 5, 6), ve_tables=(0, 1, 2, 1, 2),
        skip_from=1, skip_to=3, mlp_layers_padded=8,
    ),
}


def validate(cfg: ModelConfig) -> None:
    """Structural checks that do not depend on the world size (a wrong preset is a programming error)."""
    if cfg.num_heads * cfg.head_dim != cfg.model_dim:
        raise ValueError(f"{cfg.name}: num_heads*head_dim != model_dim")
    if not 0 < cfg.no_attn_layer < cfg.num_layers - 1:
        raise ValueError(f"{cfg.name}: the layer without attention must be a middle layer")
    if len(cfg.ve_layers) != len(cfg.ve_tables) or set(cfg.ve_tables) != set(range(NUM_VE_TABLES)):
        raise ValueError(f"{cfg.name}: ve_layers/ve_tables must pair up and use all of ve0..ve2")
    if any(layer not in cfg.attn_layers for layer in cfg.ve_layers):
        raise ValueError(f"{cfg.name}: value embeddings need attention layers")
    if not 0 <= cfg.skip_from < cfg.skip_to < cfg.num_layers:
        raise ValueError(f"{cfg.name}: skip must go forward")
    if cfg.mlp_layers_padded < cfg.num_layers or cfg.model_dim < cfg.gate_dim:
        raise ValueError(f"{cfg.name}: inconsistent padding or model_dim < gate_dim")


def make_config(preset: str, world_size: int, *, check_shards: bool = True) -> ModelConfig:
    """The preset's config for `world_size` ranks (MLP bank padded for them); raises UserError if a sharded
    tensor would not split evenly, unless `check_shards=False` (the planner: whole-matrix ownership needs
    no even bank chunks)."""
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    if world_size < 1:
        raise UserError(f"world size must be >= 1, got {world_size}")
    cfg = PRESETS[preset]
    cfg = replace(cfg, mlp_layers_padded=padded_mlp_layers(cfg.num_layers, world_size))
    validate(cfg)
    if not check_shards:
        return cfg
    sharded_dims = {  # the mlp bank is padded to split evenly (padded_mlp_layers), so it is not checked
        "attn bank matrices (4·attention layers)": 4 * cfg.num_attn_layers,
        "vocab rows (ve0-2, embed)": cfg.vocab_size,
        "lm_head rows (model_dim)": cfg.model_dim,
    }
    for what, n in sharded_dims.items():
        if n % world_size:
            raise UserError(
                f"preset {preset!r} cannot be sharded over {world_size} ranks: {what} = {n} "
                f"is not divisible by {world_size}"
            )
    return cfg
