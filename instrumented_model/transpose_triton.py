"""The Triton tile kernels behind instrumented_model.kernels.transpose_copy / transpose_add.

Kept in their own module so that importing the kernels module (every rank does) does not import Triton;
instrumented_model.triton_jit imports this module and jits a kernel in the interpret mode of that moment.
Each program loads one tile of src with coalesced reads, transposes it in registers and stores it
coalesced into dst; offsets are int64 so tensors past 2**31 elements work. `transpose_tile` serves every
dtype; `transpose_pairs_tile` is the faster 16-bit copy for even shapes (it moves 32-bit words).
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


def transpose_pairs_tile(src_ptr, dst_ptr, MP, NP, tiles_j, stride_s, stride_d,
                         BLOCK_K: tl.constexpr, BLOCK_J: tl.constexpr):
    """16-bit copy dst = srcᵀ done on 32-bit words (src: M×N, dst: N×M, both contiguous rows, M and N even).

    src_ptr/dst_ptr are int32 views: src word (r, j) holds src[r, 2j] (low half) and src[r, 2j+1] (high);
    dst word (c, k) holds dst[c, 2k] = src[2k, c] and dst[c, 2k+1] = src[2k+1, c]. One program reads
    BLOCK_K row pairs × BLOCK_J words of src, swaps halves between the even and odd row (after which each
    word holds one dst word), transposes both tiles and writes rows 2j and 2j+1 of dst. Why: a transpose
    of 16-bit elements in registers moves through shared memory at half the width of a 32-bit one and
    reached only ~40–75 % of an aligned copy on an H200; on words it runs like the fp32 kernel.
    MP = M/2 row pairs, NP = N/2 words per src row; strides are in words.
    """
    pid = tl.program_id(0).to(tl.int64)
    pid_k = pid // tiles_j
    pid_j = pid % tiles_j
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K).to(tl.int64)
    offs_j = pid_j * BLOCK_J + tl.arange(0, BLOCK_J).to(tl.int64)

    mask = (offs_k[:, None] < MP) & (offs_j[None, :] < NP)
    even_ptrs = src_ptr + (2 * offs_k)[:, None] * stride_s + offs_j[None, :]
    even = tl.load(even_ptrs, mask=mask)
    odd = tl.load(even_ptrs + stride_s, mask=mask)
    # dst row 2j takes the low halves (column 2j of src), row 2j+1 the high halves; -65536 is 0xFFFF0000.
    low = (even & 0xFFFF) | (odd << 16)
    high = ((even >> 16) & 0xFFFF) | (odd & -65536)

    dst_mask = (offs_j[:, None] < NP) & (offs_k[None, :] < MP)
    low_ptrs = dst_ptr + (2 * offs_j)[:, None] * stride_d + offs_k[None, :]
    tl.store(low_ptrs, tl.trans(low), mask=dst_mask)
    tl.store(low_ptrs + stride_d, tl.trans(high), mask=dst_mask)
