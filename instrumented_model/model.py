"""The reference GPT: the modded-nanogpt speedrun structure of the 2026-01-18 record.

Every weight is one of 13 labelled parameters owned by `GPT` itself (no submodule owns weights), so the
optimizer and the recorders see exactly the record's labels, shapes and layouts:

    attn            (L_attn, 4D, D)      QKVO of every attention layer; viewed (4·L_attn, D, D) by the optimizer
    mlp             (L_pad, 2, 4D, D)    up and down of every layer + zero padding layers (never read)
    scalars         (L + 2,)             per-layer residual lambdas, then the smear and skip lambdas
    ve0, ve1, ve2   (V, D)               value embeddings added to v on `ve_layers`
    smear_gate      (1, 12)              gate of the previous-token smear
    skip_gate       (1, 12)              gate of the U-net skip (skip_from → skip_to)
    attn_gate_bank  (L_attn, H, 12)      per-head sigmoid output gates
    ve_gate_bank    (len(ve_layers), H, 12)  per-head gates of the value embeddings
    x0_lambdas      (L,)                 how much of the first-layer input x0 each layer mixes back in
    lm_head         (D, V) transposed | (V, D) standard  (heads.py)
    embed           (V, D)

Invariants:
- The forward only indexes the banks (`view`, `unbind`, slicing): no copies, so gradients land in the
  bank tensors and the padding layers of `mlp` get exact zero gradients.
- Initialisation draws only from torch's global RNG, in a fixed order, for tensors whose shapes do not
  depend on the world size; the mlp padding layers are zero and consume no random numbers. Same seed →
  same parameters for every world size.
- lm_head starts as the transpose (or copy) of embed: the embeddings are tied until the optimizer splits
  them.
- The loss is a mean cross-entropy over fp32 soft-capped logits (instrumented_model.softcap_ce: one fused
  Triton op on CUDA, the plain torch ops elsewhere; both agree to fp32 rounding). On CUDA the trunk and
  the head matmul run under bf16 autocast; on CPU everything is fp32.
- Under autocast the residual stream is in the autocast dtype (`bf16_residual`, the default): the
  embedding outputs are cast to it, and everything added to them (matmul outputs, gates, 0-d lambdas)
  keeps it, as in the record, whose embedding tables are bf16. The parameters, their gradients and the
  optimizer stay fp32. An fp32 stream made Inductor's norm and residual kernels move twice the bytes
  (docs/benchmarks.md).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import NUM_VE_TABLES, ModelConfig
from .fp8_head import fp8_head_loss
from .heads import check_layout, head_weight_from_embed, head_weight_shape, lm_head_logits
from .softcap_ce import softcap, softcap_cross_entropy

LABELS = ("attn", "mlp", "scalars", "ve0", "ve1", "ve2", "smear_gate", "skip_gate", "attn_gate_bank",
          "ve_gate_bank", "x0_lambdas", "lm_head", "embed")  # the record's scatter order


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """fp32 for bf16 autocast outputs; float64 stays float64 (the equivalence tests run in float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


class Rotary(nn.Module):
    """Rotary position embedding on (B, T, H, head_dim); pairs dimension i with i + head_dim/2."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float):
        super().__init__()
        # Tables are computed on the CPU, then moved to the default device: arange on the meta device
        # would import torch's reference decompositions (seconds) just to build a shape-only model.
        cpu = torch.device("cpu")
        # float64 then rounded once to fp32, so the tables do not depend on how they were computed.
        inv_freq = base ** (-torch.arange(head_dim // 2, dtype=torch.float64, device=cpu) / (head_dim // 2))
        theta = torch.outer(torch.arange(max_seq_len, dtype=torch.float64, device=cpu), inv_freq)
        device = torch.get_default_device()
        self.register_buffer("cos", theta.cos().float().to(device), persistent=False)
        self.register_buffer("sin", theta.sin().float().to(device), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        cos, sin = self.cos[None, :T, None, :], self.sin[None, :T, None, :]
        x1, x2 = at_least_fp32(x).chunk(2, dim=-1)
        return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1).type_as(x)


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, head_layout: str = "transposed", fused_loss: bool | None = None,
                 fp8_head: bool = False, bf16_residual: bool = True):
        """fused_loss: the softcap_ce kernels (None: on CUDA when Triton is installed; see softcap_ce);
        fp8_head: the record's FP8 head matmuls in the training loss (fp8_head.py; CUDA only);
        bf16_residual: the residual stream in autocast's dtype under autocast (False: fp32, see above)."""
        super().__init__()
        check_layout(head_layout)
        if fp8_head and fused_loss is False:
            raise ValueError("the FP8 head computes its loss with the fused kernels: fused_loss=False contradicts it")
        self.cfg, self.head_layout, self.fused_loss, self.fp8_head = cfg, head_layout, fused_loss, fp8_head
        self.bf16_residual = bf16_residual
        D, V, H, G, L = cfg.model_dim, cfg.vocab_size, cfg.num_heads, cfg.gate_dim, cfg.num_layers
        # layer index → ordinal in the attention-indexed banks / ve gate bank
        self.attn_index = {layer: j for j, layer in enumerate(cfg.attn_layers)}
        self.ve_index = {layer: j for j, layer in enumerate(cfg.ve_layers)}
        self.rotary = Rotary(cfg.head_dim, cfg.seq_len, cfg.rope_base)

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape))

        self.attn = param(cfg.num_attn_layers, 4 * D, D)
        self.mlp = param(cfg.mlp_layers_padded, 2, cfg.mlp_dim, D)
        self.scalars = param(L + 2)
        self.ve0, self.ve1, self.ve2 = (param(V, D) for _ in range(NUM_VE_TABLES))
        self.smear_gate = param(1, G)
        self.skip_gate = param(1, G)
        self.attn_gate_bank = param(cfg.num_attn_layers, H, G)
        self.ve_gate_bank = param(len(cfg.ve_layers), H, G)
        self.x0_lambdas = param(L)
        self.lm_head = param(*head_weight_shape(head_layout, D, V))
        self.embed = param(V, D)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        if self.embed.is_meta:  # a shape-only model has no values (and meta normal_ imports dynamo)
            return
        cfg = self.cfg
        D, L = cfg.model_dim, cfg.num_layers
        bound = math.sqrt(3) * 0.5 / math.sqrt(D)  # uniform with std 0.5/sqrt(D)
        qkvo = self.attn.view(cfg.num_attn_layers, 4, D, D)
        qkvo[:, :3].uniform_(-bound, bound)
        qkvo[:, 3].zero_()  # output projections start at zero: each block starts as the identity
        self.mlp.zero_()  # down projections and the padding layers stay zero
        self.mlp[:L, 0].uniform_(-bound, bound)
        self.scalars[:L].fill_(1.0)  # residual lambdas
        self.scalars[L] = 0.1  # smear lambda
        self.scalars[L + 1] = 1.0  # skip lambda
        for ve in (self.ve0, self.ve1, self.ve2):
            ve.normal_(0.0, 0.5)  # same scale as v
        for gate in (self.smear_gate, self.skip_gate, self.attn_gate_bank, self.ve_gate_bank):
            gate.zero_()  # sigmoid(0): every gate starts half open (ve gates: 2·sigmoid = 1)
        self.x0_lambdas.zero_()
        self.embed.normal_(0.0, 0.5 / math.sqrt(D))  # small: the tied head then starts near uniform logits
        self.lm_head.copy_(head_weight_from_embed(self.head_layout, self.embed))

    def labelled_params(self) -> dict[str, nn.Parameter]:
        """The 13 labelled parameters, in the record's scatter order."""
        return {label: getattr(self, label) for label in LABELS}

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        cap = self.cfg.logit_softcap
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=idx.is_cuda):
            x = self.final_hidden(idx)
            if self.fp8_head:
                return fp8_head_loss(x, self.lm_head, targets, cap, self.head_layout)
            z = lm_head_logits(x, self.lm_head, self.head_layout)  # bf16 on CUDA: the loss soft-caps it in fp32
        return softcap_cross_entropy(z.view(-1, z.size(-1)), targets.reshape(-1), cap, use_triton=self.fused_loss)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        """Soft-capped logits (B, T, V), at least fp32, through the bf16 head whatever `fp8_head` says."""
        return softcap(self.head_output(idx), self.cfg.logit_softcap)

    def head_output(self, idx: torch.Tensor) -> torch.Tensor:
        """The LM head's output before the soft cap, (B, T, V)."""
        return lm_head_logits(self.final_hidden(idx), self.lm_head, self.head_layout)

    def final_hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The RMS-normed residual stream after the last layer, (B, T, D): the head's input."""
        cfg = self.cfg
        if idx.dim() != 2 or idx.size(1) > cfg.seq_len:
            raise ValueError(f"idx must be (B, T) with T <= seq_len {cfg.seq_len}, got {tuple(idx.shape)}")
        D, G, L = cfg.model_dim, cfg.gate_dim, cfg.num_layers
        resid_lambdas, smear_lambda, skip_lambda = self.scalars[:L], self.scalars[L], self.scalars[L + 1]
        attn_w = self.attn.view(cfg.num_attn_layers, 4, D, D).unbind(0)
        mlp_w = self.mlp.unbind(0)
        attn_gates = self.attn_gate_bank.unbind(0)
        ve_gates = self.ve_gate_bank.unbind(0)
        ve_tables = (self.ve0, self.ve1, self.ve2)

        stream = self.residual_dtype(idx)
        x = F.embedding(idx, self.embed).to(stream)
        # smear: each token takes a gated share of the previous token's embedding
        smear = smear_lambda * torch.sigmoid(F.linear(x[:, 1:, :G], self.smear_gate))
        x = torch.cat([x[:, :1], x[:, 1:] + smear * x[:, :-1]], dim=1)
        x = x0 = rms_norm(x)
        skip = None
        for i in range(L):
            if i == cfg.skip_to:
                x = x + skip_lambda * torch.sigmoid(F.linear(x[..., :G], self.skip_gate)) * skip
            x = resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            if i in self.attn_index:
                j = self.attn_index[i]
                ve = ve_gate = None
                if i in self.ve_index:
                    k = self.ve_index[i]
                    ve, ve_gate = F.embedding(idx, ve_tables[cfg.ve_tables[k]]).to(stream), ve_gates[k]
                x = x + self.attention(rms_norm(x), attn_w[j], attn_gates[j], ve, ve_gate)
            x = x + self.mlp_block(rms_norm(x), mlp_w[i])
            if i == cfg.skip_from:
                skip = x
        return rms_norm(x)

    def residual_dtype(self, idx: torch.Tensor) -> torch.dtype:
        """The residual stream's dtype: autocast's on idx's device when it is on (and bf16_residual), else
        the embedding's."""
        device = idx.device.type
        if self.bf16_residual and torch.is_autocast_enabled(device):
            return torch.get_autocast_dtype(device)
        return self.embed.dtype

    def attention(self, x, qkvo, out_gate, ve, ve_gate):
        """x: (B, T, D) normed; qkvo: (4, D, D) view of the bank; gates (H, 12); ve: (B, T, D) or None."""
        cfg = self.cfg
        B, T, D = x.shape
        H, hd, G = cfg.num_heads, cfg.head_dim, cfg.gate_dim
        q, k, v = F.linear(x, qkvo[:3].flatten(0, 1)).view(B, T, 3 * H, hd).chunk(3, dim=2)
        q, k = self.rotary(rms_norm(q)), self.rotary(rms_norm(k))
        if ve is not None:
            v = v + 2 * torch.sigmoid(F.linear(x[..., :G], ve_gate)).unsqueeze(-1) * ve.view(B, T, H, hd)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, scale=cfg.attn_scale).transpose(1, 2)
        y = y * torch.sigmoid(F.linear(x[..., :G], out_gate)).unsqueeze(-1)
        return F.linear(y.reshape(B, T, D), qkvo[3])

    @staticmethod
    def mlp_block(x: torch.Tensor, up_down: torch.Tensor) -> torch.Tensor:
        """up_down: (2, 4D, D) view of the bank; the down projection is stored (4D, D) like the up one."""
        return F.relu(F.linear(x, up_down[0])).square() @ up_down[1]
