"""The Triton tile kernel behind instrumented_model.kernels.transpose_copy / transpose_add.

Kept in its own module so that importing the kernels module (every rank does) does not import Triton;
instrumented_model.triton_jit imports this module and jits `transpose_tile` in the interpret mode of that
moment.
Each program loads one BLOCK_M×BLOCK_N tile of src with coalesced reads, transposes it in registers and
stores it coalesced into dst; offsets are int64 so tensors past 2**31 elements work.
"""
import triton.language as tl


def transpose_tile(src_ptr, dst_ptr, M, N, tiles_n, stride_sm, stride_sn, stride_dm, stride_dn,
                    ADD: tl.constexpr, DST_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: src tile [rows m, cols n] (shape BLOCK_M×BLOCK_N) → dst[n, m] (dst is N×M)."""
    # Only builtins here, no @triton.jit library helpers (tl.cdiv, ...): those were jitted when Triton was
    # imported, in that moment's mode, and would break the lazily chosen interpret mode.
    pid = tl.program_id(0).to(tl.int64)
    pid_m = pid // tiles_n
    pid_n = pid % tiles_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)

    src_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tile = tl.load(src_ptr + offs_m[:, None] * stride_sm + offs_n[None, :] * stride_sn, mask=src_mask)
    tile_t = tl.trans(tile)  # (BLOCK_N, BLOCK_M): dst rows are src columns

    dst_mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    dst_ptrs = dst_ptr + offs_n[:, None] * stride_dm + offs_m[None, :] * stride_dn
    if ADD:
        old = tl.load(dst_ptrs, mask=dst_mask)
        total = old.to(tl.float32) + tile_t.to(tl.float32)
        if DST_BF16:
            # Round to nearest even by hand, exactly as c10::BFloat16 does (NaN → 0x7FC0): Triton's CPU
            # interpreter truncates on fp32→bf16 casts, so `.to(tl.bfloat16)` would not match torch there.
            bits = total.to(tl.uint32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            rounded = tl.where(total != total, 0x7FC0, rounded)
            tile_t = rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            tile_t = total.to(dst_ptr.dtype.element_ty)
    tl.store(dst_ptrs, tile_t, mask=dst_mask)
