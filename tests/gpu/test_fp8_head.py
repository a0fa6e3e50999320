"""The FP8 head (instrumented_model.fp8_head) against the same head and loss in fp32.

FP8 changes the numbers, so the checks are bounds: the loss within e4m3 rounding of the fp32 one, dW
(an e4m3 × e5m2 matmul) within 6 %, dx (an e5m2 × e4m3 matmul) within 10 % in norm;
and dW keeps each layout's strides, as the bf16 heads do. On CPU the loss kernels run in Triton's
interpreter and torch._scaled_mm has a CPU implementation.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from instrumented_model.config import make_config
from instrumented_model.fp8_head import fp8_head_loss
from instrumented_model.heads import head_weight_from_embed
from instrumented_model.model import GPT
from instrumented_model.softcap_ce import softcap
from instrumented_model.triton_jit import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="triton not installed")
CAP = 15.0


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_fp8_head_loss_and_gradients_are_close_to_fp32(triton_device, layout):
    g = torch.Generator().manual_seed(0)
    n, d, v = 256, 64, 1024
    x = F.rms_norm(torch.randn(n, d, generator=g), (d,)).to(triton_device)
    embed = (torch.randn(v, d, generator=g) * 0.3).to(triton_device)
    w = head_weight_from_embed(layout, embed)
    targets = torch.randint(0, v, (n,), generator=g).to(triton_device)

    ref_x, ref_w = x.clone().requires_grad_(), w.clone().requires_grad_()
    w_dv = ref_w if layout == "transposed" else ref_w.T
    ref = F.cross_entropy(softcap(ref_x @ w_dv, CAP), targets)
    ref.backward()

    x8, w8 = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fp8_head_loss(x8, w8, targets, CAP, layout)
    dx, dw = torch.autograd.grad(loss, (x8, w8))

    assert abs(loss.item() - ref.item()) < 2e-3 * ref.item()
    assert rel(dw, ref_w.grad) < 0.06
    assert rel(dx, ref_x.grad) < 0.1
    assert dx.dtype == x.dtype and dw.dtype == w.dtype and dw.shape == w.shape
    # the layout study holds in FP8: the standard head's dW is the transpose view of a (D, V) tensor
    assert dw.stride() == ((v, 1) if layout == "transposed" else (1, v))


def test_fp8_head_trains_the_tiny_model_like_the_bf16_head(triton_device):
    cfg = make_config("tiny", 1)
    torch.manual_seed(0)
    ref, fp8 = GPT(cfg).to(triton_device), GPT(cfg, fp8_head=True).to(triton_device)
    fp8.load_state_dict(ref.state_dict())
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    targets = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=g).to(triton_device)
    losses = [m(idx, targets) for m in (ref, fp8)]
    for loss in losses:
        loss.backward()
    assert abs(losses[0].item() - losses[1].item()) < 2e-3 * losses[0].item()
    grads = {n: p.grad for n, p in fp8.named_parameters()}
    for name in ("lm_head", "embed", "attn", "mlp"):  # the big tensors; tiny gates cancel and say little
        ref_grad = dict(ref.named_parameters())[name].grad
        assert rel(grads[name], ref_grad) < (0.06 if name == "lm_head" else 0.1), name


def test_fp8_head_rejects_an_unfused_loss_and_cpu_without_the_interpreter(monkeypatch):
    with pytest.raises(ValueError, match="contradicts"):
        GPT(make_config("tiny", 1), fp8_head=True, fused_loss=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="runs on CUDA"):
        fp8_head_loss(torch.zeros(16, 16), torch.zeros(16, 16), torch.zeros(16, dtype=torch.long), CAP, "transposed")


def test_trainer_refuses_fp8_head_on_cpu_with_exit_2(tmp_path):
    # a subprocess: the trainer's main() installs SIGTERM handlers (and ignores SIGTERM on its way out),
    # which in pytest's own process would leak into every later test's forked workers
    proc = subprocess.run([sys.executable, "-m", "instrumented_model.train", "--out", str(tmp_path), "--device", "cpu",
                           "--fp8-head", "--steps", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--fp8-head needs --device cuda" in proc.stderr and "Traceback" not in proc.stderr
