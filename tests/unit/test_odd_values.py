"""Odd values in well-formed inputs: numbers beyond int64 or float range, shapes that are not shapes, ids that
are objects, steps beyond 2⁵³. The loaders leave each out, or take it as unknown, and say so in one problem
line; every reading command then answers (tests/unit/test_bad_input.py runs all of them over the corpus cases
of tests/adversarial/ that these tests also read, with no traceback allowed).
"""
from __future__ import annotations

import json
import shutil
import tracemalloc
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bad_inputs import invoke
from paths import TESTS

CORPUS = TESTS / "adversarial"
# corpus case → a substring of a report --json problem (with `layout`, of a layout --json note)
REPORTED = {
    "trace_dur_beyond_float": "event(s) with a non-finite or out-of-range ts/dur",
    "trace_dur_near_float_max": "event(s) with a non-finite or out-of-range ts/dur",
    "trace_tid_object": "with a tid that is not a number or a string (taken as its text)",
    "trace_gloo_tid_null": "with a tid that is not a number or a string (taken as its text)",
    "trace_gloo_tid_nan": "with a tid that is not a number or a string (taken as its text)",
    "trace_grid_beyond_int64": "with a grid or block that is not up to 3 integers below 2^32",
    "trace_nelems_beyond_int64": "record_param_comms op(s) record a message size",
    "trace_nelems_beyond_float": "record_param_comms op(s) record a message size",
    "trace_gloo_input_type_not_list": "record an `Input type` that is not a list",
    "events_step_int64_max": "step is beyond ±2^53",
}
LAYOUT_NOTED = ["trace_dims_beyond_int64", "trace_dims_not_integers", "trace_dims_65_dimensions",
                "trace_input_type_not_list"]


def _copy(case: str, tmp_path):
    dst = tmp_path / case
    shutil.copytree(CORPUS / case, dst)
    return dst


@pytest.mark.parametrize("case", sorted(REPORTED))
def test_an_odd_value_is_a_problem_line_of_the_report(case, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = invoke(["report", str(_copy(case, tmp_path)), "--json", "--no-hta"])
    assert code == 0, err[-2000:]
    # said once, as a problem line, not also as numpy's overflow warning on the user's terminal
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    problems = json.loads(out)["problems"]
    assert any(REPORTED[case] in p for p in problems), problems


@pytest.mark.parametrize("case", LAYOUT_NOTED)
def test_unusable_shapes_are_unknown_and_layout_says_so(case, tmp_path):
    path = _copy(case, tmp_path)
    code, out, err = invoke(["layout", str(path), "--json"])
    assert code == 0, err[-2000:]
    doc = json.loads(out)
    assert any("Recorded shapes that cannot be used are taken as unknown" in n and "that is not a shape" in n
               for n in doc["notes"]), doc["notes"]
    if case == "trace_input_type_not_list":  # shapes known, dtypes not: priced by the kernel's element type
        assert doc["findings"] and all(f.get("dtypes") is None for f in doc["findings"]), doc["findings"]
    else:  # the op's shapes are unknown: no finding rests on them (its kernel may still be kernel evidence)
        assert all(f["confidence"] == "low" for f in doc["findings"]), doc["findings"]
    from commscope.load import load_path

    ops = load_path(str(path), with_ops=True).ops
    add = ops[ops["name"] == "aten::add"]
    if case == "trace_input_type_not_list":  # its dims and strides are shapes: only the dtypes are unknown
        assert len(add) == 2 and add["dtypes"].isna().all() and add["dims"].notna().all()
    else:
        assert add.empty


def test_a_message_size_beyond_int64_is_unknown_not_a_huge_number(tmp_path):
    """`Out msg nelems` of 10³⁰ is no message: the size is unknown (null), the group size comes from the
    world size, and the JSON outputs (report, export) are written."""
    path = _copy("trace_nelems_beyond_int64", tmp_path)
    code, out, err = invoke(["report", str(path), "--json", "--no-hta"])
    assert code == 0, err
    code, _, err = invoke(["export", str(path), "--perfetto", str(tmp_path / "p.json")])
    assert code == 0, err
    from commscope.load import load_path

    c = load_path(str(path)).collectives
    assert len(c) == 2 and c["bytes"].isna().all() and (c["group_size"] == 2).all()


def test_a_step_beyond_2_53_is_left_out_of_a_run(tmp_path):
    """The audit's run: rank 1's step-2 records carry step 2⁶³−1. Lateness histograms reindex steps as
    float64, where such a step is not exact: the records are left out, with one problem line per kind."""
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    p = run / "rank1" / "events.jsonl"
    p.write_text(p.read_text().replace('"step":2,', f'"step":{2 ** 63 - 1},').replace('"step": 2,',
                                                                                   f'"step": {2 ** 63 - 1},'))
    assert str(2 ** 63 - 1) in p.read_text()
    for argv in (["report", str(run), "--json", "--no-hta"], ["doctor", str(run), "--json"]):
        code, out, err = invoke(argv)
        assert code == 0 and "Traceback" not in err and "Warning" not in err, err[-2000:]
    problems = json.loads(invoke(["report", str(run), "--json", "--no-hta"])[1])["problems"]
    assert any("step is beyond ±2^53" in q and "rank 1" in q for q in problems), problems


# ---- the shape rules (kineto_events.check_shapes) ---------------------------------------------------------
def _events(dims=None, strides=None, types=None, grid=None):
    from commscope.load.kineto_events import Events

    ev = Events()
    ev.o_dims, ev.o_strides, ev.o_types = [dims], [strides], [types]
    ev.k_grid, ev.k_block = [grid], [None]
    return ev


@pytest.mark.parametrize("dims, ok", [
    ([[4096, 4096], [], [[1, 12], [3]]], True),  # tensors, a non-tensor argument, a tensor list
    ([[2 ** 62 - 1, 0]], True), ([[2 ** 26, 2 ** 26]], True),
    ([[10 ** 30, 10 ** 30]], False),  # beyond int64
    ([[2 ** 40, 2 ** 40]], False),  # beyond 2^52 elements
    ([[None, 5]], False),
    ([[True, 8]], False),
    ([[[[1]]]], False),  # nested deeper than a tensor list
    ([[1.5, 2]], False),
    ([[-1, 2]], False),
    ([[1] * 65], False),  # beyond MAX_SHAPE_DIMS
    ([[1] * 64], True),
    ([[]] * (2 ** 14 + 1), False),  # beyond MAX_SHAPE_TENSORS
    ([[[1]] * 2 ** 14, [[1]]], False),  # so counted across tensor lists
    ("x", False), (7, False), ([{"a": 1}], False),
])
def test_shapes_beyond_the_limits_or_of_the_wrong_types_are_unknown(dims, ok):
    from commscope.load.kineto_values import check_shapes

    ev = _events(dims=dims)
    check_shapes(ev)
    assert (ev.o_dims[0] is dims) == ok
    assert bool(ev.dropped) != ok, ev.dropped


def test_types_and_launch_shapes_are_checked_too():
    from commscope.load.kineto_values import check_shapes

    ev = _events(dims=[[2]], strides=[[10 ** 400]], types=5, grid=[10 ** 30, 1, 1])
    check_shapes(ev)
    assert ev.o_dims == [[[2]]] and ev.o_strides == [None] and ev.o_types == [None] and ev.k_grid == [None]
    assert len(ev.dropped) == 2 and all("(taken as unknown)" in w or "taken as unknown)" in w for w in ev.dropped)
    ev = _events(grid="grid(100,)")  # Triton's launch grids are text: kept as they are
    check_shapes(ev)
    assert ev.k_grid == ["grid(100,)"] and not ev.dropped


def _one_op_trace(path, dims_text: bytes, generic: bool = False) -> None:
    head = (b'{"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ['
            + (b'{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, "args": [1]},' if generic else b""))
    path.write_bytes(head + b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, '
                     b'"dur": 2.0, "args": {"Input Dims": ' + dims_text + b'}}]}')


@pytest.mark.parametrize("generic", [False, True])
def test_a_huge_shape_is_unknown(tmp_path, generic):
    from commscope.load import kineto

    p = tmp_path / "rank0.json"
    _one_op_trace(p, b"[" + b",".join([b"1"] * 100_000) + b"]", generic)
    part = kineto.parse_file(str(p), with_ops=True)
    assert len(part["ops"]) == 0  # an op whose shape is unknown has none to judge
    assert any("1 cpu op event(s) with an Input Dims" in q and "that is not a shape" in q for q in part["problems"])


def test_a_shape_longer_than_the_cap_is_never_decoded(tmp_path):
    """The typed reader leaves a shape's text beyond MAX_SHAPE_BYTES undecoded: reading a trace whose one
    op has 4 M dimensions (8 MB of text) allocates little beyond the file's bytes, where decoding it
    builds a 32 MB list (and a copy of its text)."""
    from commscope.load.kineto_events import read_events
    from commscope.load.kineto_values import check_shapes, check_values

    p = tmp_path / "rank0.json"
    _one_op_trace(p, b"[[" + b",".join([b"1"] * 4_000_000) + b"]]")
    raw = p.read_bytes()
    tracemalloc.start()
    try:
        ev = read_events(str(p), raw, True)
        check_values(ev)
        check_shapes(ev)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ev.o_dims == [None] and len(ev.dropped) == 1
    assert peak < len(raw) / 4, f"peak {peak / 2 ** 20:.1f} MiB for a {len(raw) / 2 ** 20:.0f} MiB trace"


def test_numbers_beyond_float_range_in_times_are_dropped():
    from commscope.load.kineto_events import Events
    from commscope.load.kineto_values import check_values

    ev = Events()
    ev.a_name, ev.a_tid, ev.a_ts, ev.a_dur = ["a", "b"], [1, 1], [1.0, 10 ** 400], [1.0, -10 ** 400]
    check_values(ev)
    assert ev.a_name == ["a"] and ev.dropped == {"annotation event(s) with a non-finite or out-of-range ts/dur": 1}


def test_element_counts_and_json_ints_of_odd_values():
    from commscope.util.num import largest_numel, whole

    assert largest_numel([[None, 5], [[1, 2]], [2, 3], [True, 9]]) == 6  # only lists of integers are tensors
    assert whole(4e30) == 4e30 and isinstance(whole(4e30), float)  # beyond int64: stays a float in JSON
    assert whole(77266944.0) == 77266944 and isinstance(whole(77266944.0), int)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.00005, -0.00005, 1.23455, 2.5e-5])))
def test_rounded_floats_and_whole_floats_are_rounded_and_whole_of_each_value(xs):
    from commscope.util.num import rounded, rounded_floats, whole, whole_floats

    assert rounded_floats(xs) == [rounded(x) for x in xs]
    assert rounded_floats(xs, 2) == [rounded(x, 2) for x in xs]
    wf = whole_floats(xs + [4e30, 77266944.0, 2.0 ** 63, 3.00001])
    assert wf == [whole(x) for x in xs + [4e30, 77266944.0, 2.0 ** 63, 3.00001]]
    assert [type(v) for v in wf] == [type(whole(x)) for x in xs + [4e30, 77266944.0, 2.0 ** 63, 3.00001]]


def test_rounded_floats_equal_pythons_round_bit_for_bit_near_halves_and_at_the_fast_paths_bounds():
    """rounded_floats rounds in numpy where it can prove the result is Python's: values a hair either side
    of a half at 4 and 2 decimals, exact ties, the 2**31 bound of the fast path, signed zeros, subnormals."""
    import struct

    import numpy as np

    from commscope.util.num import rounded, rounded_floats

    rng = np.random.default_rng(7)
    k = rng.integers(-10 ** 9, 10 ** 9, 20000)
    near = np.concatenate([(k + h) / 1e4 for h in (0.5, 0.5 - 1e-9, 0.5 + 1e-9, 0.49999, 0.50001)]
                          + [(k[:2000] + 0.5) / 1e2, k[:2000] / 2.0 ** 12])
    edges = np.array([2.0 ** 31 / 1e4 - 1e-5, 2.0 ** 31 / 1e4 + 1e-5, 0.03125, -0.03125, -0.0, 0.0, -1e-9,
                      5e-324, -5e-324, 1e308, -1e308, 2.675, 214748.36475, np.nan, np.inf, -np.inf])
    xs = np.concatenate([near, edges, rng.uniform(-1e6, 1e6, 20000), rng.uniform(-1e15, 1e15, 5000)])
    bits = lambda v: None if v is None else struct.pack("d", v)  # noqa: E731 - -0.0 and 0.0 differ here
    for nd in (4, 2, 0):
        got = rounded_floats(xs, nd)
        assert all(type(v) in (float, type(None)) for v in got)
        assert [bits(v) for v in got] == [bits(rounded(float(x), nd)) for x in xs]
