"""Triton kernel bodies behind the fused optimizer updates (instrumented_model.adam / .normuon).

Why: eager PyTorch runs Adam + cautious weight decay as ~15 separate elementwise kernels, each a full pass
over a 154 MB tensor for the (50304, 768) ones; one program per BLOCK elements here reads every input once
and writes every output once (Adam: read p, g, m, v; write p, m, v).

Kept in its own module, undecorated, so that importing the optimizer never imports Triton: adam.py
`fused_kernel(name)` (through instrumented_model.triton_jit) imports this module and jits the body in the
interpret mode of that moment, as for the transpose kernels. Only builtins here, no @triton.jit library helpers (they would be
jitted at import time, in that moment's mode). Offsets are int64; ragged tails are masked.
The arithmetic follows the eager functions step by step (same order of operations), so results agree
with them to fp32 rounding.
"""
import triton.language as tl


def adam_cautious(p_ptr, g_ptr, m_ptr, v_ptr, n, grad_scale, beta1, beta2, bias1, sqrt_bias2, eps, lr, lr_wd,
                  BLOCK: tl.constexpr):
    """Adam moments + bias-corrected direction + cautious decoupled weight decay, in place on p, m, v."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32) * grad_scale
    m = tl.load(m_ptr + offs, mask=mask)
    v = tl.load(v_ptr + offs, mask=mask)
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    m = m + (1.0 - beta1) * (g - m)  # lerp(m, g, 1 - beta1)
    v = v * beta2 + (1.0 - beta2) * (g * g)
    denom = tl.sqrt(v) / sqrt_bias2 + eps
    direction = m / denom / bias1
    decay = tl.where(direction * p > 0, lr_wd * p, 0.0)
    new = p - lr * direction - decay
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    tl.store(p_ptr + offs, new.to(p_ptr.dtype.element_ty), mask=mask)


def nesterov(g_ptr, buf_ptr, out_ptr, n, grad_scale, momentum, BLOCK: tl.constexpr):
    """buf ← lerp(buf, g, 1 − μ); out ← lerp(g, buf, μ) (fp32), one pass."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32) * grad_scale
    buf = tl.load(buf_ptr + offs, mask=mask)
    buf = buf + (1.0 - momentum) * (g - buf)
    out = g + momentum * (buf - g)
    tl.store(buf_ptr + offs, buf, mask=mask)
    tl.store(out_ptr + offs, out, mask=mask)


def scaled_cautious(p_ptr, v_ptr, scale_ptr, n, rows, cols, lr, lr_wd, PER_ROW: tl.constexpr,
                    BLOCK: tl.constexpr):
    """direction = v · scale (scale: one value per row, or per column, of each (rows, cols) matrix), then the
    cautious step p ← p − lr·direction − lr·wd·p·[direction·p > 0], in place on p."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    if PER_ROW:
        s_idx = offs // cols
    else:
        s_idx = (offs // (rows * cols)) * cols + offs % cols
    s = tl.load(scale_ptr + s_idx, mask=mask)
    direction = tl.load(v_ptr + offs, mask=mask) * s
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    decay = tl.where(direction * p > 0, lr_wd * p, 0.0)
    new = p - lr * direction - decay
    tl.store(p_ptr + offs, new.to(p_ptr.dtype.element_ty), mask=mask)


def divide_per_matrix(x_ptr, denom_ptr, out_ptr, n, matrix_numel, BLOCK: tl.constexpr):
    """out ← x / denom[matrix] for a stack of matrices, one fp32 divisor each, stored in out's dtype; the
    division is IEEE round-to-nearest, as torch.div's."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    d = tl.load(denom_ptr + offs // matrix_numel, mask=mask, other=1.0)
    tl.store(out_ptr + offs, tl.math.div_rn(x, d).to(out_ptr.dtype.element_ty), mask=mask)


def symmetric_gram(x_ptr, pairs_ptr, c_ptr, out_ptr, n, sxb, sxn, sxk, scb, scn, scm, sob, son, som,
                   alpha, beta, kdim: tl.constexpr, HAS_C: tl.constexpr, IEEE: tl.constexpr, BLOCK: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    """out ← alpha·X Xᵀ (+ beta·C) for one (n, kdim) matrix X of a batch (program_id 1), one BLOCK × BLOCK
    tile pair per program: pairs_ptr lists the tiles (i, j) with i ≤ j, and each program also writes the
    mirrored tile (j, i), so the symmetric product costs the upper triangle's tiles only. X is read
    through its strides (sxn along the n rows, sxk along kdim), so Xᵀ of a stored matrix needs no copy.
    C must be symmetric (its mirrored tile is read as the transpose of tile (i, j)). IEEE: fp32 inputs
    multiplied in full fp32 (as cuBLAS does by default), not TF32. kdim is a constexpr (one compile per
    bank shape): Triton 3.6's interpreter cannot loop over a runtime scalar."""
    b = tl.program_id(1).to(tl.int64)
    t = tl.program_id(0)
    ti = tl.load(pairs_ptr + 2 * t)
    tj = tl.load(pairs_ptr + 2 * t + 1)
    ri = ti.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    rj = tj.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    x_b = x_ptr + b * sxb
    acc = tl.full((BLOCK, BLOCK), 0.0, tl.float32)  # a builtin: tl.zeros is a @jit helper (module docstring)
    for k0 in range(0, kdim, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K).to(tl.int64)
        a = tl.load(x_b + ri[:, None] * sxn + ks[None, :] * sxk, mask=(ri[:, None] < n) & (ks[None, :] < kdim),
                    other=0.0)
        bt = tl.load(x_b + ks[:, None] * sxk + rj[None, :] * sxn, mask=(ks[:, None] < kdim) & (rj[None, :] < n),
                     other=0.0)
        if IEEE:
            acc = tl.dot(a, bt, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, bt, acc)
    acc = acc * alpha
    mask = (ri[:, None] < n) & (rj[None, :] < n)
    if HAS_C:
        c = tl.load(c_ptr + b * scb + ri[:, None] * scn + rj[None, :] * scm, mask=mask, other=0.0)
        acc = acc + beta * c.to(tl.float32)
    o_b = out_ptr + b * sob
    tl.store(o_b + ri[:, None] * son + rj[None, :] * som, acc.to(out_ptr.dtype.element_ty), mask=mask)
    if ti != tj:
        tl.store(o_b + rj[:, None] * son + ri[None, :] * som, tl.trans(acc).to(out_ptr.dtype.element_ty),
                 mask=(rj[:, None] < n) & (ri[None, :] < n))
