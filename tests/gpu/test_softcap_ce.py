"""The fused soft-capped cross-entropy (instrumented_model.softcap_ce) against the plain torch ops.

The Triton kernels run on the GPU when there is one, else in Triton's CPU interpreter (conftest's
triton_device). The reference is F.cross_entropy over cap·tanh(z / cap) in fp32, as the unfused trainer
computes it.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import instrumented_model.softcap_ce as sc
from instrumented_model.config import make_config
from instrumented_model.model import GPT
from instrumented_model.softcap_ce import IGNORE_INDEX, ROW_DEFAULT, softcap, softcap_cross_entropy
from instrumented_model.triton_jit import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="triton not installed")
CAP = 15.0


def case(n, v, dtype, device, seed=0, spread=20.0):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, v, generator=g) * spread).to(dtype).to(device)
    targets = torch.randint(0, v, (n,), generator=g).to(device)
    return z, targets


def loss_and_grad(z, targets, upstream, **kw):
    z = z.detach().requires_grad_()
    loss = softcap_cross_entropy(z, targets, CAP, **kw)
    (grad,) = torch.autograd.grad(loss * upstream, z)
    return loss.detach(), grad


@pytest.mark.parametrize("v", [1000, ROW_DEFAULT[0], 2 * ROW_DEFAULT[0] + 77])  # one partial block, one exact, three blocks
def test_fused_matches_torch_in_fp32(triton_device, v):
    z, targets = case(9, v, torch.float32, triton_device)
    targets[4] = IGNORE_INDEX  # ignored: no loss, no gradient, and the mean is over the other 8 rows
    ref_loss, ref_grad = loss_and_grad(z, targets, 0.37, use_triton=False)
    loss, grad = loss_and_grad(z, targets, 0.37, use_triton=True)
    assert grad.dtype == torch.float32 and grad.is_contiguous()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-8)
    assert torch.count_nonzero(grad[4]) == 0
    # the mean is over valid rows: the loss is the mean of the 8 row losses, not a 9th of their sum
    rows = F.cross_entropy(softcap(z, CAP), targets, reduction="none", ignore_index=IGNORE_INDEX)
    assert math.isclose(loss.item(), rows.sum().item() / 8, rel_tol=1e-6)


@pytest.fixture
def exact_tanh(monkeypatch):
    """The kernels' exact soft cap on a GPU too (the hardware tanh is tested on its own, below)."""
    monkeypatch.setattr(sc, "fast_tanh", lambda z: False)


def test_fused_bf16_head_output_gives_fp32_loss_and_bf16_grad(triton_device, exact_tanh):
    z, targets = case(6, 3000, torch.bfloat16, triton_device, seed=1)
    ref_loss, ref_grad = loss_and_grad(z, targets, 1.0, use_triton=False)
    loss, grad = loss_and_grad(z, targets, 1.0, use_triton=True)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    # the kernel computes in fp32 and rounds dz once (the interpreter truncates): within one bf16 ulp
    assert torch.allclose(grad.float(), ref_grad.float(), rtol=2 ** -7, atol=1e-9)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")  # the interpreter's numpy
def test_saturated_logits_stay_finite_and_exact(triton_device):
    """|z| ≫ cap: tanh saturates to ±1, the loss is finite and the gradient through the cap is 0."""
    z, targets = case(4, 700, torch.float32, triton_device, seed=2, spread=1e4)
    ref_loss, ref_grad = loss_and_grad(z, targets, 1.0, use_triton=False)
    loss, grad = loss_and_grad(z, targets, 1.0, use_triton=True)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-8)


def test_all_rows_ignored_is_nan_like_torch(triton_device):
    z, targets = case(3, 50, torch.float32, triton_device)
    targets.fill_(IGNORE_INDEX)
    assert torch.isnan(softcap_cross_entropy(z, targets, CAP, use_triton=True))
    assert torch.isnan(softcap_cross_entropy(z, targets, CAP, use_triton=False))


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match=r"need z \(N, V\)"):
        softcap_cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, dtype=torch.long), CAP)


def test_custom_ops_pass_opcheck(triton_device):
    """Schema, fake (meta) kernels and the autograd registration agree with the real kernels, which is
    what torch.compile relies on to keep the op as one opaque call."""
    z, targets = case(5, 300, torch.float32, triton_device, seed=3)
    torch.library.opcheck(torch.ops.commscope.softcap_ce.default, (z.requires_grad_(), targets, CAP))


def test_tiny_model_loss_and_gradients_match_with_the_fused_loss(triton_device):
    cfg = make_config("tiny", 1)
    torch.manual_seed(0)
    unfused = GPT(cfg, fused_loss=False).to(triton_device)
    fused = GPT(cfg, fused_loss=True).to(triton_device)
    fused.load_state_dict(unfused.state_dict())
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    targets = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    losses = []
    for model in (unfused, fused):
        loss = model(idx, targets)
        loss.backward()
        losses.append(loss.item())
    # On CPU everything is fp32; on CUDA the head output and dz are bf16, where one rounding of dz may
    # differ by an ulp (the kernel's tanh is not torch's), and the trunk's bf16 matmuls carry it on.
    rtol, atol = (1e-4, 1e-7) if triton_device == "cpu" else (3e-2, 1e-5)
    assert math.isclose(losses[0], losses[1], rel_tol=1e-6 if triton_device == "cpu" else 1e-3)
    for name, p in unfused.named_parameters():
        q = dict(fused.named_parameters())[name]
        torch.testing.assert_close(q.grad, p.grad, rtol=rtol, atol=atol, msg=name)


def test_e5m2_backward_writes_both_layouts_of_the_same_gradient(triton_device, exact_tanh):
    """The FP8 head's loss gradient: e5m2 in (N, V) and (V, N), equal to dz within e5m2 rounding (2
    mantissa bits: ≤ 2^-3 relative; below the smallest subnormal, 2^-16 of the scale, absolute), on a
    ragged shape (neither side a multiple of a tile)."""
    z, targets = case(70, 300, torch.bfloat16, triton_device, seed=4)
    targets[7] = IGNORE_INDEX
    loss, lse = torch.ops.commscope.softcap_ce(z, targets, CAP)
    grad_loss = torch.tensor(0.5, device=triton_device)
    dz = torch.ops.commscope.softcap_ce_backward(z.float(), targets, lse, grad_loss, CAP)
    dz8, dz8t, scale = torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse, grad_loss, CAP)
    assert dz8.dtype == dz8t.dtype == torch.float8_e5m2 and dz8t.shape == (300, 70)
    assert torch.equal(dz8.view(torch.uint8), dz8t.T.view(torch.uint8))
    approx = dz8.float() * scale
    assert torch.all((approx - dz).abs() <= 2 ** -3 * dz.abs() + 2 ** -16 * scale)
    assert torch.count_nonzero(dz8[7].float()) == 0
    # the e5m2 rounding of q·gain (round to nearest even), as torch rounds it: the same kernel's fp32 q·gain,
    # rounded by torch, gives the same bytes (the hand rounding through fp16 may differ on double-rounding ties)
    q_gain = torch.empty(z.shape, dtype=torch.float32, device=triton_device)
    sc._launch("softcap_ce_bwd", lambda meta: (70,), z, targets, lse, torch.full((1,), sc.FP8_GAIN, device=triton_device),
               q_gain, 300, z.stride(0), 300, CAP, 2.0 / CAP, IGNORE_INDEX, E5M2=False, FAST_TANH=False, HW_CVT=False)
    differ = (q_gain.to(torch.float8_e5m2).view(torch.uint8) != dz8.view(torch.uint8)).float().mean().item()
    assert differ == 0 if sc.hw_e5m2_rounding() else differ < 0.01


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the hardware tanh is GPU-only (inline PTX)")
def test_hardware_tanh_stays_within_its_error_bound():
    """FAST_TANH (a bf16 z on a GPU) against the exact kernels on the same z, within the bound of
    tanh.approx.f32 (relative error ≤ 2^-10.99): each soft-capped logit moves by at most ε = cap·2^-10.99,
    so the loss by at most 2ε, and each gradient entry by at most (e^(2ε) − 1)·softmax + 2·2^-10.99 ≤ 0.02
    of the largest; the e5m2 gradient then differs by at most one e5m2 step (2^-2 relative) more."""
    z, targets = case(64, 50304, torch.bfloat16, "cuda", seed=7, spread=6.0)
    grad_loss = torch.tensor(1.0, device="cuda")
    assert sc.fast_tanh(z) and not sc.fast_tanh(z.float())
    fast = sc.softcap_cross_entropy(z, targets, CAP)
    _, lse_fast = torch.ops.commscope.softcap_ce(z, targets, CAP)
    dz_fast = torch.ops.commscope.softcap_ce_backward(z, targets, lse_fast, grad_loss, CAP).float()
    dz8, _, scale = torch.ops.commscope.softcap_ce_backward_e5m2(z, targets, lse_fast, grad_loss, CAP)
    exact = sc.softcap_cross_entropy(z.float(), targets, CAP)  # fp32 z: the exact kernels
    _, lse = torch.ops.commscope.softcap_ce(z.float(), targets, CAP)
    dz = torch.ops.commscope.softcap_ce_backward(z.float(), targets, lse, grad_loss, CAP)
    eps = CAP * 2 ** -10.99
    assert abs(fast.item() - exact.item()) <= 2 * eps
    assert torch.all((dz_fast - dz).abs() <= 0.02 * dz.abs().max() + 2 ** -7 * dz.abs())
    assert torch.all((dz8.float() * scale - dz).abs() <= 0.02 * dz.abs().max() + 2 ** -2 * dz.abs())
