"""Step windows on device time (commscope.load.device_steps) checked against the raw traces.

On the GPU fixtures the expected values are recomputed here from the JSON events alone (json, gzip and
plain interval arithmetic on integer ns), not through commscope's frames: each kernel's step is the CPU
`ProfilerStep#N` range holding its launch (kernel `correlation` → runtime launch), a step's device window
runs from the first start to the last end of the kernels it launched, and exposed communication per step
is |(∪ communication kernels − ∪ other device activity) ∩ window| on the rank.
"""
import copy
import functools
import gzip
import json
import os
import re

import numpy as np
import pytest

from commscope.analyze.summary import summarize
from commscope.analyze.timeline import step_breakdown
from commscope.load import load_path
from paths import TESTS

DATA = TESTS / "data"
GPU_FIXTURES = ["modded-nanogpt-8xh100", "hta-testdata/trace_filter", "hta-testdata/nccl_parser_config",
                "hta-testdata/triton_example"]
STEP = re.compile(r"^ProfilerStep#(\d+)$")
COMM = re.compile(r"^(nccl|rccl).*Kernel", re.I)
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver", "runtime", "driver")


# --- the expected values, from the raw events ---------------------------------------------------------

def _ns(ts: float, base: int) -> int:
    return int(round(ts * 1000.0)) + base  # Kineto ts in µs on baseTimeNanoseconds (docs/frames.md)


def raw_rank(path: str) -> dict:
    """One rank's file: host steps, launch times by correlation, device events and GPU step annotations,
    all in integer epoch ns."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    host, gpu_ann, launch, dev = {}, {}, {}, []
    for e in sorted((e for e in doc["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"]):
        cat, args = e.get("cat"), e.get("args") or {}
        start = _ns(e["ts"], base)
        end = start + int(round(e.get("dur", 0) * 1000.0))
        m = STEP.match(e["name"])
        if cat == "user_annotation" and m:
            host.setdefault(int(m.group(1)), (start, end))  # the first range of each number
        elif cat == "gpu_user_annotation" and m:
            a, b = gpu_ann.get(int(m.group(1)), (start, end))
            gpu_ann[int(m.group(1))] = (min(a, start), max(b, end))
        elif cat in LAUNCH and "correlation" in args:
            launch[args["correlation"]] = start
        elif cat in DEVICE:
            dev.append({"name": e["name"], "start": start, "end": end, "corr": args.get("correlation"),
                        "comm": bool(COMM.match(e["name"]))})
    for k in dev:
        t = launch.get(k["corr"])
        k["launch"] = t
        k["step"] = next((s for s, (a, b) in host.items() if t is not None and a <= t <= b), -1)
    launched, windows = {}, {}
    for s in host:
        mine = [k for k in dev if k["step"] == s]
        if mine:
            launched[s] = (min(k["start"] for k in mine), max(k["end"] for k in mine))
            # widened to the step's GPU-side annotation where Kineto wrote one
            a, b = gpu_ann.get(s, launched[s])
            windows[s] = (min(a, launched[s][0]), max(b, launched[s][1]))
    return {"host": host, "gpu_ann": gpu_ann, "dev": dev, "launched": launched, "windows": windows}


def union(spans: list) -> list:
    out: list = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def minus(xs: list, ys: list) -> list:
    out = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append([cur, c])
            cur = max(cur, d)
        if cur < b:
            out.append([cur, b])
    return out


def length_within(xs: list, lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in xs)


def exposed_per_step(r: dict) -> dict:
    comm = union([(k["start"], k["end"]) for k in r["dev"] if k["comm"]])
    comp = union([(k["start"], k["end"]) for k in r["dev"] if not k["comm"]])
    exposed = minus(comm, comp)
    return {s: length_within(exposed, a, b) for s, (a, b) in r["windows"].items()}


def host_windowed(trace):
    """A copy of `trace` whose windows are the host's ranges, to show what they would measure (the trace
    itself, cached across tests, is left as it is)."""
    out = copy.copy(trace)
    out.steps = trace.steps.assign(start_ns=trace.steps["host_start_ns"], end_ns=trace.steps["host_end_ns"])
    return out


@functools.cache
def loaded(name: str) -> tuple:
    trace = load_path(str(DATA / name))
    raw = {rank: raw_rank(file) for rank, file in trace.config["files"].items()}
    return name, trace, raw


@pytest.fixture(params=GPU_FIXTURES)
def fixture(request):
    return loaded(request.param)


# --- the GPU fixtures ---------------------------------------------------------------------------------

def test_each_kernel_takes_the_step_that_launched_it(fixture):
    """(a) kernels, compute rows and device collectives carry the step of the CPU range holding the launch."""
    name, trace, raw = fixture
    k = trace.kernels
    for rank, r in raw.items():
        mine = k[k["rank"] == rank]
        got = {(n, int(s), int(e)): int(st) for n, s, e, st in
               zip(mine["name"], mine["start_ns"], mine["end_ns"], mine["step"])}
        launched = [x for x in r["dev"] if x["launch"] is not None]
        assert launched and len(got) == len(r["dev"])
        assert all(got[x["name"], x["start"], x["end"]] == x["step"] for x in launched)
        comp = trace.compute[trace.compute["rank"] == rank]
        want = {(x["start"], x["end"]): x["step"] for x in launched if not x["comm"]}
        assert all(want.get((int(s), int(e)), st) == st for s, e, st in
                   zip(comp["start_ns"], comp["end_ns"], comp["step"]))
        # a device collective (its NCCL kernel) belongs to the step of its kernel's launch
        c = trace.collectives[(trace.collectives["rank"] == rank) & trace.collectives["call_ns"].notna()]
        kstep = {x["start"]: x["step"] for x in launched if x["comm"]}
        assert all(kstep[int(s)] == int(st) for s, st in zip(c["start_ns"], c["step"]))
    if name == "modded-nanogpt-8xh100":
        # kernels launched before the profiler started (step 9's tail) run before step 10's device window:
        # in no step, where the host window of step 10 would have counted them
        early = k[k["launch_ns"].isna()]
        first = trace.steps.groupby("rank")["start_ns"].min()
        assert len(early) > 300 and (early["step"] == -1).all()
        assert (early["start_ns"].to_numpy() < first.loc[early["rank"]].to_numpy()).all()


def test_device_windows_span_the_kernels_each_step_launched(fixture):
    name, trace, raw = fixture
    st = trace.steps
    assert set(st["basis"]) == {"launch-correlation"}
    for rank, r in raw.items():
        mine = st[st["rank"] == rank].set_index("step")
        assert {s: (int(a), int(b)) for s, a, b in zip(mine.index, mine["start_ns"], mine["end_ns"])} == r["windows"]
        assert {s: (int(a), int(b)) for s, a, b in zip(mine.index, mine["host_start_ns"], mine["host_end_ns"])} \
            == r["host"]
        for s, (a, b) in r["gpu_ann"].items():
            # Kineto's GPU-side ProfilerStep starts with the step's first kernel (to the ns rounding) but ends
            # early: it spans only kernels launched on the step's thread outside nested ranges (load.device_steps)
            assert abs(a - r["launched"][s][0]) <= 1 and b < r["launched"][s][1] - 20e6
        if name == "modded-nanogpt-8xh100":
            assert set(r["gpu_ann"]) == set(r["host"])


def test_exposed_communication_per_step_equals_interval_arithmetic(fixture):
    """(b) per rank and step: |(∪ comm kernels − ∪ other device activity) ∩ device window|, within 1 µs."""
    _, trace, raw = fixture
    br = step_breakdown(trace)
    doc = summarize(trace, with_hta=False)
    rows = {(d["rank"], d["step"]): d for d in doc["steps"]}
    for rank, r in raw.items():
        for s, want in exposed_per_step(r).items():
            got = br[(br["rank"] == rank) & (br["step"] == s)]
            assert len(got) == 1 and abs(float(got["exposed_comm_ns"].iloc[0]) - want) <= 1000
            assert abs(rows[rank, s]["exposed_comm_ms"] * 1e6 - want) <= 1000
            a, b = r["windows"][s]
            assert float(got["step_ns"].iloc[0]) == b - a


def test_the_last_steps_device_work_is_in_it(fixture):
    """(c) the last step's window ends with the last kernel it launched, and all its device work counts."""
    name, trace, raw = fixture
    br = step_breakdown(trace)
    for rank, r in raw.items():
        last = max(r["windows"])
        mine = [x for x in r["dev"] if x["step"] == last]
        a, b = r["windows"][last]
        assert all(a <= x["start"] and x["end"] <= b for x in mine)
        row = br[(br["rank"] == rank) & (br["step"] == last)].iloc[0]
        assert int(row["end_ns"]) == max(x["end"] for x in mine)
        comp = union([(x["start"], x["end"]) for x in mine if not x["comm"]])
        assert float(row["compute_ns"]) >= length_within(comp, a, b) > 0
        if name == "modded-nanogpt-8xh100" and rank >= 3:
            # the device runs 30+ ms past the host's last range on ranks 3–7: all of it in step 11
            assert b - r["host"][last][1] > 30e6


def test_h100_old_host_windows_misplace_a_step():
    """On the 8×H100 fixture, ranks 3–7 launch step 11 while the GPU still runs step 10: the host range of
    step 11 measured step 10's exposed communication (5 ms), not step 11's (16 ms)."""
    _, trace, _ = loaded("modded-nanogpt-8xh100")
    new = step_breakdown(trace).set_index(["rank", "step"])["exposed_comm_ns"]
    old = step_breakdown(host_windowed(trace)).set_index(["rank", "step"])["exposed_comm_ns"]
    for rank in range(3, 8):
        assert abs(old[rank, 11] - new[rank, 10]) < 1000  # the same ms, one step late
        assert new[rank, 11] > 15e6 and old[rank, 11] < 6e6
    assert (new - old).abs().max() > 10e6


# --- a hand-made trace: the device one step behind the host ----------------------------------------------

BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def lagging_trace(launches: bool = True, gpu_annotations: bool = False) -> dict:
    """One rank, host steps 0 = [0, 100] µs and 1 = [100, 200] µs. Each step launches a compute kernel and an
    all_reduce; the device runs them one step later: step 0's at 110–150 (compute) and 150–190 (NCCL),
    step 1's at 200–240 and 240–290. A kernel launched before the trace runs at 5–60."""
    ev = [_x("user_annotation", "ProfilerStep#0", 0, 100), _x("user_annotation", "ProfilerStep#1", 100, 100)]
    rpc = {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256, "dtype": "Float",
           "Process Group Name": "0", "Group size": 1}
    for step, (t0, dev0) in enumerate(((10, 110), (110, 200))):
        kc, cc = 10 * step + 1, 10 * step + 2
        ev += [_x("cpu_op", "aten::mm", t0, 5), _x("cpu_op", "record_param_comms", t0 + 10, 5, **rpc),
               _x("kernel", "gemm", dev0, 40, tid=7, stream=7, correlation=kc),
               _x("kernel", NCCL, dev0 + 40, 40 + 10 * step, tid=9, stream=9, correlation=cc)]
        if launches:
            ev += [_x("cuda_runtime", "cudaLaunchKernel", t0 + 1, 2, correlation=kc),
                   _x("cuda_runtime", "cudaLaunchKernel", t0 + 11, 2, correlation=cc)]
        if gpu_annotations:
            ev.append(_x("gpu_user_annotation", f"ProfilerStep#{step}", dev0, 80 + 10 * step, tid=7))
    ev.append(_x("kernel", "early", 5, 55, tid=7, stream=7, correlation=99))
    return {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "baseTimeNanoseconds": BASE,
            "traceEvents": ev}


def _load(tmp_path, doc):
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(doc))
    return load_path(str(p))


def _ms(br, step, col):
    return float(br.loc[br["step"] == step, col].iloc[0]) / 1e6


US = 1000


def test_lagging_device_windows_put_each_step_where_its_kernels_ran(tmp_path):
    tr = _load(tmp_path, lagging_trace())
    st = tr.steps.set_index("step")
    assert st["basis"].tolist() == ["launch-correlation"] * 2
    assert (st["start_ns"] - BASE).tolist() == [110 * US, 200 * US] and (st["end_ns"] - BASE).tolist() == [190 * US,
                                                                                                        290 * US]
    assert (st["host_start_ns"] - BASE).tolist() == [0, 100 * US]
    k = tr.kernels.set_index("name")["step"]
    assert (k["gemm"].tolist(), k[NCCL].tolist(), k["early"]) == ([0, 1], [0, 1], -1)
    assert tr.collectives["step"].tolist() == [0, 1]
    new = step_breakdown(tr)
    # step 0: gemm 40 µs, all_reduce 40 µs exposed; step 1: gemm 40 µs, all_reduce 50 µs exposed
    assert [_ms(new, s, "compute_ns") for s in (0, 1)] == [0.04, 0.04]
    assert [_ms(new, s, "exposed_comm_ns") for s in (0, 1)] == [0.04, 0.05]
    assert [_ms(new, s, "step_ns") for s in (0, 1)] == [0.08, 0.09]

    # the host's ranges measure the wrong work: step 0 sees only the kernel launched before the trace,
    # step 1 sees step 0's kernels, and step 1's own (200–290 µs) fall after every range
    old = step_breakdown(host_windowed(tr))
    assert [_ms(old, s, "compute_ns") for s in (0, 1)] == [0.055, 0.04]
    assert [_ms(old, s, "exposed_comm_ns") for s in (0, 1)] == [0.0, 0.04]
    assert sum(_ms(old, s, "exposed_comm_ns") for s in (0, 1)) < sum(_ms(new, s, "exposed_comm_ns") for s in (0, 1))
    # selecting step 1 keeps the kernels it launched, not the ones running in its host range
    one = tr.select_steps((1, 2))
    assert sorted(one.kernels["start_ns"] - BASE) == [200 * US, 240 * US]


def test_without_launches_the_gpu_annotation_is_the_window(tmp_path):
    tr = _load(tmp_path, lagging_trace(launches=False, gpu_annotations=True))
    st = tr.steps.set_index("step")
    assert st["basis"].tolist() == ["device-annotation"] * 2
    assert (st["start_ns"] - BASE).tolist() == [110 * US, 200 * US] and (st["end_ns"] - BASE).tolist() == [190 * US,
                                                                                                        290 * US]
    # no launch: a kernel takes the device window its start falls in
    k = tr.kernels.set_index("name")["step"]
    assert (k["gemm"].tolist(), k[NCCL].tolist(), k["early"]) == ([0, 1], [0, 1], -1)
    # the NCCL kernels, known by name only (no launch ties them to their record_param_comms)
    c = tr.collectives
    assert c.loc[c["start_ns"].notna(), "step"].tolist() == [0, 1]


def test_a_gpu_annotation_wider_than_the_launched_kernels_widens_the_window(tmp_path):
    doc = lagging_trace(gpu_annotations=True)
    for e in doc["traceEvents"]:
        if e["cat"] == "gpu_user_annotation" and e["name"] == "ProfilerStep#1":
            e["dur"] += 20  # to 310 µs
    st = _load(tmp_path, doc).steps.set_index("step")
    assert st["basis"].tolist() == ["launch-correlation"] * 2
    assert (st["end_ns"] - BASE).tolist() == [190 * US, 310 * US]


@pytest.mark.parametrize("path", ["hta-testdata/distributed_info_unavailable", "cpurun-hooks-gloo2"])
def test_cpu_traces_and_run_directories_keep_host_windows(path):
    tr = load_path(str(DATA / path))
    st = tr.steps
    assert len(st) and set(st["basis"]) == {"host"}
    assert st["start_ns"].equals(st["host_start_ns"]) and st["end_ns"].equals(st["host_end_ns"])
    assert np.array_equal(step_breakdown(tr)["basis"].unique(), ["host"])
