"""Adam update direction and the cautious weight-decay step shared by both update rules.

`adam_direction_` is bias-corrected Adam written to match torch.optim.Adam's arithmetic (eps added to
the bias-corrected √v), so it can be checked against it. `cautious_step_` applies any update direction
with decoupled weight decay gated to the elements where update and weight agree in sign (decay only
pushes a weight toward zero where the update already does).

Invariants: moments are fp32 and updated in place; directions are fp32; `cautious_step_` writes the
parameter slice in place in its own dtype (a view into the parameter, so a following all-gather can send
it straight from there).
"""
from __future__ import annotations

import math

from torch import Tensor

ADAM_EPS = 1e-10


def adam_direction_(grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int,
                    betas: tuple[float, float], eps: float = ADAM_EPS) -> Tensor:
    """Update the moments with `grad` (step counts from 1) and return m̂ / (√v̂ + eps)."""
    beta1, beta2 = betas
    g = grad.float()
    exp_avg.lerp_(g, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1.0 - beta2 ** step)).add_(eps)
    return exp_avg / denom / (1.0 - beta1 ** step)


def cautious_step_(p: Tensor, direction: Tensor, lr: float, wd: float) -> None:
    """p ← p − lr·direction − lr·wd·p·[direction·p > 0], computed in fp32, written in place."""
    p32 = p.float()
    decay_mask = (direction * p32) > 0
    new = p32 - lr * direction
    if wd:
        new = new - (lr * wd) * p32 * decay_mask
    p.copy_(new)
