"""Layout-mismatch and SM-contention detectors on hand-built frames (docs/frames.md columns)."""
from __future__ import annotations

import pandas as pd
import pytest

from commscope.analyze.contention import DeviceLimits, device_limits, find_sm_contention, sm_filling_kernels
from commscope.analyze.layout import (broadcast_read, bytes_moved, fastest_dim, find_layout_mismatches,
                                      known_copy_gbps, layout_mismatch, mismatch_kind, stride_order)
from commscope.analyze.layout_kernels import functor_key, kernel_layout_evidence
from commscope.load.frames import frame

V, D = 50304, 768
ADD_SLOW = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
            "CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> "
            "const&)::{lambda(int)#1}>(int, …)")
ADD_FAST = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")


def op(name, dims, strides, *, start, dur, rank=0, tid=1, dtypes=None, kdur=None, kname=None, ext=-1):
    return {"rank": rank, "name": name, "start_ns": start, "end_ns": start + dur, "tid": tid, "external_id": ext,
            "dims": dims, "strides": strides, "dtypes": dtypes,
            "kernel_names": [kname] if kname else None, "kernel_ns": start if kdur else float("nan"),
            "kernel_dur_ns": kdur if kdur else float("nan"), "grids": None}


def test_fastest_dim_ignores_size_one_and_broadcast_dims():
    assert fastest_dim([V, D], [D, 1]) == 1
    assert fastest_dim([V, D], [1, V]) == 0
    assert fastest_dim([1, D], [D, 1]) == 1
    assert fastest_dim([4, D], [0, 1]) == 1          # broadcast dim 0 does not count
    assert fastest_dim([1, 1], [1, 1]) is None


def test_any_difference_in_stride_order_is_a_mismatch():
    assert layout_mismatch([[V, D], [V, D], []], [[D, 1], [1, V], []])           # transposed source
    assert not layout_mismatch([[V, D], [V, D], []], [[D, 1], [D, 1], []])       # aligned
    # outer dims permuted, the innermost one shared: still a different order (generic kernel on H200)
    assert layout_mismatch([[2, 3, 4], [2, 3, 4]], [[12, 4, 1], [4, 8, 1]])
    # channels_last against contiguous NCHW
    assert layout_mismatch([[8, 16, 5, 5], [8, 16, 5, 5]], [[400, 25, 5, 1], [400, 1, 80, 16]])
    assert not layout_mismatch([[V, D], [D]], [[D, 1], [1]])                     # broadcast row vector
    assert not layout_mismatch([[V, D], [V, D]], [[D, 1], [0, 1]])               # expanded row: stride 0
    assert not layout_mismatch([[V, D], [V, D]], [[D, 1], [1, 0]])               # expanded column: one real dim
    assert not layout_mismatch([[4, V, D], [1, V, D]], [[V * D, D, 1], [V * D, D, 1]])  # size-1 dims ignored
    assert layout_mismatch([[4, V, D], [V, D]], [[V * D, D, 1], [1, V]])         # broadcast and transposed
    assert not layout_mismatch([[2, 3], [4, 5]], [[3, 1], [1, 4]])               # shapes that do not broadcast
    assert not layout_mismatch([[], []], [[], []])
    assert stride_order([2, 3, 4], [12, 4, 1]) == (0, 1, 2) and stride_order([2, 3, 4], [4, 8, 1]) == (1, 0, 2)


def test_bytes_moved_counts_reads_and_one_write_copy_does_not_read_destination():
    n = V * D
    assert bytes_moved("aten::add_", [[V, D], [V, D], []], [2, 2, 0]) == 3 * n * 2
    assert bytes_moved("aten::copy_", [[V, D], [V, D], []], [2, 2, 0]) == 2 * n * 2
    assert bytes_moved("aten::copy_", [[V, D], [V, D], []], [4, 2, 0]) == n * 2 + n * 4   # bf16 → fp32
    # with strides, a broadcast argument is read for the elements memory holds, however it is broadcast
    row, expanded_row, expanded_col = ([[V, D], [D]], [[D, 1], [1]]), ([[V, D], [V, D]], [[D, 1], [0, 1]]), \
        ([[V, D], [V, D]], [[D, 1], [1, 0]])
    assert bytes_moved("aten::add_", row[0], [2, 2], row[1]) == bytes_moved("aten::add_", *expanded_row[:1], [2, 2],
                                                                             expanded_row[1]) == 2 * n * 2 + D * 2
    assert bytes_moved("aten::add_", expanded_col[0], [2, 2], expanded_col[1]) == 2 * n * 2 + V * 2
    assert bytes_moved("aten::add_", [[V, D], [V, D]], [2, 2], [[D, 1], [1, V]]) == 3 * n * 2   # transposed: all


def test_known_device_bandwidth():
    assert known_copy_gbps("NVIDIA H200") == 4300.0
    assert known_copy_gbps("NVIDIA H100 80GB HBM3") is None
    assert known_copy_gbps(None) is None


def _gpu_ops():
    bf = ["c10::BFloat16", "c10::BFloat16", "Scalar"]
    rows = [
        # the AccumulateGrad parent and its transposed-source add (331 µs), plus an aligned peer (77 µs)
        op("torch::autograd::AccumulateGrad", [[V, D]], [[D, 1]], start=1000, dur=50_000),
        op("aten::add_", [[V, D], [V, D], []], [[D, 1], [1, V], []], start=2000, dur=10_000, dtypes=bf,
           kdur=331_000, kname=ADD_SLOW, ext=7),
        op("aten::add_", [[V, D], [V, D], []], [[D, 1], [D, 1], []], start=90_000, dur=10_000, dtypes=bf,
           kdur=77_000, kname=ADD_FAST, ext=8),
        # a matmul with a transposed operand is not pointwise: never a finding
        op("aten::mm", [[8, D], [D, V]], [[D, 1], [1, D]], start=200_000, dur=5_000, dtypes=bf[:2]),
        # a small mismatch under min_numel is ignored
        op("aten::copy_", [[6, 12], [6, 12], []], [[12, 1], [1, 6], []], start=300_000, dur=1_000, dtypes=bf),
    ]
    return frame("ops", pd.DataFrame(rows))


def test_gpu_finding_priced_against_aligned_peer_and_attributed():
    ops = _gpu_ops()
    regions = frame("regions", pd.DataFrame([{"rank": 0, "step": 3, "micro_step": 1, "name": "backward",
                                              "start_ns": 0, "end_ns": 150_000}]))
    f = find_layout_mismatches(ops, regions, param_shapes={"lm_head": [V, D], "attn": [10, 4 * D, D]})
    assert len(f) == 1
    r = f.iloc[0]
    assert r["op"] == "aten::add_" and r["confidence"] == "high" and not r["deliberate"]
    assert r["bytes"] == 3 * V * D * 2
    assert r["duration_us"] == pytest.approx(331.0)
    assert r["achieved_gbps"] == pytest.approx(3 * V * D * 2 / 331_000)
    assert r["peak_gbps"] == pytest.approx(3 * V * D * 2 / 77_000) and r["peak_source"] == "aligned twin"
    assert r["slowdown"] == pytest.approx(331.0 / 77.0) and r["severity"] == "severe"
    assert r["est_saving_us"] == pytest.approx(331.0 - 77.0)
    assert r["where"] == "backward: lm_head grad accumulation"


def test_twin_then_device_then_peer_and_given_peak_wins_over_all():
    ops = _gpu_ops()
    f = find_layout_mismatches(ops, device_name="NVIDIA H200")
    assert f.iloc[0]["peak_source"] == "aligned twin"  # the aligned add_ of the same size and dtypes
    no_twin = ops[~((ops["name"] == "aten::add_") & (ops["external_id"] == 8))]
    f = find_layout_mismatches(no_twin, device_name="NVIDIA H200")
    assert f.iloc[0]["peak_gbps"] == 4300.0 and f.iloc[0]["peak_source"] == "device"
    ideal_us = 3 * V * D * 2 / 4300.0 / 1e3
    assert f.iloc[0]["est_saving_us"] == pytest.approx(331.0 - ideal_us)
    # an aligned op of another kind and the same size is only the last resort (no device bandwidth known)
    peer = ops.copy()
    peer.loc[peer["external_id"] == 8, "name"] = "aten::mul_"
    f = find_layout_mismatches(peer, device_name="NVIDIA H100")
    assert f.iloc[0]["peak_source"] == "aligned peer"
    g = find_layout_mismatches(ops, device_name="NVIDIA H200", peak_gbps=1000.0)
    assert g.iloc[0]["peak_gbps"] == 1000.0 and g.iloc[0]["peak_source"] == "given"


def test_deliberate_transpose_add_in_optimizer_is_listed_and_marked():
    fp = ["float", "float", "Scalar"]
    ops = frame("ops", pd.DataFrame([
        op("aten::add_", [[64, 512], [64, 512], []], [[512, 1], [1, 64], []], start=5_000, dur=120_000, dtypes=fp),
        op("aten::add_", [[64, 512], [64, 512], []], [[512, 1], [512, 1], []], start=200_000, dur=30_000, dtypes=fp),
    ]))
    regions = frame("regions", pd.DataFrame([
        {"rank": 0, "step": 2, "micro_step": None, "name": n, "start_ns": s, "end_ns": e}
        for n, s, e in [("optimizer", 0, 400_000), ("opt.phase1", 1_000, 150_000), ("transpose_add", 4_000, 130_000)]]))
    f = find_layout_mismatches(ops, regions, param_shapes={"lm_head": [64, 512], "embed": [512, 64]}, min_numel=1)
    assert len(f) == 1
    r = f.iloc[0]
    assert bool(r["deliberate"]) and r["where"] == "optimizer: lm_head transpose_add"
    # CPU: duration is the op's own time; the aligned same-size op is the peak
    assert r["duration_us"] == pytest.approx(120.0)
    assert r["peak_gbps"] == pytest.approx(3 * 64 * 512 * 4 / 30_000)
    assert r["est_saving_us"] == pytest.approx(90.0)


def test_hook_order_names_the_parameter_when_shapes_are_shared():
    """embed, ve0 and a standard lm_head are all (V, D): the k-th AccumulateGrad is the k-th hook."""
    fp = ["float", "float", "Scalar"]
    rows = []
    for k, start in enumerate((10_000, 20_000, 30_000)):
        rows.append(op("torch::autograd::AccumulateGrad", [[512, 64]], [[64, 1]], start=start, dur=5_000))
    rows.append(op("aten::add_", [[512, 64], [512, 64], []], [[64, 1], [1, 512], []], start=21_000, dur=3_000,
                   dtypes=fp))
    ops = frame("ops", pd.DataFrame(rows))
    regions = frame("regions", pd.DataFrame([{"rank": 0, "step": 4, "micro_step": 1, "name": "backward",
                                              "start_ns": 0, "end_ns": 50_000}]))
    hooks = frame("hooks", pd.DataFrame([{"rank": 0, "step": 4, "micro_step": 1, "label": lab, "position": p,
                                          "t_ns": 0} for p, lab in enumerate(["embed", "lm_head", "ve0"])]))
    shapes = {"embed": [512, 64], "lm_head": [512, 64], "ve0": [512, 64]}
    f = find_layout_mismatches(ops, regions, hooks, param_shapes=shapes, min_numel=1)
    assert f.iloc[0]["where"] == "backward: lm_head grad accumulation"
    # without hooks the label stays ambiguous and says so
    g = find_layout_mismatches(ops, regions, None, param_shapes=shapes, min_numel=1)
    assert g.iloc[0]["where"] == "backward: one of embed|lm_head|ve0 grad accumulation"


def _kernel(name, grid, block, start, dur, rank=0, ext=-1, stream=7, comm=False):
    return {"rank": rank, "name": name, "stream": stream, "start_ns": start, "end_ns": start + dur,
            "correlation": -1, "external_id": ext, "grid": grid, "block": block, "is_comm": comm}


def test_functor_key_matches_generic_and_vectorized_variants():
    import re
    g = re.search(r"elementwise_kernel<\d+, \d+, (.*)", ADD_SLOW).group(1)
    v = re.search(r"vectorized_elementwise_kernel<\d+, (.*)", ADD_FAST).group(1)
    assert functor_key(g) == functor_key(v) == "CUDAFunctor_add<c10::BFloat16>"


def test_kernel_fallback_low_confidence_and_skips_explained_kernels():
    n = V * D
    kernels = frame("kernels", pd.DataFrame([
        _kernel(ADD_SLOW, [n // 512, 1, 1], [128, 1, 1], 0, 331_000, ext=1),
        _kernel(ADD_FAST, [n // 1024, 1, 1], [128, 1, 1], 400_000, 77_000, ext=2),
        _kernel(ADD_SLOW, [n // 512, 1, 1], [128, 1, 1], 600_000, 330_000, ext=3),
        _kernel(ADD_SLOW, [16, 1, 1], [128, 1, 1], 999_000, 5_000, ext=4),   # too small to matter
    ]))
    f = kernel_layout_evidence(kernels)
    assert len(f) == 2 and set(f["confidence"]) == {"low"}
    r = f.sort_values("start_ns").iloc[0]
    assert r["numel"] == n and r["bytes"] == 3 * n * 2
    assert r["peak_gbps"] == pytest.approx(3 * n * 2 / 77_000)
    assert r["peak_source"] == "aligned peer; 4.3× its vectorized peer" and r["where"] == "unknown (no shapes recorded)"
    # the kernel of an op whose shapes were recorded is left to the stride path
    ops = frame("ops", pd.DataFrame([op("aten::add_", [[V, D], [V, D], []], [[D, 1], [1, V], []], start=0,
                                        dur=1, ext=1)]))
    assert list(kernel_layout_evidence(kernels, ops)["start_ns"]) == [600_000]


def test_kernel_fallback_quiet_for_aligned_traces():
    n = V * D
    kernels = frame("kernels", pd.DataFrame([_kernel(ADD_FAST, [n // 1024, 1, 1], [128, 1, 1], 0, 77_000)]))
    assert kernel_layout_evidence(kernels, device_name="NVIDIA H200").empty


def _contention_frames():
    # reduce_scatter "lm_head" of 4 MB on stream 20, alone ~100 µs in steps 0..2, 260 µs in step 3 while a
    # 150912-block generic kernel runs on stream 7; a small grid kernel overlaps step 1 harmlessly.
    colls, kernels = [], []
    for step, (start, dur) in enumerate([(0, 100_000), (1_000_000, 104_000), (2_000_000, 98_000),
                                         (3_000_000, 260_000)]):
        colls.append({"rank": 0, "step": step, "label": "lm_head", "phase": "reduce", "op": "reduce_scatter",
                      "bytes": 4 << 20, "start_ns": start, "end_ns": start + dur, "stream": 20})
        kernels.append(_kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", [16, 1, 1], [512, 1, 1], start, dur,
                               stream=20, comm=True))
    kernels.append(_kernel(ADD_SLOW, [150912, 1, 1], [128, 1, 1], 3_010_000, 240_000, stream=7))
    kernels.append(_kernel("small_gemm", [64, 1, 1], [256, 1, 1], 1_000_000, 104_000, stream=7))
    return frame("collectives", pd.DataFrame(colls)), frame("kernels", pd.DataFrame(kernels))


def test_sm_filling_kernels_use_thread_limited_capacity():
    lim = DeviceLimits(num_sms=132)
    assert lim.capacity(128) == 132 * 16 and lim.capacity(1024) == 132 * 2 and lim.capacity(32) == 132 * 32
    _, kernels = _contention_frames()
    big = sm_filling_kernels(kernels, lim)
    assert list(big["blocks"]) == [150912]


def test_contended_collective_reported_with_pair_overlap_and_inflation():
    colls, kernels = _contention_frames()
    c = find_sm_contention(colls, kernels, DeviceLimits(num_sms=132))
    assert len(c) == 1
    r = c.iloc[0]
    assert r["step"] == 3 and r["label"] == "lm_head" and r["kernel_blocks"] == 150912
    assert r["alone_us"] == pytest.approx(100.0)          # median of 100, 104, 98
    assert r["inflation"] == pytest.approx(2.6)
    assert r["overlap_us"] == pytest.approx(240.0)
    assert r["attributable_us"] == pytest.approx(160.0)   # min(extra 160, overlap 240)


def test_no_contention_without_gpu_limits_or_when_within_alone_range():
    colls, kernels = _contention_frames()
    assert find_sm_contention(colls, kernels, None).empty
    # make one alone run as slow as the contended one: no longer evidence
    colls.loc[colls["step"] == 2, "end_ns"] = colls.loc[colls["step"] == 2, "start_ns"] + 270_000
    assert find_sm_contention(colls, kernels, DeviceLimits(num_sms=132)).empty


def test_device_limits_from_kineto_properties():
    assert device_limits({"deviceProperties": [{"numSms": 132, "maxThreadsPerMultiprocessor": 2048}]}) == \
        DeviceLimits(132, 2048)
    assert device_limits({}) is None


def test_hook_order_micro_step_from_backward_order_when_regions_have_none():
    """A trace's record_function ranges carry no micro-step: the second `backward` of step 4 is micro-step 1."""
    fp = ["float", "float", "Scalar"]
    rows = [op("torch::autograd::AccumulateGrad", [[512, 64]], [[64, 1]], start=s, dur=5_000)
            for s in (10_000, 20_000, 110_000, 120_000)]
    rows.append(op("aten::add_", [[512, 64], [512, 64], []], [[64, 1], [1, 512], []], start=111_000, dur=3_000,
                   dtypes=fp))
    ops = frame("ops", pd.DataFrame(rows))
    regions = frame("regions", pd.DataFrame([
        {"rank": 0, "step": 4, "micro_step": float("nan"), "name": "backward", "start_ns": s, "end_ns": s + 50_000}
        for s in (0, 100_000)]))
    # hook order differs between micro-steps, so only the right micro-step gives lm_head
    hooks = frame("hooks", pd.DataFrame([{"rank": 0, "step": 4, "micro_step": m, "label": lab, "position": p,
                                          "t_ns": 0} for m, order in ((0, ["embed", "lm_head"]),
                                                                      (1, ["lm_head", "embed"]))
                                         for p, lab in enumerate(order)]))
    shapes = {"embed": [512, 64], "lm_head": [512, 64]}
    f = find_layout_mismatches(ops, regions, hooks, param_shapes=shapes, min_numel=1)
    assert f.iloc[0]["where"] == "backward: lm_head grad accumulation"


def test_broadcast_read_needs_a_broadcast_argument_of_shapes_that_broadcast():
    assert broadcast_read([[V, D], [D]], [[D, 1], [1]])                  # a row vector, one dim missing
    assert broadcast_read([[V, D], [V, D]], [[D, 1], [0, 1]])            # expanded row: stride 0
    assert broadcast_read([[V, D], [V, D]], [[D, 1], [1, 0]])            # expanded column
    assert broadcast_read([[V, D], [V, 1]], [[D, 1], [1, 1]])            # a column of size 1
    assert not broadcast_read([[V, D], [V, D]], [[D, 1], [D, 1]])        # aligned
    assert not broadcast_read([[V, D], []], [[D, 1], []])                # a Scalar argument
    assert not broadcast_read([[2, 3], [4, 5]], [[3, 1], [5, 1]])        # shapes that do not broadcast
    assert not broadcast_read([[1, D], [1, D]], [[D, 1], [D, 1]])        # size 1 on both sides: nothing spread
    # a 0-dim tensor spread over a matrix, told from a Python number by Kineto's Input type
    assert broadcast_read([[V, D], []], [[D, 1], []], ["c10::BFloat16", "c10::BFloat16"])
    assert broadcast_read([[V, D], []], [[D, 1], []], ["float", "float"])
    assert not broadcast_read([[V, D], []], [[D, 1], []], ["c10::BFloat16", "Scalar"])
    assert not broadcast_read([[1, 1], []], [[1, 1], []], ["float", "float"])  # nothing to spread over


def test_a_broadcast_read_is_a_finding_only_with_the_generic_cuda_kernel():
    row = ([[V, D], [D]], [[D, 1], [1]])
    assert mismatch_kind(*row, ADD_SLOW) == "broadcast"
    assert mismatch_kind(*row, ADD_FAST) is None       # the vectorized path ran: no evidence of a slowdown
    assert mismatch_kind(*row, None) is None           # a CPU op: vectorized broadcast loops
    assert mismatch_kind([[V, D], []], [[D, 1], []], ADD_SLOW, ["c10::BFloat16"] * 2) == "broadcast"
    assert mismatch_kind([[V, D], []], [[D, 1], []], ADD_SLOW, ["c10::BFloat16", "Scalar"]) is None
    assert mismatch_kind([[V, D], [V, D]], [[D, 1], [1, V]], ADD_FAST) == "stride order"
    assert mismatch_kind([[V, D], [V, D]], [[D, 1], [D, 1]], ADD_SLOW) is None
    # a broadcast add in a GPU trace, priced against the aligned add of the same size and dtypes
    ops = frame("ops", pd.DataFrame([
        op("aten::add_", [[V, D], [D]], [[D, 1], [1]], start=0, dur=10_000, dtypes=["c10::BFloat16"] * 2,
           kdur=150_000, kname=ADD_SLOW, ext=1),
        op("aten::add_", [[V, D], [V, D]], [[D, 1], [D, 1]], start=200_000, dur=10_000,
           dtypes=["c10::BFloat16"] * 2, kdur=77_000, kname=ADD_FAST, ext=2),
    ]))
    f = find_layout_mismatches(ops)
    assert len(f) == 1 and f.iloc[0]["kind"] == "broadcast" and f.iloc[0]["peak_source"] == "aligned twin"
    assert f.iloc[0]["bytes"] == 2 * V * D * 2 + D * 2                  # the broadcast row is read once
    assert f.iloc[0]["slowdown"] == pytest.approx((3 * V * D * 2 / 77_000) / ((2 * V * D + D) * 2 / 150_000))


def test_an_out_of_place_op_writes_its_promoted_dtype_whatever_its_first_argument():
    """aten::mul(0-dim, (4, 2048, 768) fp32) writes a (4, 2048, 768) fp32 result, and a bf16 × fp32
    product an fp32 one: the write is not the first argument's (0 bytes, or 2 a byte pair)."""
    n = 4 * 2048 * 768
    assert bytes_moved("aten::mul", [[], [4, 2048, 768]], [0, 4]) == 2 * n * 4
    assert bytes_moved("aten::mul", [[4, 2048, 768], []], [4, 0]) == 2 * n * 4  # the mirrored op: the same
    m = 4 * 2048 * 6 * 128
    # bf16 (4, 2048, 6, 1) gate × fp32 (4, 2048, 6, 128): reads the gate once per row, the values whole
    assert bytes_moved("aten::mul", [[4, 2048, 6, 1], [4, 2048, 6, 128]], [2, 4]) == m * 4 + m * 4
    assert bytes_moved("aten::mul", [[4, 2048, 6, 1], [4, 2048, 6, 128]], [2, 4],
                       [[12288, 6, 1, 1], [6144 * 16, 768, 128, 1]]) == 4 * 2048 * 6 * 2 + m * 4 + m * 4
    assert bytes_moved("aten::add_", [[4, 8], [4, 8]], [2, 4]) == 32 * 2 + 32 * 4 + 32 * 2  # in place: bf16


def test_the_terminal_shape_is_the_op_s_largest_argument():
    """A (4, 2048, 6, 1) gate times (4, 2048, 6, 128) values runs over the values' shape."""
    from reports.layout_terminal import _shape

    assert _shape([[4, 2048, 6, 1], [4, 2048, 6, 128]]) == "4×2048×6×128"
    assert _shape([[], [4, 2048, 768]]) == "4×2048×768" and _shape([[], []]) == "—"
    assert _shape([[8, 8], [1, 8, 8]]) == "1×8×8"  # as many elements: the one with more dimensions
