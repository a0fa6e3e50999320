"""The reference GPT: labelled parameters and shapes, deterministic init, banks equal to an unbanked
per-layer model, both LM-head layouts equal (and the standard one's gradient layout mismatch), no copies of
the banks in the forward."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from commscope.errors import UserError
from instrumented_model import GPT, LABELS, PRESETS, make_config
from instrumented_model.config import padded_mlp_layers

SCATTER_ORDER = ["attn", "mlp", "scalars", "ve0", "ve1", "ve2", "smear_gate", "skip_gate", "attn_gate_bank",
                 "ve_gate_bank", "x0_lambdas", "lm_head", "embed"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls gain nothing from threads, and OpenMP threads spinning on a shared 2-core box made
    these tests 20× slower; restore the setting for the rest of the suite."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batch(cfg, B=2, T=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    return idx, targets


@torch.no_grad()
def randomize(model: GPT, seed: int = 3) -> None:
    """Move every parameter away from its init (zero output projections, zero gates) so no gradient is
    trivially zero; includes the mlp padding layers, whose gradient must still be exactly zero."""
    g = torch.Generator().manual_seed(seed)
    D = model.cfg.model_dim
    for label, p in model.labelled_params().items():
        scale = {"scalars": 0.1, "x0_lambdas": 0.3, "ve0": 0.5, "ve1": 0.5, "ve2": 0.5}.get(label, 0.5)
        if label in ("attn", "mlp", "lm_head", "embed"):
            scale = 1.0 / math.sqrt(D)
        p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    model.scalars.add_(1.0)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


# --------------------------------------------------------------------------- labels, shapes, config

def expected_shapes(cfg, layout):
    D, V, H, L = cfg.model_dim, cfg.vocab_size, cfg.num_heads, cfg.num_layers
    La = cfg.num_attn_layers
    return {
        "attn": (La, 4 * D, D), "mlp": (cfg.mlp_layers_padded, 2, 4 * D, D), "scalars": (L + 2,),
        "ve0": (V, D), "ve1": (V, D), "ve2": (V, D), "smear_gate": (1, 12), "skip_gate": (1, 12),
        "attn_gate_bank": (La, H, 12), "ve_gate_bank": (len(cfg.ve_layers), H, 12), "x0_lambdas": (L,),
        "lm_head": (D, V) if layout == "transposed" else (V, D), "embed": (V, D),
    }


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_speedrun_shapes_on_meta(layout):
    cfg = make_config("speedrun", 8)
    with torch.device("meta"):
        model = GPT(cfg, layout)
    params = model.labelled_params()
    assert list(params) == SCATTER_ORDER == list(LABELS)
    shapes = {k: tuple(p.shape) for k, p in params.items()}
    assert shapes == expected_shapes(cfg, layout)
    # the record's literal numbers
    assert shapes["attn"] == (10, 3072, 768) and shapes["mlp"] == (12, 2, 3072, 768)
    assert shapes["attn_gate_bank"] == (10, 6, 12) and shapes["ve_gate_bank"] == (5, 6, 12)
    assert shapes["x0_lambdas"] == (11,) and shapes["embed"] == (50304, 768)
    assert shapes["lm_head"] == ((768, 50304) if layout == "transposed" else (50304, 768))
    # the optimizer's matrix views split evenly over 8 ranks: 5 and 3 matrices each
    assert params["attn"].view(-1, 768, 768).shape[0] == 40
    assert params["mlp"].view(-1, 3072, 768).shape[0] == 24
    assert len(cfg.attn_layers) == 10 and 6 not in cfg.attn_layers
    # every parameter is a real leaf of the module, counted once
    assert {id(p) for p in model.parameters()} == {id(p) for p in params.values()}


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_tiny_shapes_and_divisibility(layout):
    cfg = make_config("tiny", 8)
    torch.manual_seed(0)
    params = GPT(cfg, layout).labelled_params()
    assert list(params) == SCATTER_ORDER
    assert {k: tuple(p.shape) for k, p in params.items()} == expected_shapes(cfg, layout)
    D = cfg.model_dim
    for n in (4 * cfg.num_attn_layers, 2 * cfg.mlp_layers_padded, cfg.vocab_size, D):
        assert n % 8 == 0
    assert all(p.dtype == torch.float32 for p in params.values())


def test_mlp_padding_independent_of_world_size():
    for name, base in PRESETS.items():
        pads = {ws: make_config(name, ws).mlp_layers_padded for ws in (1, 2, 4, 8)}
        assert len(set(pads.values())) == 1, pads
        L_pad = pads[1]
        assert L_pad >= base.num_layers and (2 * L_pad) % 8 == 0 and (2 * (L_pad - 1)) % 8 != 0
    assert make_config("speedrun", 8).mlp_layers_padded == 12
    assert padded_mlp_layers(11, 3) == 12 and padded_mlp_layers(11, 16) == 16 and padded_mlp_layers(8, 1) == 8


@pytest.mark.parametrize("ws", [3, 5, 16])
def test_uneven_world_size_is_a_user_error(ws):
    with pytest.raises(UserError, match="cannot be sharded"):
        make_config("speedrun", ws)


def test_bad_preset_is_a_user_error():
    with pytest.raises(UserError, match="unknown preset"):
        make_config("huge", 8)
    with pytest.raises(UserError):
        make_config("tiny", 0)
    with pytest.raises(ValueError):
        GPT(make_config("tiny", 1), head_layout="sideways")
    model = GPT(make_config("tiny", 1))
    too_long = torch.zeros(1, model.cfg.seq_len + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="seq_len"):
        model(too_long, too_long)


# --------------------------------------------------------------------------- initialisation

@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_same_seed_same_params_and_tied_head(layout):
    def build(seed, ws):
        torch.manual_seed(seed)
        return GPT(make_config("tiny", ws), layout).labelled_params()

    a, b, c = build(7, 1), build(7, 8), build(8, 1)
    for label in SCATTER_ORDER:
        assert torch.equal(a[label], b[label]), label
    assert not torch.equal(a["embed"], c["embed"]) and not torch.equal(a["attn"], c["attn"])
    head = a["lm_head"].T if layout == "transposed" else a["lm_head"]
    assert torch.equal(head, a["embed"])
    L = make_config("tiny", 1).num_layers
    assert torch.count_nonzero(a["mlp"][L:]) == 0  # padding starts (and stays) zero


# --------------------------------------------------------------------------- banks vs per-layer model

def ref_rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps)


def ref_rotary(x, base):
    T, hd = x.shape[1], x.shape[-1]
    half = hd // 2
    freqs = base ** (-torch.arange(half, dtype=torch.float64) / half)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None, :]
    # the model stores its tables in fp32 (rounded once from float64)
    cos, sin = (f(ang).float().to(x.dtype)[None, :, None, :] for f in (torch.cos, torch.sin))
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


def ref_causal_attention(q, k, v, scale):
    T = q.shape[1]
    att = torch.einsum("bthd,bshd->bhts", q, k) * scale
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    return torch.einsum("bhts,bshd->bthd", att, v)


def unbanked_weights(model: GPT) -> dict:
    """Separate leaf tensors per layer and matrix, copied from the banks."""
    cfg, D = model.cfg, model.cfg.model_dim
    W = {}
    for j in range(cfg.num_attn_layers):
        for n, name in enumerate("qkvo"):
            W[f"{name}{j}"] = model.attn[j, n * D:(n + 1) * D].detach().clone()
        W[f"attn_gate{j}"] = model.attn_gate_bank[j].detach().clone()
    for i in range(cfg.num_layers):
        W[f"up{i}"] = model.mlp[i, 0].detach().clone()
        W[f"down{i}"] = model.mlp[i, 1].detach().clone()
        W[f"resid{i}"] = model.scalars[i].detach().clone()
        W[f"x0{i}"] = model.x0_lambdas[i].detach().clone()
    for k in range(len(cfg.ve_layers)):
        W[f"ve_gate{k}"] = model.ve_gate_bank[k].detach().clone()
    for name in ("ve0", "ve1", "ve2", "smear_gate", "skip_gate", "embed", "lm_head"):
        W[name] = getattr(model, name).detach().clone()
    W["smear_lambda"] = model.scalars[cfg.num_layers].detach().clone()
    W["skip_lambda"] = model.scalars[cfg.num_layers + 1].detach().clone()
    for t in W.values():
        t.requires_grad_(True)
    return W


def unbanked_loss(cfg, W, idx, targets, layout):
    B, T = idx.shape
    H, hd, D = cfg.num_heads, cfg.head_dim, cfg.model_dim
    x = W["embed"][idx]
    smear = W["smear_lambda"] * torch.sigmoid(x[:, 1:, :12] @ W["smear_gate"].T)
    x = torch.cat([x[:, :1], x[:, 1:] + smear * x[:, :-1]], dim=1)
    x = x0 = ref_rms(x)
    skip = None
    attn_layers = list(cfg.attn_layers)
    for i in range(cfg.num_layers):
        if i == cfg.skip_to:
            x = x + W["skip_lambda"] * torch.sigmoid(x[..., :12] @ W["skip_gate"].T) * skip
        x = W[f"resid{i}"] * x + W[f"x0{i}"] * x0
        if i in attn_layers:
            j = attn_layers.index(i)
            h = ref_rms(x)
            q = (h @ W[f"q{j}"].T).view(B, T, H, hd)
            k = (h @ W[f"k{j}"].T).view(B, T, H, hd)
            v = (h @ W[f"v{j}"].T).view(B, T, H, hd)
            q, k = ref_rotary(ref_rms(q), cfg.rope_base), ref_rotary(ref_rms(k), cfg.rope_base)
            if i in cfg.ve_layers:
                n = cfg.ve_layers.index(i)
                ve = W[f"ve{cfg.ve_tables[n]}"][idx].view(B, T, H, hd)
                v = v + 2 * torch.sigmoid(h[..., :12] @ W[f"ve_gate{n}"].T)[..., None] * ve
            y = ref_causal_attention(q, k, v, cfg.attn_scale)
            y = y * torch.sigmoid(h[..., :12] @ W[f"attn_gate{j}"].T)[..., None]
            x = x + y.reshape(B, T, D) @ W[f"o{j}"].T
        h = ref_rms(x)
        x = x + torch.relu(h @ W[f"up{i}"].T).pow(2) @ W[f"down{i}"]
        if i == cfg.skip_from:
            skip = x
    head = W["lm_head"] if layout == "transposed" else W["lm_head"].T
    logits = ref_rms(x) @ head
    logits = cfg.logit_softcap * torch.tanh(logits / cfg.logit_softcap)
    return F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_banked_model_equals_unbanked_per_layer_model(layout):
    cfg = make_config("tiny", 8)
    torch.manual_seed(0)
    model = GPT(cfg, layout).double()
    randomize(model)
    idx, targets = batch(cfg)
    W = unbanked_weights(model)

    loss = model(idx, targets)
    loss.backward()
    ref = unbanked_loss(cfg, W, idx, targets, layout)
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-10 and loss.item() > 1.0

    D, L = cfg.model_dim, cfg.num_layers
    g = {k: t.grad for k, t in W.items()}
    expected = {
        "attn": torch.stack([torch.cat([g[f"{n}{j}"] for n in "qkvo"]) for j in range(cfg.num_attn_layers)]),
        "mlp": torch.cat([torch.stack([torch.stack([g[f"up{i}"], g[f"down{i}"]]) for i in range(L)]),
                          torch.zeros(cfg.mlp_layers_padded - L, 2, 4 * D, D, dtype=torch.float64)]),
        "scalars": torch.stack([g[f"resid{i}"] for i in range(L)] + [g["smear_lambda"], g["skip_lambda"]]),
        "attn_gate_bank": torch.stack([g[f"attn_gate{j}"] for j in range(cfg.num_attn_layers)]),
        "ve_gate_bank": torch.stack([g[f"ve_gate{k}"] for k in range(len(cfg.ve_layers))]),
        "x0_lambdas": torch.stack([g[f"x0{i}"] for i in range(L)]),
        **{k: g[k] for k in ("ve0", "ve1", "ve2", "smear_gate", "skip_gate", "lm_head", "embed")},
    }
    for label, p in model.labelled_params().items():
        assert p.grad.shape == p.shape
        assert p.grad.norm() > 0, label
        assert rel_err(p.grad, expected[label]) < 1e-9, label
    assert torch.count_nonzero(model.mlp.grad[L:]) == 0  # padding: real tensor, exactly zero gradient


# --------------------------------------------------------------------------- the two head layouts

def twin_models(cfg):
    torch.manual_seed(0)
    t = GPT(cfg, "transposed")
    randomize(t)
    s = GPT(cfg, "standard")
    with torch.no_grad():
        for label, p in s.labelled_params().items():
            src = t.labelled_params()[label]
            p.copy_(src.T if label == "lm_head" else src)
    return t, s


def test_transposed_and_standard_heads_agree():
    cfg = make_config("tiny", 8)
    t, s = twin_models(cfg)
    idx, targets = batch(cfg)
    for _ in range(2):  # two micro-steps: the second goes through AccumulateGrad's add path
        lt, ls = t(idx, targets), s(idx, targets)
        lt.backward()
        ls.backward()
        assert abs(lt.item() - ls.item()) < 1e-5
    for label, pt in t.labelled_params().items():
        gs = s.labelled_params()[label].grad
        expected = gs.T if label == "lm_head" else gs
        assert rel_err(pt.grad, expected) < 1e-5, label


def test_standard_head_gradient_arrives_transposed():
    cfg = make_config("tiny", 8)
    D, V = cfg.model_dim, cfg.vocab_size
    idx, targets = batch(cfg)
    arrived = {}
    for model in twin_models(cfg):
        model.lm_head.register_hook(lambda g, layout=model.head_layout: arrived.setdefault(layout, g))
        model(idx, targets).backward()
    # transposed: (D, V) weight, (D, V) contiguous gradient: same layout, AccumulateGrad can steal it
    assert arrived["transposed"].shape == (D, V) and arrived["transposed"].stride() == (V, 1)
    # standard: (V, D) weight, but the gradient is the transpose view of a (D, V) tensor
    assert arrived["standard"].shape == (V, D) and arrived["standard"].stride() == (1, V)
    assert not arrived["standard"].is_contiguous() and arrived["standard"].T.is_contiguous()
    assert torch.equal(arrived["standard"], arrived["transposed"].T)


# --------------------------------------------------------------------------- no copies of parameters

class CopyWatch(TorchDispatchMode):
    """Records copy-like ops whose input shares storage with a watched parameter."""

    COPY_OPS = {"clone", "_to_copy", "copy_", "cat", "stack", "contiguous", "index_select", "repeat"}

    def __init__(self, params):
        super().__init__()
        self.ptrs = {p.untyped_storage().data_ptr(): label for label, p in params.items()}
        self.hits = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.COPY_OPS:
            for a in torch.utils._pytree.tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in self.ptrs:
                    self.hits.append((name, self.ptrs[a.untyped_storage().data_ptr()]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_forward_does_not_copy_parameters(layout):
    cfg = make_config("tiny", 8)
    torch.manual_seed(0)
    model = GPT(cfg, layout)
    idx, targets = batch(cfg)
    with CopyWatch(model.labelled_params()) as watch:
        loss = model(idx, targets)
    assert loss.item() > 0
    assert watch.hits == []
    # the watch does see copies of parameters (so the assertion above can fail)
    with CopyWatch(model.labelled_params()) as watch:
        model.mlp.unbind(0)[0].clone()
    assert watch.hits == [("clone", "mlp")]


def test_tiny_model_learns():
    cfg = make_config("tiny", 8)
    torch.manual_seed(0)
    model = GPT(cfg)
    idx, _ = batch(cfg, B=2, T=32)
    targets = (idx + 1) % cfg.vocab_size  # learnable: next token id = current + 1
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = model(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > math.log(cfg.vocab_size) - 1 and losses[-1] < losses[0] - 1.0, losses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_autocast_heads_agree_and_keep_the_layout_mismatch():
    cfg = make_config("tiny", 8)
    t, s = (m.cuda() for m in twin_models(cfg))
    idx, targets = (x.cuda() for x in batch(cfg))
    arrived = {}
    for model in (t, s):
        model.lm_head.register_hook(lambda g, layout=model.head_layout: arrived.setdefault(layout, g))
    lt, ls = t(idx, targets), s(idx, targets)
    assert lt.dtype == torch.float32 and abs(lt.item() - ls.item()) < 1e-3 * lt.item()
    lt.backward()
    ls.backward()
    # the bf16 gradient is cast back to the fp32 weight's dtype with its strides kept
    V = cfg.vocab_size
    assert arrived["standard"].dtype == torch.float32 and arrived["standard"].stride() == (1, V)
    assert arrived["transposed"].is_contiguous()
    assert rel_err(t.lm_head.grad, s.lm_head.grad.T) < 2e-2
    assert rel_err(t.attn.grad, s.attn.grad) < 2e-2


def test_residual_stream_takes_the_autocast_dtype():
    """Under autocast (CPU bf16 autocast here; the trainer's is CUDA's) the residual stream is bf16 from the
    embedding on, so the head's input is bf16; bf16_residual=False keeps it fp32. Either way the head's
    inputs agree to bf16 precision and the parameters' gradients stay fp32. (Only the trunk here: the
    heads' autograd functions cast for CUDA's autocast, not the CPU's.)"""
    cfg = make_config("tiny", 8)
    torch.manual_seed(0)
    bf16, fp32 = GPT(cfg), GPT(cfg, bf16_residual=False)
    fp32.load_state_dict(bf16.state_dict())
    idx, targets = batch(cfg)
    assert bf16.final_hidden(idx).dtype == torch.float32  # no autocast: the embedding's dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert bf16.final_hidden(idx).dtype == torch.bfloat16
        assert fp32.final_hidden(idx).dtype == torch.float32
        hidden = [m.final_hidden(idx).float() for m in (bf16, fp32)]
    assert rel_err(hidden[0], hidden[1]) < 2e-2
    (hidden[0] * torch.randn(hidden[0].shape, generator=torch.Generator().manual_seed(3))).sum().backward()
    assert bf16.embed.grad.dtype == torch.float32 and bf16.ve0.grad.dtype == torch.float32
    assert torch.count_nonzero(bf16.embed.grad) > 0
