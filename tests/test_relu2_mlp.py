"""The fused relu² MLP (instrumented_model.relu2_mlp) against the plain torch expression of the model's
MLP block, relu(x @ upᵀ)² @ down, and its gradients.

The kernel runs on the GPU when there is one, else in Triton's CPU interpreter (conftest's triton_device).
Shapes are ragged on purpose: no side a multiple of the interpreter's 32-wide tiles, K included.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from instrumented_model.relu2_mlp import relu2_mlp
from instrumented_model.triton_jit import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="triton not installed")


def case(n, d, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    up, down = torch.randn(4 * d, d, generator=g) / d ** 0.5, torch.randn(4 * d, d, generator=g) / (4 * d) ** 0.5
    dy = torch.randn(n, d, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (x, up, down, dy)]


def reference(x, up, down):
    return F.relu(x @ up.T).square() @ down


def grads(fn, x, up, down, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, up, down)]
    y = fn(*leaves)
    return (y.detach(), *torch.autograd.grad(y, leaves, dy))


def test_forward_and_gradients_match_torch_in_fp32(triton_device):
    x, up, down, dy = case(70, 40, triton_device)
    ref = grads(reference, *(t.double() for t in (x, up, down)), dy.double())
    got = grads(relu2_mlp, x, up, down, dy)
    for name, r, g in zip(("y", "dx", "d_up", "d_down"), ref, got):
        assert g.dtype == torch.float32 and g.shape == r.shape, name
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-4, msg=name)


def test_negative_pre_activations_give_zero_gradient_through_the_relu(triton_device):
    """An input row whose every pre-activation is negative: y is 0 there and so is its dx."""
    x, up, down, dy = case(33, 24, triton_device, seed=1)
    up = up.abs()
    x[5] = -x[5].abs() - 0.1  # x[5] @ upᵀ < 0 everywhere
    y, dx, _d_up, _d_down = grads(relu2_mlp, x, up, down, dy)
    assert torch.count_nonzero(y[5]) == 0 and torch.count_nonzero(dx[5]) == 0
    assert torch.count_nonzero(dx[4]) > 0


def test_bf16_stays_bf16_and_close(triton_device):
    x, up, down, dy = case(64, 32, triton_device, dtype=torch.bfloat16, seed=2)
    ref = grads(reference, *(t.double() for t in (x, up, down)), dy.double())
    got = grads(relu2_mlp, x, up, down, dy)
    for name, r, g in zip(("y", "dx", "d_up", "d_down"), ref, got):
        assert g.dtype == torch.bfloat16, name
        rel = ((g.double() - r).norm() / r.norm()).item()
        assert rel < 2e-2, (name, rel)


def test_custom_ops_pass_opcheck(triton_device):
    x, up, down, dy = case(20, 16, triton_device, seed=3)
    torch.library.opcheck(torch.ops.commscope.relu2_mlp.default,
                          (x.requires_grad_(), up.requires_grad_(), down.requires_grad_()))
    post = torch.ops.commscope.relu2_mlp(x.detach(), up.detach(), down.detach())[1]
    torch.library.opcheck(torch.ops.commscope.relu2_mlp_grad_pre.default, (dy, down.detach(), post))


def test_bad_inputs_are_rejected(triton_device):
    x, up, down, _dy = case(8, 16, triton_device)
    with pytest.raises(ValueError, match="need x"):
        relu2_mlp(x, up[:, :8], down)
    with pytest.raises(ValueError, match="share a dtype"):
        relu2_mlp(x, up.double(), down)


def test_tiny_model_with_the_fused_mlp_matches_the_plain_model(triton_device):
    """GPT(fused_mlp=True) on the tiny preset: the same loss and parameter gradients (the mlp bank's
    included, its padding layers exactly zero) as the plain MLP, in fp32 (no autocast off CUDA)."""
    from instrumented_model.config import make_config
    from instrumented_model.model import GPT

    cfg = make_config("tiny", 1)
    torch.manual_seed(0)
    ref = GPT(cfg, fused_loss=False).to(triton_device)
    fused = GPT(cfg, fused_loss=False, fused_mlp=True).to(triton_device)
    fused.load_state_dict(ref.state_dict())
    with torch.no_grad():  # the down projections start at zero: give them values so their path is tested
        for m in (ref, fused):
            m.mlp[:cfg.num_layers, 1].copy_(torch.randn(cfg.num_layers, cfg.mlp_dim, cfg.model_dim,
                                                         generator=torch.Generator().manual_seed(2)) * 0.05)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    targets = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    losses = [m(idx, targets) for m in (ref, fused)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-6, msg=name)
    assert torch.count_nonzero(fused.mlp.grad[cfg.num_layers:]) == 0
    assert torch.count_nonzero(fused.mlp.grad[:cfg.num_layers, 1]) > 0


def test_trainer_refuses_fused_mlp_on_cpu_with_exit_2(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "instrumented_model.train", "--out", str(tmp_path), "--device", "cpu",
                           "--fused-mlp", "--steps", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--fused-mlp needs --device cuda" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("tma", [False, True])
def test_both_matmul_kernels_apply_their_epilogues(triton_device, tma):
    """The pointer kernel and the tensor-descriptor (TMA) kernel, each epilogue, against fp64 torch: fp32 in
    the interpreter, bf16 on a GPU (the TMA kernel takes 16-bit inputs there)."""
    from instrumented_model.relu2_mlp import _matmul

    dtype = torch.bfloat16 if triton_device == "cuda" else torch.float32
    x, up, down, dy = case(70, 40, triton_device, dtype=dtype, seed=4)
    post = _matmul(x, up, None, tma=tma)
    ref_post = F.relu(x.double() @ up.double().T).square()
    d_pre = _matmul(dy, down, post, tma=tma)
    ref_d_pre = (dy.double() @ down.double().T) * 2 * post.double().sqrt()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for got, want in ((post, ref_post), (d_pre, ref_d_pre)):
        assert got.dtype == dtype and got.shape == want.shape
        assert ((got.double() - want).norm() / want.norm()).item() < tol
