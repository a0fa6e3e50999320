"""Loading Kineto traces: the 8×H100 NCCL fixture (matching across ranks) and a 2-rank gloo CPU trace
(tests/data/gloo2, made by make_trace.py there: per step one labelled reduce_scatter, one labelled
all_reduce on a second group and one unlabelled all_gather)."""
import os

import msgspec
import numpy as np
import pandas as pd
import pytest

from commscope.load import COLUMNS, load_path
from paths import TESTS

FIXTURE = os.path.join(TESTS, "data", "modded-nanogpt-8xh100")
GLOO = os.path.join(TESTS, "data", "gloo2")
# HTA's test trace of an NCCL job without distributedInfo: its `nccl:all_to_all` ranges (with Input Dims)
# are nested inside `record_param_comms`, not around it
OLDER_NESTED = TESTS / "data" / "hta-testdata" / "distributed_info_unavailable" / "distributed_info_not_found.json.gz"


@pytest.fixture(scope="module")
def h100():
    return load_path(FIXTURE)


@pytest.fixture(scope="module")
def raw():
    """The 8×H100 traces' events per rank as json reads them: counts the loader's frames are checked against."""
    import gzip
    import json

    out = {}
    for r in range(8):
        with gzip.open(os.path.join(FIXTURE, f"rank{r}.json.gz")) as f:
            out[r] = json.load(f)["traceEvents"]
    return out


def test_every_rank_loads_with_contract_columns(h100, raw):
    assert h100.source == "kineto" and h100.world_size == 8 and h100.ranks == list(range(8))
    assert h100.backend == "nccl" and h100.device == "cuda" and h100.problems == []
    for kind, cols in COLUMNS.items():
        assert list(getattr(h100, kind).columns)[:len(cols)] == cols or kind == "kernels"
        assert set(cols) <= set(getattr(h100, kind).columns)
    # the fixture keeps the first two of the run's profiled steps (tests/data/README.md)
    for r, ev in raw.items():
        cpu_steps = sorted(int(e["name"].split("#")[1]) for e in ev
                           if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
        assert cpu_steps == [10, 11]
        assert sorted(h100.steps.loc[h100.steps["rank"] == r, "step"]) == cpu_steps


def test_nccl_kernels_matched_to_record_param_comms_on_all_ranks(h100, raw):
    c = h100.collectives
    launched = c[c["call_ns"].notna()]
    # every record_param_comms cpu op of a rank (28 per rank in the fixture's two steps), each matched to
    # its kernel (correlation → launch inside the op)
    rpc = {r: [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "record_param_comms"]
           for r, ev in raw.items()}
    n_rpc = {len(v) for v in rpc.values()}
    assert len(n_rpc) == 1 and n_rpc.pop() > 20
    assert launched.groupby("rank").size().to_dict() == {r: len(v) for r, v in rpc.items()}
    assert launched["start_ns"].notna().all()
    assert (launched["start_ns"] > launched["call_ns"]).all()
    g = launched.groupby(["group", "seq"]).agg(n=("rank", "size"), ops=("op", "nunique"),
                                               nbytes=("bytes", "nunique"), labels=("label", "nunique"))
    assert len(g) == len(rpc[0]) and (g["n"] == 8).all() and (g[["ops", "nbytes", "labels"]] == 1).all().all()
    assert set(launched["op"]) == {"reduce_scatter", "all_gather"}
    assert set(launched["label"]) == {"_reduce_scatter_base", "_allgather_base"}
    # embedding-sized reduce_scatters (In msg nelems 38633472 = 50304×768, bf16): 5 per rank in 2 steps
    emb = launched[(launched["op"] == "reduce_scatter") & (launched["bytes"] == 50304 * 768 * 2)]
    raw_emb = [e for v in rpc.values() for e in v if e["args"]["Collective name"] == "_reduce_scatter_base"
               and e["args"]["In msg nelems"] == 50304 * 768 and e["args"]["dtype"] == "BFloat16"]
    assert len(emb) == len(raw_emb) >= 8 * 2
    assert (emb["dtype"] == "BFloat16").all() and (emb["group_size"] == 8).all()
    # a collective ends within a fraction of a ms on all ranks (clocks share one axis), while the host
    # launches are spread over tens of ms (the CPU runs ahead of the GPU)
    spread = launched.groupby("seq")["end_ns"].agg(lambda e: e.max() - e.min())
    launch_spread = launched.groupby("seq")["call_ns"].agg(lambda e: e.max() - e.min())
    assert spread.max() < 500_000 and launch_spread.median() > 10 * spread.max()


def test_kernels_launched_before_the_window_fall_back_to_names(h100):
    c = h100.collectives
    early = c[c["call_ns"].isna()]
    assert len(early) and (early["seq"] < 0).all() and early["bytes"].isna().all()
    assert set(early["label"]) <= {"reduce_scatter", "all_gather"}
    # the pre-window kernels that every rank has line up too
    both = early.groupby("seq").agg(n=("rank", "size"), ops=("op", "nunique"))
    assert (both["ops"] == 1).all() and (both.loc[-20:, "n"] == 8).all()


def test_kernels_and_ops_frames(h100, raw):
    k = h100.kernels
    assert (k["end_ns"] >= k["start_ns"]).all()
    # communication kernels: the NCCL kernels of the raw trace, those launched before the window included
    nccl = {r: sum(e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel") for e in ev)
            for r, ev in raw.items()}
    assert k.groupby("rank")["is_comm"].sum().to_dict() == nccl and min(nccl.values()) >= 40
    ops = h100.ops
    with_k = ops.dropna(subset=["kernel_dur_ns"])
    assert len(with_k) > 1000
    row = with_k.iloc[0]
    assert len(row["kernel_names"]) == len(row["grids"]) >= 1 and row["kernel_ns"] >= row["start_ns"]
    # compute = the non-communication device activity
    assert len(h100.compute) == (~k["is_comm"]).sum()


def test_select_steps_is_half_open(h100):
    sub = h100.select_steps((10, 11))
    assert sorted(sub.steps["step"].unique()) == [10]
    assert set(sub.collectives["step"]) == {10} and len(sub.collectives) < len(h100.collectives)
    both = h100.select_steps((10, 12))
    assert sorted(both.steps["step"].unique()) == [10, 11]
    # both steps: all of it but the collectives launched before the profiler started (step −1: their
    # launching step is not in the trace)
    launched = h100.collectives[h100.collectives["step"] >= 0]
    assert len(sub.collectives) < len(both.collectives) == len(launched) == h100.collectives["call_ns"].notna().sum()
    # kernels by the step that launched them: those of both steps are every kernel launched inside them
    k = h100.kernels
    assert len(both.kernels) == (k["step"] >= 0).sum() and set(sub.kernels["step"]) == {10}


@pytest.fixture(scope="module")
def gloo():
    return load_path(GLOO)


def test_gloo_launches_paired_with_executions(gloo):
    assert gloo.ranks == [0, 1] and gloo.backend == "gloo" and gloo.device == "cpu"
    c = gloo.collectives
    assert (c.groupby("rank").size() == 9).all()
    assert c["start_ns"].notna().all() and (c["start_ns"] >= c["call_ns"]).all()
    assert (c["end_ns"] > c["start_ns"]).all()
    by = c[c["rank"] == 0].groupby(["label", "phase", "op"], dropna=False).size()
    assert by[("grad", "reduce", "reduce_scatter")] == 3
    assert by[("w", "allreduce", "all_reduce")] == 3
    ag = c[(c["rank"] == 0) & (c["op"] == "all_gather")]
    assert len(ag) == 3 and (ag["label"] == "_allgather_base").all() and ag["phase"].isna().all()
    # every call's dtype and full-array bytes are known, the all_reduce too (its c10d::allreduce_ launch
    # records "TensorList"; the paired gloo:all_reduce execution records "float"): y is 64×64 fp32
    assert (c["dtype"] == "float").all() and c["bytes"].notna().all()
    assert (c.loc[c["op"] == "all_reduce", "bytes"] == 64 * 64 * 4).all()
    # same (group, seq) on both ranks is the same collective
    g = c.groupby(["group", "seq"]).agg(n=("rank", "size"), ops=("op", "nunique"))
    assert (g["n"] == 2).all() and (g["ops"] == 1).all()
    # a reduce_scatter executes as gloo:all_reduce over the 2048-element input
    rs = c[(c["op"] == "reduce_scatter")]
    assert (rs["stream"] != rs["rank"]).all()
    # CPU traces: compute = top-level ops of the caller thread, none of them c10d launches
    comp = gloo.compute
    assert len(comp) and (comp["kind"] == "cpu_op").all() and not comp["name"].str.startswith("c10d::").any()
    s = comp.sort_values(["rank", "start_ns"])
    for _, r in s.groupby("rank"):
        assert (r["start_ns"].to_numpy()[1:] >= r["end_ns"].to_numpy()[:-1]).all()  # top level: no nesting


# --- the typed (msgspec) and generic (orjson dicts) event readers must agree ---------------------------

def _events_of(path, with_ops=True, generic=False):
    from commscope.load import kineto_events
    from commscope.load.files import read_bytes

    raw = read_bytes(path)
    ev = kineto_events._generic(path, raw) if generic else kineto_events.read_events(path, raw, with_ops)
    cols = {k: v for k, v in vars(ev).items() if k not in ("doc", "ints")}
    if ev.ints:  # what the typed reader promises of its int columns (kineto.column trusts it)
        assert all(type(v) is int for k in ("k_stream", "k_corr", "k_ext", "l_corr", "l_ext", "o_ext") for v in cols[k])
    keep = kineto_events.ARG_KEYS  # the typed reader keeps only these of an op's args (all that is read)
    cols["o_args"] = [{k: v for k, v in ev.o_args[i].items() if k in keep} for i in range(len(ev.o_args))]
    return cols


@pytest.mark.parametrize("name", ["gloo", "h100", "stack", "older"])
def test_typed_and_generic_readers_agree(name):
    path = {"gloo": os.path.join(GLOO, "rank0.json"), "h100": os.path.join(FIXTURE, "rank3.json.gz"),
            "stack": os.path.join(TESTS, "data", "gloo2-stack", "rank0.json"),
            "older": str(OLDER_NESTED)}[name]
    typed, generic = _events_of(path), _events_of(path, generic=True)
    assert typed.keys() == generic.keys()
    for k in typed:
        assert typed[k] == generic[k], k
    assert len(typed["o_name"]) > 0 and len(typed["o_args"]) == len(typed["o_name"])
    if name == "h100":
        assert len(typed["k_name"]) > 1000 and len(typed["l_corr"]) > 1000 and any(typed["o_hta_stream"])
        assert sum("Collective name" in a and "Group size" in a for a in typed["o_args"]) > 10
    # without ops the typed reader skips shapes it does not need, and only them
    lean = _events_of(path, with_ops=False)
    assert lean["o_strides"] == [] and lean["o_types"] == []
    coll = [n.startswith(("c10d::", "gloo:", "nccl:", "rccl:")) or n == "record_param_comms" for n in typed["o_name"]]
    assert lean["o_dims"] == [d if c else None for d, c in zip(typed["o_dims"], coll)]
    if name == "older":  # the nccl:<op> annotations' shapes, which size its collectives
        assert len(typed["a_shapes"]) == 6 and typed["a_shapes"][min(typed["a_shapes"])] == ([[8, 1024, 8816]], ["float"])
    if name not in ("h100", "older"):
        assert any(d for d, c in zip(lean["o_dims"], coll) if c)  # gloo pairing has its shapes
    assert (len(typed["p_name"]) > 0) == (name == "stack")  # user-code Python frames (with_stack)
    shapes = ("o_strides", "o_types", "o_dims")
    assert {k: v for k, v in lean.items() if k not in shapes} == {k: v for k, v in typed.items() if k not in shapes}


def test_odd_args_fall_back_to_the_generic_reader(tmp_path):
    """`args: null` and a list-valued `args` are not what the typed reader expects: the trace still loads
    exactly as the generic reader reads it."""
    import json

    src = json.load(open(os.path.join(GLOO, "rank0.json")))
    ev = src["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    ops[0]["args"] = None  # `args or {}` in the generic reader
    p = tmp_path / "t" / "rank0.json"
    p.parent.mkdir()
    p.write_text(json.dumps(src))
    typed, generic = _events_of(str(p)), _events_of(str(p), generic=True)
    assert typed == generic and typed["o_args"][typed["o_ts"].index(ops[0]["ts"])] == {}
    assert len(load_path(str(p)).collectives) == 9


def test_a_missing_or_unknown_phase_falls_back_to_the_generic_reader(tmp_path):
    """Events are a union tagged by `ph`: an event without `ph`, or of a phase outside the Trace Event
    Format, is rejected by the typed reader; the generic one reads the trace, ignoring such events, so
    the trace loads as if they were absent."""
    import json

    from commscope.load import kineto_events

    src = json.load(open(os.path.join(GLOO, "rank0.json")))
    base = load_path(os.path.join(GLOO, "rank0.json"))
    for i, odd in enumerate(({"name": "no phase", "ts": 1.0}, {"ph": "Z", "name": "odd", "ts": 1.0})):
        doc = dict(src, traceEvents=src["traceEvents"] + [odd])
        p = tmp_path / f"t{i}" / "rank0.json"
        p.parent.mkdir()
        p.write_text(json.dumps(doc))
        with pytest.raises(msgspec.ValidationError):
            kineto_events._DOC.decode(p.read_bytes())
        assert _events_of(str(p)) == _events_of(os.path.join(GLOO, "rank0.json"))
        pd.testing.assert_frame_equal(load_path(str(p)).collectives, base.collectives)


@pytest.mark.parametrize("path", [FIXTURE, *(str(TESTS / "data" / d / h)
                                             for d in ("layout", "layout_h200") for h in ("standard", "transposed"))],
                         ids=lambda p: os.path.relpath(p, str(TESTS)))
def test_ops_in_the_first_pass_equal_the_lazy_second_pass(path):
    """`load_path(with_ops=True)` (the report and layout: one pass) gives the frames of the default load and
    the `ops` frame of its lazy second parse, for Kineto folders and run directories alike."""
    eager, lazy = load_path(path, with_ops=True), load_path(path)
    assert eager.__dict__.get("_ops_loader") is None and lazy.__dict__.get("_ops_loader") is not None
    for kind in ("steps", "collectives", "compute", "regions", "hooks", "kernels"):
        pd.testing.assert_frame_equal(getattr(eager, kind), getattr(lazy, kind))
    assert len(lazy.ops) > 0
    pd.testing.assert_frame_equal(eager.ops, lazy.ops)
    a, b = (3, 5) if eager.source == "kineto" else (0, 10**9)  # a step window slices both the same way
    pd.testing.assert_frame_equal(eager.select_steps((a, b)).ops, lazy.select_steps((a, b)).ops)


def test_dtype_sizes_cover_the_names_kineto_records():
    from commscope.load.frames import dtype_size

    recorded = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8, "long int": 8, "int": 4,
                "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
                "c10::Float8_e5m2": 1, "c10::complex<float>": 8, "torch.bfloat16": 2}
    assert {n: dtype_size(n) for n in recorded} == recorded
    assert np.isnan(dtype_size("TensorList")) and np.isnan(dtype_size(None))


# --- older traces: the collective named by an nccl:<op> range around or inside record_param_comms ------

def _older_trace(tmp_path, nesting: str, generic: bool = False):
    """One rank's trace of torch < 2.1 style: a `record_param_comms` op that names nothing, with an
    `nccl:all_reduce` user annotation (Input Dims [[4, 256]] float) around it (`outer`) or inside it
    (`inner`), and a second, empty `record_param_comms` (a wait: nothing names it)."""
    import json

    rpc = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 100, "dur": 50,
           "args": {"External id": 1}}
    span = (90, 80) if nesting == "outer" else (110, 20)
    nccl = {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": span[0],
            "dur": span[1], "args": {"External id": 2, "Input Dims": [[4, 256]], "Input type": ["float"]}}
    wait = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 300, "dur": 5,
            "args": {"External id": 3}}
    events = [rpc, nccl, wait]
    if generic:  # a phase outside the Trace Event Format sends the document to the generic reader
        events.append({"ph": "Z", "name": "odd", "ts": 1.0})
    p = tmp_path / nesting / "rank0.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"traceEvents": events}))
    return p


@pytest.mark.parametrize("generic", [False, True], ids=["typed", "generic"])
@pytest.mark.parametrize("nesting", ["outer", "inner"])
def test_older_record_param_comms_named_by_an_nccl_range_around_or_inside_it(tmp_path, nesting, generic):
    t = load_path(str(_older_trace(tmp_path, nesting, generic)), workers=1)
    c = t.collectives
    assert c["op"].tolist() == ["all_reduce"] and c["bytes"].tolist() == [4 * 256 * 4]
    assert c["dtype"].tolist() == ["float"] and c["group"].tolist() == ["0"]
    # the empty record (a wait) is left out, and said so once
    assert [p for p in t.problems if "record_param_comms op(s) name no collective" in p] == [
        f"{tmp_path / nesting / 'rank0.json'}: 1 record_param_comms op(s) name no "
        "collective (no 'Collective name', no c10d/nccl op around or inside them) and launched no kernel in the "
        "trace: not counted as collectives"]


def test_hta_trace_with_nccl_ranges_inside_record_param_comms():
    """HTA's distributed_info_unavailable trace: 12 record_param_comms, 6 of them holding an
    nccl:all_to_all range with its input's shape; the other 6 name nothing (waits)."""
    t = load_path(str(OLDER_NESTED.parent), workers=1)
    c = t.collectives
    assert c["op"].tolist() == ["all_to_all"] * 6
    assert c["bytes"].tolist() == [8 * 1024 * 8816 * 4, 1002496 * 4, 15100250 * 4, 1024 * 4, 65687 * 4, 65687 * 4]
    assert c["dtype"].tolist() == ["float", "int", "int", "int", "int", "float"]
    assert any(": 6 record_param_comms op(s) name no collective" in p for p in t.problems)
    # a CPU-only trace: compute is the main thread's top-level ops, record_param_comms (communication's
    # own host ops, launches and waits) not among them, as c10d:: ops are not on gloo traces. From the raw
    # events: the union of the launching thread's ops in the step, less the record_param_comms that no
    # other op holds (10 of the 12, 1.725 ms)
    import gzip
    import json

    from commscope.analyze.summary import summarize

    with gzip.open(OLDER_NESTED) as f:
        events = json.load(f)["traceEvents"]
    step = next(e for e in events if e.get("name", "").startswith("ProfilerStep#"))
    lo, hi = step["ts"], step["ts"] + step["dur"]
    ev = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    tid = {e["tid"] for e in ev if e["name"] == "record_param_comms"}
    assert len(tid) == 1 and t.kernels.empty
    main = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi), e) for e in ev if e["tid"] in tid]
    main = [m for m in main if m[0] < m[1]]
    union, end = 0.0, float("-inf")
    for a, b, _ in sorted(main, key=lambda m: m[0]):
        union += max(0.0, b - max(a, end))
        end = max(end, b)
    held = lambda r: any(o is not r and o["ts"] <= r["ts"] and r["ts"] + r["dur"] <= o["ts"] + o["dur"]  # noqa: E731
                         for _, _, o in main)
    rpc = [b - a for a, b, e in main if e["name"] == "record_param_comms" and not held(e)]
    assert len(rpc) == 10
    doc = summarize(t, with_hta=False)
    assert [s["compute_ms"] for s in doc["steps"]] == [pytest.approx((union - sum(rpc)) / 1e3, abs=2e-3)]
    assert "record_param_comms" not in set(t.compute["name"])


def test_a_kernel_launched_in_a_c10d_op_without_record_param_comms_is_that_op(tmp_path):
    """Some torch versions launch a collective's kernel inside `c10d::_allgather_base_` ⊃ `nccl:_all_gather_base`
    with no `record_param_comms` (HTA's trace_filter traces): the c10d op names it, its arguments size it
    (an all_gather's output: 64 of the input's 16 elements here), its span is the launch call. A kernel whose
    launch is not in the trace is still named from the kernel, launched before the window."""
    import json

    kernel = {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)",
              "pid": 0, "tid": 203, "ts": 200, "dur": 40, "args": {"correlation": 5, "stream": 203, "device": 0}}
    early = dict(kernel, ts=20, dur=10, args={"correlation": 3, "stream": 203, "device": 0})
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 120,
              "dur": 5, "args": {"correlation": 5}}
    c10d = {"ph": "X", "cat": "cpu_op", "name": "c10d::_allgather_base_", "pid": 1, "tid": 1, "ts": 100, "dur": 50,
            "args": {"External id": 1, "Input Dims": [[64], [16], []], "Input type": ["signed char", "signed char", ""]}}
    nccl = {"ph": "X", "cat": "user_annotation", "name": "nccl:_all_gather_base", "pid": 1, "tid": 1, "ts": 110,
            "dur": 30, "args": {"External id": 2, "Input Dims": [[16]], "Input type": ["signed char"]}}
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps({"traceEvents": [early, kernel, launch, c10d, nccl]}))
    c = load_path(str(p), workers=1).collectives.sort_values("start_ns")
    assert c["op"].tolist() == ["send", "all_gather"] and c["label"].tolist() == ["send", "_allgather_base_"]
    assert pd.isna(c["bytes"].iloc[0]) and c["bytes"].iloc[1] == 64 and c["dtype"].iloc[1] == "signed char"
    assert pd.isna(c["call_ns"].iloc[0]) and c["seq"].iloc[0] < 0 <= c["seq"].iloc[1]
    t0 = int(c["start_ns"].iloc[1]) - 200_000  # µs in the trace, ns in the frames
    assert (int(c["call_ns"].iloc[1]) - t0, int(c["return_ns"].iloc[1]) - t0) == (100_000, 150_000)


def test_hta_unseen_comm_kernels_counts_rccl_names_and_names_the_commonest():
    from commscope.load.kineto import hta_unseen_comm_kernels

    k = pd.DataFrame({"name": ["ncclDevKernel_AllReduce", "rcclGenericKernel", "rcclGenericKernel",
                               "rcclKernel_SendRecv", "gemm"], "is_comm": [True, True, True, True, False]})
    assert hta_unseen_comm_kernels(k) == (4, 3, "rcclGenericKernel")
    assert hta_unseen_comm_kernels(k.iloc[[0, 4]]) == (1, 0, None)
    assert hta_unseen_comm_kernels(k.iloc[:0]) == (0, 0, None)


def test_a_host_side_trace_of_a_gpu_job_is_a_cuda_job():
    """hta-testdata distributed_info_unavailable: NCCL all_to_all ranges and no device kernel, from a process
    that saw 8 GPUs (deviceProperties): the job ran on CUDA, which the page's Device says, not "cpu"."""
    host = load_path(str(TESTS / "data" / "hta-testdata" / "distributed_info_unavailable"))
    assert len(host.kernels) == 0 and len(host.config["deviceProperties"]) == 8
    assert host.device == "cuda"


def test_a_step_selection_bounds_each_ranks_ops_by_its_own_steps():
    """--steps A:B keeps A <= step < B on every rank: each rank's cpu ops lie inside its own steps' host
    windows, so the layout findings of steps 10 and 11 add up to those of 10:12 (one window over every rank
    would take a rank that runs ahead into its next step)."""
    from commscope.analyze.layout_report import layout_report

    tr = load_path(FIXTURE, with_ops=True)
    counts = {}
    for window in ((10, 11), (11, 12), (10, 12)):
        sel = tr.select_steps(window)
        ops, steps = sel.ops, sel.steps
        for r, g in ops.groupby("rank"):
            s = steps[steps["rank"] == r]
            assert g["start_ns"].min() >= s["host_start_ns"].min() and g["start_ns"].max() <= s["host_end_ns"].max()
        counts[window] = len(layout_report(sel).findings)
    assert counts[(10, 11)] == counts[(11, 12)] == 8 and counts[(10, 12)] == 16


@pytest.mark.parametrize("props, problem", [
    ("x", "deviceProperties is not a list of objects (ignored)"),
    ([1, "a", None], "deviceProperties entries that are not objects (ignored)"),
    ([{"numSms": "x", "maxThreadsPerMultiprocessor": -1}], None),
])
def test_device_properties_of_the_wrong_type_are_left_out_not_a_traceback(tmp_path, props, problem):
    """deviceProperties is read by the layout's SM contention: a value that is no list of objects is a
    problem of the file (said, and left out), and an SM count that is no count names no device to judge
    by, rather than an AttributeError or ValueError ending `layout`."""
    import json

    from commscope.analyze.contention import device_limits
    from commscope.analyze.layout_report import layout_report

    for f in ("rank0.json", "rank1.json"):
        doc = json.loads(open(os.path.join(GLOO, f)).read())
        doc["deviceProperties"] = props
        (tmp_path / f).write_text(json.dumps(doc))
    tr = load_path(str(tmp_path), with_ops=True)
    said = [p for p in tr.problems if "deviceProperties" in p]
    assert [problem in p for p in said] == ([True, True] if problem else [])  # one line per rank's file
    assert device_limits(tr.config) is None
    assert layout_report(tr).contention_skipped is not None
