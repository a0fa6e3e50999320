"""Single-process tests of the optimizer's pieces: the param table, Polar Express, neuron-wise
normalization, Adam against torch.optim.Adam, cautious weight decay, the tied embedding on one rank,
bad-input errors and config(). Multi-rank behaviour is in test_dist_optimizer.py."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from commscope.errors import UserError
from instrumented_model.adam import adam_direction_, cautious_step_
from instrumented_model.normuon import normalize_neurons_, polar_express, second_moment_shape, shape_lr_mul
from instrumented_model.optimizer import NorMuonAndAdam
from instrumented_model.param_table import PARAM_TABLE, SCATTER_ORDER, WORK_ORDER
from optim_fakes import backward_step, make_params


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: intra-op threads only contend with other test processes on a 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_param_table_matches_the_record():
    assert SCATTER_ORDER == ("attn", "mlp", "scalars", "ve0", "ve1", "ve2", "smear_gate", "skip_gate",
                             "attn_gate_bank", "ve_gate_bank", "x0_lambdas", "lm_head", "embed")
    assert WORK_ORDER == ("scalars", "smear_gate", "skip_gate", "attn_gate_bank", "ve_gate_bank",
                          "x0_lambdas", "ve0", "ve1", "ve2", "lm_head", "embed", "attn", "mlp")
    assert {lb for lb, s in PARAM_TABLE.items() if s.optim == "normuon"} == {"attn", "mlp"}
    assert {lb for lb, s in PARAM_TABLE.items() if s.comms == "sharded"} == {
        "attn", "mlp", "ve0", "ve1", "ve2", "lm_head", "embed"}
    betas = {lb: s.adam_betas for lb, s in PARAM_TABLE.items()}
    assert betas["scalars"] == betas["attn_gate_bank"] == (0.9, 0.99)
    assert betas["ve1"] == (0.75, 0.95) and betas["x0_lambdas"] == (0.65, 0.95)
    assert betas["lm_head"] == betas["embed"] == (0.5, 0.95) and betas["attn"] is None


def test_param_table_rows_have_the_keys_docs_run_format_md_lists():
    for label, spec in PARAM_TABLE.items():
        row = spec.row(label)
        assert list(row) == ["label", "optim", "comms", "adam_betas", "lr_mul", "wd_mul", "matrix"]
        assert row["optim"] in ("normuon", "adam") and row["comms"] in ("sharded", "replicated")
        assert (row["adam_betas"] is None) == (row["optim"] == "normuon") and row["matrix"] in ("last2", "square")


def test_bank_matrix_views():
    D = 8
    assert PARAM_TABLE["attn"].matrix_view((10, 4 * D, D)) == (40, D, D)
    assert PARAM_TABLE["mlp"].matrix_view((12, 2, 4 * D, D)) == (24, 4 * D, D)


@pytest.mark.parametrize("shape", [(64, 32), (32, 64), (48, 48), (3, 96, 24)])
def test_polar_express_is_near_orthogonal(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    y = polar_express(g)
    assert y.shape == g.shape and y.dtype == torch.float32
    sv = torch.linalg.svdvals(y)
    # 5 Polar Express steps leave singular values in a band around 1 (≈ 0.86–1.14), not exactly 1
    assert sv.min() > 0.8 and sv.max() < 1.2
    # and its singular vectors are g's: close to the exact polar factor U Vᵀ
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    exact = u @ vh
    cos = (y * exact).sum(dim=(-2, -1)) / (y.norm(dim=(-2, -1)) * exact.norm(dim=(-2, -1)))
    assert (cos > 0.99).all()
    # transposing the input transposes the output (tall inputs are handled as their transpose)
    torch.testing.assert_close(polar_express(g.mT), y.mT, atol=1e-5, rtol=1e-5)


def textbook_polar_express(g: torch.Tensor) -> torch.Tensor:
    """The iteration as written in the literature, in float64: X ← X/(‖X‖_F·margin + eps), then
    X ← aX + (bA + cA²)X with A = XXᵀ."""
    from instrumented_model.normuon import NORM_EPS, NORM_MARGIN, POLAR_EXPRESS_COEFFS

    x = g.double()
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * NORM_MARGIN + NORM_EPS)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        A = x @ x.mT
        x = a * x + (b * A + c * A @ A) @ x
    return x


@pytest.mark.parametrize("shape", [(3, 40, 24), (3, 24, 40), (2, 32, 32)])
def test_polar_express_is_the_textbook_iteration(shape):
    """The tall form (Gram matrix XᵀX, no transposes) and the fused normalization compute the textbook
    iteration: to fp32 rounding in fp32, to bf16 rounding in bf16 (~1–2% relative)."""
    g = 1e-3 * torch.randn(shape, generator=torch.Generator().manual_seed(4))  # a gradient's scale
    ref = textbook_polar_express(g)
    torch.testing.assert_close(polar_express(g).double(), ref, atol=2e-5, rtol=2e-5)
    bf16 = polar_express(g, dtype=torch.bfloat16).double()
    assert (bf16 - ref).norm() / ref.norm() < 0.03


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_polar_express_stays_bounded_on_low_rank_gradients(dtype):
    """Real gradients are nearly low-rank: most singular values sit at the rounding noise. The iteration
    must map them into [0, ~1.2] whatever the dtype. (Iterating on the Gram matrix alone, B ← P B P, would
    save 0.45 ms on the mlp bank, but bf16 rounding makes B's tiny eigenvalues negative, and the
    polynomial then blows them up, σ_max ≈ 7·10¹¹ here; the X-space iteration cannot go negative.)"""
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(3, 96, 4, generator=gen) @ torch.randn(3, 4, 24, generator=gen)
    g = g + 1e-4 * torch.randn(3, 96, 24, generator=gen)
    y = polar_express(g, dtype=dtype)
    assert torch.isfinite(y).all() and torch.linalg.svdvals(y).max() < 1.25


def test_polar_express_bf16_path_stays_in_band():
    g = torch.randn(64, 32, generator=torch.Generator().manual_seed(2))
    sv = torch.linalg.svdvals(polar_express(g, dtype=torch.bfloat16))
    assert sv.min() > 0.75 and sv.max() < 1.25


@pytest.mark.parametrize("rows,cols", [(12, 4), (4, 12)])
def test_neuron_normalization_equalizes_neurons_and_keeps_norm(rows, cols):
    g = torch.Generator().manual_seed(3)
    scale = torch.linspace(0.1, 3.0, rows).view(rows, 1) if rows >= cols else torch.linspace(0.1, 3.0, cols)
    v = (torch.randn(1, rows, cols, generator=g) * scale).float()
    buf = torch.zeros(second_moment_shape((1, rows, cols)))
    out = normalize_neurons_(v.clone(), buf, beta2=0.95)
    torch.testing.assert_close(out.norm(), v.norm())
    # first step: the EMA is (1-β2)·mean square, so every neuron ends up with the same norm
    neuron_norms = out[0].norm(dim=1) if rows >= cols else out[0].norm(dim=0)
    torch.testing.assert_close(neuron_norms, neuron_norms.mean().expand_as(neuron_norms), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(buf.squeeze(), 0.05 * (v[0].square().mean(dim=1 if rows >= cols else 0)))


def test_shape_lr_mul():
    assert shape_lr_mul(4 * 768, 768) == 2.0 and shape_lr_mul(768, 768) == 1.0 and shape_lr_mul(8, 32) == 1.0


def test_adam_direction_matches_torch_adam():
    g = torch.Generator().manual_seed(4)
    p_ref = nn.Parameter(torch.randn(5, 7, generator=g))
    p = p_ref.detach().clone()
    ref = torch.optim.Adam([p_ref], lr=0.01, betas=(0.75, 0.95), eps=1e-10)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t in range(1, 6):
        grad = torch.randn(5, 7, generator=g)
        p_ref.grad = grad.clone()
        ref.step()
        cautious_step_(p, adam_direction_(grad, m, v, t, (0.75, 0.95)), lr=0.01, wd=0.0)
    torch.testing.assert_close(p, p_ref.detach(), atol=1e-6, rtol=1e-5)


def test_cautious_weight_decay_only_where_signs_agree():
    p = torch.tensor([1.0, 1.0, -1.0, -1.0, 2.0])
    d = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.0])
    cautious_step_(p, d, lr=0.1, wd=0.5)
    # decay (lr·wd·p = 0.05·p) applies to elements 0 and 3 only (update·p > 0); zero update: no decay
    torch.testing.assert_close(p, torch.tensor([1 - 0.05 - 0.05, 1 + 0.05, -1 - 0.05, -1 + 0.05 + 0.05, 2.0]))


def test_cautious_step_keeps_dtype_and_writes_in_place():
    base = torch.ones(4, 4, dtype=torch.bfloat16)
    view = base[:2]
    cautious_step_(view, torch.full((2, 4), 0.5), lr=0.5, wd=0.0)
    assert base.dtype == torch.bfloat16 and (base[:2] == 0.75).all() and (base[2:] == 1).all()


def _train(layout="transposed", split_step=None, steps=3, **kw):
    params = make_params(layout)
    opt = NorMuonAndAdam(params, head_layout=layout, split_step=split_step, **kw)
    history = []
    for s in range(steps):
        backward_step(opt, params, s, 0, 1, layout)
        opt.step(s)
        opt.zero_grad()
        history.append({k: p.detach().clone() for k, p in params.items()})
    return params, opt, history


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_tied_embed_one_rank_then_untied(layout):
    tr = (lambda t: t.T) if layout == "transposed" else (lambda t: t)
    params, opt, hist = _train(layout, split_step=2, steps=4)
    assert torch.equal(hist[0]["embed"], tr(hist[0]["lm_head"]))
    assert torch.equal(hist[1]["embed"], tr(hist[1]["lm_head"]))
    assert not torch.allclose(hist[3]["embed"], tr(hist[3]["lm_head"]), atol=1e-4)
    assert not opt.tied and opt.slots["embed"].state["step"] == 4 - 0 and opt.slots["lm_head"].state["step"] == 4


def test_tied_fold_uses_both_gradients():
    """While tied, lm_head's update sees embed's gradient: a run whose embed gradient is dropped differs."""
    layout = "transposed"
    params = make_params(layout)
    opt = NorMuonAndAdam(params, head_layout=layout)
    backward_step(opt, params, 0, 0, 1, layout)
    head_grad, emb_grad = params["lm_head"].grad.clone(), params["embed"].grad.clone()
    opt.step(0)
    # Adam's first step is lr·sign-like: m̂/√v̂ = g/|g| elementwise, so the update sign is the folded grad's
    moved = make_params(layout)["lm_head"].detach() - params["lm_head"].detach()
    folded = head_grad + emb_grad.T
    mask = folded.abs() > 1e-3
    assert torch.equal(torch.sign(moved[mask]), torch.sign(folded[mask]))
    assert not torch.equal(torch.sign(folded[mask]), torch.sign(head_grad[mask]))


def test_split_step_zero_starts_untied():
    params, opt, hist = _train(split_step=0, steps=1)
    assert not opt.tied and opt.slots["embed"].state["step"] == 1
    assert not torch.allclose(hist[0]["embed"], hist[0]["lm_head"].T, atol=1e-4)


def test_lr_scale_zero_freezes_normuon_and_adam():
    params = make_params()
    before = {k: p.detach().clone() for k, p in params.items()}
    opt = NorMuonAndAdam(params)
    backward_step(opt, params, 0, 0, 1, "transposed")
    opt.step(0, lr_scale=0.0)
    for k, p in params.items():
        assert torch.equal(p.detach(), before[k]), k


def test_bad_input_raises_user_error():
    params = make_params()
    with pytest.raises(UserError, match="missing"):
        NorMuonAndAdam(params, scatter_order=SCATTER_ORDER[:-1])
    with pytest.raises(UserError, match="duplicated"):
        NorMuonAndAdam(params, work_order=WORK_ORDER[:-1] + ("attn",))
    with pytest.raises(UserError, match="split evenly"):
        NorMuonAndAdam(params, rank=0, world_size=3)
    with pytest.raises(UserError, match="not in the param table"):
        NorMuonAndAdam({**params, "bogus": nn.Parameter(torch.zeros(2))})
    with pytest.raises(UserError, match="cannot be tied"):
        NorMuonAndAdam(params, head_layout="standard")
    with pytest.raises(UserError, match="comm_schedule"):
        NorMuonAndAdam(params, comm_schedule="magic")
    with pytest.raises(UserError, match="hooks"):
        NorMuonAndAdam(params).install_hooks()


def test_reordered_schedule_gives_same_parameters():
    """Orders change timing only: a reversed scatter order and shuffled work order compute the same step."""
    _, _, a = _train(steps=2)
    _, _, b = _train(steps=2, scatter_order=tuple(reversed(SCATTER_ORDER)),
                     work_order=("mlp", "attn") + WORK_ORDER[:-2])
    for k in a[-1]:
        torch.testing.assert_close(b[-1][k], a[-1][k], atol=0, rtol=0)


def test_config_rows_and_orders():
    cfg = NorMuonAndAdam(make_params(), split_step=5, world_size=1).config()
    assert [r["label"] for r in cfg["param_table"]] == list(SCATTER_ORDER)
    row = {r["label"]: r for r in cfg["param_table"]}
    assert row["ve0"] == {"label": "ve0", "optim": "adam", "comms": "sharded", "adam_betas": [0.75, 0.95],
                          "lr_mul": 1.0, "wd_mul": 1.0, "matrix": "last2"}
    assert cfg["work_order"] == list(WORK_ORDER) and cfg["split_step"] == 5
    assert cfg["shards"]["attn"]["view"] == [8, 16, 16]
    assert math.isclose(cfg["adam_eps"], 1e-10)
