"""Triton kernel bodies behind instrumented_model.softcap_ce (the fused soft-capped cross-entropy).

Why: the compiled trainer spent 10.1 ms of a 97.8 ms step on an H200 in two
Inductor reductions over the (49152, 50304) logits, which go through fp32 softcapped logits. Here the
forward reads the bf16 head output once and writes one fp32 log-sum-exp per row; the backward reads it
once more and writes the gradient once.

Why no running maximum: the soft cap bounds every logit to (-cap, cap), so exp(c - cap) lies in
(e^(-2cap), 1] and a row's sum of exps is at most V. With cap = 15 and V = 50304 neither overflows nor
underflows fp32, so one pass with a fixed shift gives the log-sum-exp exactly as an online softmax would.
tanh is written through exp, t = 1 - 2 / (e^(z·2/cap) + 1) (2/cap passed in: no fp32 division by cap), which Triton's interpreter and every GPU
backend have; near 0 it loses relative precision, but its absolute error (what a softmax sees) stays
~1e-7·cap. That costs three special-function-unit operations per logit (two exps and a reciprocal), and
these kernels ran at the SFU's rate, not at memory bandwidth (the hardware tanh below made the forward
1.34× faster on an H200, docs/benchmarks.md). FAST_TANH (the GPU with a 16-bit z) uses
the hardware's tanh.approx.f32 instead, one SFU operation with relative error ≤ 2^-10.99, below the
2^-9 to which a bf16 z is rounded already; an fp32 z, and the interpreter (no inline assembly), keep
the exact form.

The backward kernel computes q = (softmax(c) − onehot(target)) · (1 − t²) ∈ [−1, 1] (0 for an ignored
row); the loss gradient is q times (upstream gradient / number of valid rows).

Kept undecorated in its own module, as the other kernel bodies (instrumented_model.triton_jit): importing
the model never imports Triton. Only builtins here: a helper function would have to be jitted itself,
which Triton's interpreter does not check (tests/gpu/test_triton_bodies.py does), so the soft cap and q are
written out in each kernel. Offsets are int64; ragged blocks are masked.
"""
import triton.language as tl


def softcap_ce_fwd(z_ptr, tgt_ptr, lse_ptr, loss_ptr, V, stride_z, cap, two_over_cap, ignore_index,
                   BLOCK: tl.constexpr, FAST_TANH: tl.constexpr):
    """One program per row: lse = log Σ exp(c), loss = lse − c[target] (0 for an ignored row)."""
    row = tl.program_id(0).to(tl.int64)
    base = z_ptr + row * stride_z
    target = tl.load(tgt_ptr + row).to(tl.int64)
    cols = tl.arange(0, BLOCK).to(tl.int64)
    acc = tl.full([BLOCK], 0.0, tl.float32)
    picked = tl.full([BLOCK], 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + cols
        mask = offs < V
        z = tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
        if FAST_TANH:
            t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [z * (0.5 * two_over_cap)],
                                          dtype=tl.float32, is_pure=True, pack=1)
        else:
            t = 1.0 - 2.0 / (tl.exp(z * two_over_cap) + 1.0)
        c = cap * t
        acc += tl.where(mask, tl.exp(c - cap), 0.0)
        picked += tl.where(offs == target, c, 0.0)
    lse = cap + tl.log(tl.sum(acc, axis=0))
    loss = tl.where(target == ignore_index, 0.0, lse - tl.sum(picked, axis=0))
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, loss)


def softcap_ce_bwd(z_ptr, tgt_ptr, lse_ptr, scale_ptr, dz_ptr, V, stride_z, stride_dz, cap, two_over_cap,
                   ignore_index, BLOCK: tl.constexpr, E5M2: tl.constexpr, FAST_TANH: tl.constexpr,
                   HW_CVT: tl.constexpr):
    """One program per row: dz = scale · q, in dz's dtype, or with E5M2 as e5m2 bytes (dz_ptr a uint8 view).

    scale (a 1-element fp32 tensor, so no host sync) is the loss's upstream gradient over the valid rows,
    or for e5m2 the FP8 gain (|q| ≤ 1, so the gain alone sets the range: no amax pass).

    HW_CVT (the GPU) rounds to e5m2 with the hardware conversion (cvt.rn.satfinite, round to nearest even,
    as torch), which spares the integer work of the hand rounding. The interpreter
    takes the hand rounding through fp16 (e5m2 is fp16's top byte), because it drops the carry when
    rounding up into the next binade (30.4 → 16, not 32); the gain keeps |q · gain| ≤ 2^15, inside fp16."""
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(tgt_ptr + row).to(tl.int64)
    lse = tl.load(lse_ptr + row)
    scale = tl.load(scale_ptr)
    keep = tl.where(target == ignore_index, 0.0, 1.0)
    cols = tl.arange(0, BLOCK).to(tl.int64)
    for start in range(0, V, BLOCK):
        offs = start + cols
        mask = offs < V
        z = tl.load(z_ptr + row * stride_z + offs, mask=mask, other=0.0).to(tl.float32)
        if FAST_TANH:
            t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [z * (0.5 * two_over_cap)],
                                          dtype=tl.float32, is_pure=True, pack=1)
        else:
            t = 1.0 - 2.0 / (tl.exp(z * two_over_cap) + 1.0)
        q = keep * (tl.exp(cap * t - lse) - tl.where(offs == target, 1.0, 0.0)) * (1.0 - t * t)
        if E5M2 and HW_CVT:
            tl.store(dz_ptr + row * stride_dz + offs,
                     (scale * q).to(tl.float8e5, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True), mask=mask)
        elif E5M2:
            bits = (scale * q).to(tl.float16).to(tl.uint16, bitcast=True)
            tl.store(dz_ptr + row * stride_dz + offs, ((bits + 0x7F + ((bits >> 8) & 1)) >> 8).to(tl.uint8),
                     mask=mask)
        else:
            tl.store(dz_ptr + row * stride_dz + offs, (scale * q).to(dz_ptr.dtype.element_ty), mask=mask)
