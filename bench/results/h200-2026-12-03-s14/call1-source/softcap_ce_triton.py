"""Triton kernel bodies behind instrumented_model.softcap_ce (the fused soft-capped cross-entropy).

Why: the compiled trainer spent 10.1 ms of a 97.8 ms step (docs/benchmarks.md, session 12) in two
Inductor reductions over the (49152, 50304) logits, which go through fp32 softcapped logits. Here the
forward reads the bf16 head output once and writes one fp32 log-sum-exp per row; the backward reads it
once more and writes the gradient once.

Why no running maximum: the soft cap bounds every logit to (-cap, cap), so exp(c - cap) lies in
(e^(-2cap), 1] and a row's sum of exps is at most V. With cap = 15 and V = 50304 neither overflows nor
underflows fp32, so one pass with a fixed shift gives the log-sum-exp exactly as an online softmax would.
tanh is written through exp, t = 1 - 2 / (e^(z·2/cap) + 1) (2/cap passed in: no fp32 division by cap), which Triton's interpreter and every GPU
backend have; near 0 it loses relative precision, but its absolute error (what a softmax sees) stays
~1e-7·cap.

The backward kernels compute q = (softmax(c) − onehot(target)) · (1 − t²) ∈ [−1, 1] (0 for an ignored
row); the loss gradient is q times (upstream gradient / number of valid rows).

Kept undecorated in its own module, as the other kernel bodies (instrumented_model.triton_jit): importing
the model never imports Triton. Only builtins here: a helper function would have to be jitted itself,
which Triton's interpreter does not check (tests/test_triton_bodies.py does), so the soft cap and q are
written out in each kernel. Offsets are int64; ragged blocks are masked.
"""
import triton.language as tl


def softcap_ce_fwd(z_ptr, tgt_ptr, lse_ptr, loss_ptr, V, stride_z, cap, two_over_cap, ignore_index,
                   BLOCK: tl.constexpr):
    """One program per row: lse = log Σ exp(c), loss = lse − c[target] (0 for an ignored row)."""
    row = tl.program_id(0).to(tl.int64)
    base = z_ptr + row * stride_z
    target = tl.load(tgt_ptr + row).to(tl.int64)
    cols = tl.arange(0, BLOCK).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    picked = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + cols
        mask = offs < V
        z = tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
        c = cap * (1.0 - 2.0 / (tl.exp(z * two_over_cap) + 1.0))
        acc += tl.where(mask, tl.exp(c - cap), 0.0)
        picked += tl.where(offs == target, c, 0.0)
    lse = cap + tl.log(tl.sum(acc, axis=0))
    loss = tl.where(target == ignore_index, 0.0, lse - tl.sum(picked, axis=0))
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, loss)


def softcap_ce_bwd(z_ptr, tgt_ptr, lse_ptr, scale_ptr, dz_ptr, V, stride_z, stride_dz, cap, two_over_cap,
                   ignore_index, BLOCK: tl.constexpr):
    """One program per row: dz = scale · q, in dz's dtype.

    scale (a 1-element fp32 tensor, so no host sync) is the loss's upstream gradient over the valid rows."""
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
        t = 1.0 - 2.0 / (tl.exp(z * two_over_cap) + 1.0)
        q = keep * (tl.exp(cap * t - lse) - tl.where(offs == target, 1.0, 0.0)) * (1.0 - t * t)
        tl.store(dz_ptr + row * stride_dz + offs, (scale * q).to(dz_ptr.dtype.element_ty), mask=mask)


def softcap_ce_bwd_e5m2(z_ptr, tgt_ptr, lse_ptr, dz8_ptr, dz8t_ptr, N, V, stride_z, cap, two_over_cap, ignore_index,
                        fp8_gain, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, T_BYTES: tl.constexpr):
    """One program per BLOCK_R×BLOCK_C tile: q · fp8_gain as e5m2 into dz8 (N, V) and its transpose dz8t
    (V, N), both contiguous. The FP8 matmuls need both layouts (cuBLAS FP8 takes only TN), and writing the
    transpose here from registers spares a full transposing pass over the gradient. |q| ≤ 1, so the gain
    alone sets the range: no amax pass.

    T_BYTES is the element size the tile is transposed in (a launch choice, autotuned; the bytes written
    are the same): 1 transposes the e5m2 bytes, 2 their fp16 bits, 4 the fp32 q (then rounded twice). Session
    13 measured the 1-byte transpose at 11.8 ms, ~5× the bandwidth bound: shared-memory transposes of
    1-byte elements serialise on bank conflicts. T_BYTES = 0 skips dz8t (the caller transposes dz8 itself).

    The e5m2 rounding goes through fp16 by hand (e5m2 is fp16's top byte; round to nearest even): Triton's
    CPU interpreter drops the carry when rounding up into the next binade (30.4 → 16, not 32). The gain
    keeps |q · gain| ≤ 2^15, inside fp16."""
    pid = tl.program_id(0).to(tl.int64)
    tiles_v = (V + BLOCK_C - 1) // BLOCK_C
    rows = (pid // tiles_v) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    cols = (pid % tiles_v) * BLOCK_C + tl.arange(0, BLOCK_C).to(tl.int64)
    row_ok = rows < N
    mask = row_ok[:, None] & (cols[None, :] < V)
    z = tl.load(z_ptr + rows[:, None] * stride_z + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    target = tl.load(tgt_ptr + rows, mask=row_ok, other=ignore_index).to(tl.int64)
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    keep = tl.where(target == ignore_index, 0.0, 1.0)
    t = 1.0 - 2.0 / (tl.exp(z * two_over_cap) + 1.0)
    onehot = tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
    q = keep[:, None] * (tl.exp(cap * t - lse[:, None]) - onehot) * (1.0 - t * t)
    bits = (q * fp8_gain).to(tl.float16).to(tl.uint16, bitcast=True)
    q8 = ((bits + 0x7F + ((bits >> 8) & 1)) >> 8).to(tl.uint8)
    tl.store(dz8_ptr + rows[:, None] * V + cols[None, :], q8.to(tl.float8e5, bitcast=True), mask=mask)
    if T_BYTES != 0:
        if T_BYTES == 1:
            q8t = tl.trans(q8)
        else:
            if T_BYTES == 2:
                bits_t = tl.trans(bits)
            else:
                bits_t = (tl.trans(q) * fp8_gain).to(tl.float16).to(tl.uint16, bitcast=True)
            q8t = ((bits_t + 0x7F + ((bits_t >> 8) & 1)) >> 8).to(tl.uint8)
        mask_t = (cols[:, None] < V) & row_ok[None, :]  # built transposed, not transposed
        tl.store(dz8t_ptr + cols[:, None] * N + rows[None, :], q8t.to(tl.float8e5, bitcast=True), mask=mask_t)
