"""The GPU benchmark scripts in CPU mode (tiny sizes): they run, write JSON + markdown, and their numbers
are consistent (bytes / time = GB/s, tokens / time = tokens/s) and show the behaviour they measure
(Triton transposes bit-identical to torch, the standard head's first AccumulateGrad copies a strided
gradient, the hooks schedule's reduces leave phase 1). Plus the GPU suite's packing and deadline logic.

The scripts are imported and their `main(argv)` called in-process: one torch import for all of them.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from paths import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def bench(name: str):
    return importlib.import_module(name)


def check_header(result: dict, out: Path, name: str) -> None:
    assert result["device"] == "cpu" and result["machine"] and result["date"]
    assert result["command"].startswith(f"python bench/{name}.py")
    assert json.loads((out / f"{name}.json").read_text()) == result
    md = (out / f"{name}.md").read_text()
    assert md.startswith("## ") and "Machine: " in md


def test_transpose_triton_interpreter_exact_and_bandwidth_consistent(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod = bench("bench_transpose")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--repeats", "1"])
    check_header(r, tmp_path, "bench_transpose")
    assert r["triton_skipped"] is None
    assert [c["shape"] for c in r["cases"]] == [list(s) for s in mod.CPU_SHAPES for _ in mod.DTYPES]
    for case in r["cases"]:
        assert case["triton_exact"] == {"copy": True, "add": True}
        ks = case["kernels"]
        assert set(ks) == {"aligned_copy", "aligned_add", "torch_transpose_copy", "torch_transpose_add",
                           "triton_transpose_copy", "triton_transpose_add"}
        numel, es = math.prod(case["shape"]), 4 if case["dtype"] == "float32" else 2
        for name, k in ks.items():
            assert k["bytes"] == (3 if name.endswith("add") else 2) * numel * es
            assert k["gbps"] == pytest.approx(k["bytes"] / (k["median_ms"] * 1e-3) / 1e9)
        assert ks["aligned_copy"]["pct_of_aligned"] == pytest.approx(100.0)
        assert ks["triton_transpose_add"]["pct_of_aligned"] == pytest.approx(
            100.0 * ks["triton_transpose_add"]["gbps"] / ks["aligned_add"]["gbps"])
    assert r["target_met"] is False  # the interpreter is nowhere near copy bandwidth


def test_transpose_tile_sweep_restores_tiles_checks_exactness_and_ranks(tmp_path, monkeypatch):
    from instrumented_model import kernels

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = dict(kernels.TILES)
    mod = bench("bench_transpose_tiles")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path), "--candidates", "3"])
    check_header(r, tmp_path, "bench_transpose_tiles")
    assert kernels.TILES == before  # each candidate is written into TILES only while it is measured
    # 3 candidates × 2 dtypes × 2 ragged shapes, every one bit-exact (ragged edges masked for every tile)
    assert len(r["rows"]) == 12 and all(row["exact"] for row in r["rows"])
    assert mod.candidates()[:2] == list(dict.fromkeys(kernels.TILES.values()))[:2]  # production tiles first
    assert {tuple(row["tile"]) for row in r["rows"]} == set(mod.candidates()[:3])
    for row in r["rows"]:
        for op in ("copy", "add"):
            assert row[op]["pct_of_aligned"] == pytest.approx(100.0 * row[op]["aligned_ms"] / row[op]["ms"])
    for dt, ranked in r["ranking"].items():
        assert len(ranked) == 3
        worst = [x["worst_pct"] for x in ranked]
        assert worst == sorted(worst, reverse=True)
        assert worst[0] == pytest.approx(min(ranked[0]["copy_pct"] + ranked[0]["add_pct"]))


def test_transpose_without_interpreter_skips_triton_rows(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    r = bench("bench_transpose").main(["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--repeats", "1"])
    assert r["triton_skipped"] and not r["target_met"]
    assert all(c["triton_exact"] is None and not any(k.startswith("triton") for k in c["kernels"]) for c in r["cases"])


def test_loss_kernels_bench_checks_layouts_restores_tiles_and_compares_tanh(tmp_path, monkeypatch):
    from instrumented_model import kernels
    from instrumented_model import softcap_ce as sc

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = (dict(kernels.TILES), sc.fast_tanh, sc.hw_e5m2_rounding)
    mod = bench("bench_loss_kernels")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path)])
    check_header(r, tmp_path, "bench_loss_kernels")
    assert (dict(kernels.TILES), sc.fast_tanh, sc.hw_e5m2_rounding) == before  # patched only while measured
    assert r["shape"] == list(mod.CPU_SHAPE) and r["bytes_moved"] == 4 * math.prod(mod.CPU_SHAPE)
    assert r["op_exact"] and [t["tile"] for t in r["transpose_tiles"]] == [list(t) for t in mod.SPLIT_TRANSPOSE_TILES]
    assert all(t["exact"] for t in r["transpose_tiles"])
    # the interpreter has neither the hardware tanh nor the hardware e5m2 conversion: both sides run the same code
    t = r["tanh"]
    assert not t["fast"]["hardware_tanh"] and t["loss_diff_fast_vs_exact"] == 0 and t["dz_rel_l2_diff"] == 0
    assert abs(t["loss_diff_exact_vs_fp32_torch"]) < 1e-5 * t["ref_loss"]
    assert not r["e5m2_rounding"]["hardware"]["used"] and r["e5m2_rounding"]["bytes_differing"] == 0
    assert "% of copy bandwidth" in (tmp_path / "bench_loss_kernels.md").read_text()


def test_head_layout_standard_head_copies_then_adds_strided(tmp_path):
    r = bench("bench_head_layout").main(["--device", "cpu", "--out", str(tmp_path), "--tokens", "16",
                                         "--warmup", "0", "--repeats", "1"])
    check_header(r, tmp_path, "bench_head_layout")
    assert (r["vocab"], r["dim"]) == (512, 64)
    assert len(r["kernels"]) == 6 and {k["dtype"] for k in r["kernels"]} == {"float32", "bfloat16"}
    for k in r["kernels"]:
        assert k["bytes"] == (2 if "copy_" in k["case"] else 3) * 512 * 64 * (4 if k["dtype"] == "float32" else 2)
    assert [k["x_aligned_add"] for k in r["kernels"] if "aligned" in k["case"]] == [1.0, 1.0]

    prof = {p["layout"]: p for p in r["profile"]}
    assert prof["transposed"]["weight_shape"] == [64, 512] and prof["standard"]["weight_shape"] == [512, 64]
    for p in prof.values():
        assert [m["micro_step"] for m in p["micro_steps"]] == [0, 1]
        assert "aten::add_" in p["micro_steps"][1]["ops"]  # second micro-step accumulates
        assert p["grad_strides"] == [p["weight_shape"][1], 1]  # .grad ends in the weight's layout
    # First micro-step: the transposed head's gradient already has the weight's layout and is taken as
    # is; the standard head's arrives as a transpose view and is copied into the weight's layout.
    assert "aten::copy_" not in prof["transposed"]["micro_steps"][0]["ops"]
    assert "aten::copy_" in prof["standard"]["micro_steps"][0]["ops"]
    assert bench("bench_head_layout").kernel_kind("void at::native::vectorized_elementwise_kernel<4, X>") == "vectorized"
    assert bench("bench_head_layout").kernel_kind("void at::native::elementwise_kernel<128, 2, X>") == "non-vectorized"


def test_optimizer_phases_and_schedules(tmp_path):
    r = bench("bench_optimizer").main(["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--steps", "1"])
    check_header(r, tmp_path, "bench_optimizer")
    assert (r["backend"], r["world_size"], r["preset"]) == ("gloo", 1, "tiny")
    by = {s["schedule"]: s for s in r["schedules"]}
    assert set(by) == {"explicit", "hooks"}
    from instrumented_model.model import LABELS

    tied_updates = {f"update:{lb}" for lb in LABELS if lb != "embed"}  # embed is tied to lm_head
    for s in by.values():
        regions = set(s["host_ms"])
        assert {"backward", "optimizer", "opt.phase1", "opt.phase2", "opt.phase3"} <= regions
        assert {n for n in regions if n.startswith("update:")} == tied_updates
        assert s["device_ms"] is None and all(v > 0 for v in s["host_ms"].values())
        assert s["host_ms"]["optimizer"] >= s["host_ms"]["opt.phase2"] >= s["host_ms"]["update:attn"]
        assert sum(s["numel"].values()) > 0


def test_throughput_eager_in_process_and_timeout_record(tmp_path):
    mod = bench("bench_throughput")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path), "--in-process", "--warmup", "0", "--steps", "2",
                  "--batch-size", "2"])
    check_header(r, tmp_path, "bench_throughput")
    (v,) = r["variants"]
    assert (v["variant"], v["backend"], v["tokens_per_step"]) == ("eager", "gloo", 2 * 64)
    # two timed steps: their median is their mean, so tokens/s × median step time is one step's tokens
    assert v["tokens_per_s"] * v["median_step_ms"] / 1e3 == pytest.approx(v["tokens_per_step"], rel=1e-9)
    assert abs(v["loss_first"] - math.log(512)) < 0.5  # the tied head starts near uniform logits
    assert v["compile_s"] is None
    m = v["modes"]
    assert list(m) == ["synced", "pipelined", "accum8"] and m["synced"]["tokens_per_s"] == v["tokens_per_s"]
    for k, mode in m.items():  # each loop's tokens/s is its tokens per step over its step time
        assert mode["tokens_per_s"] * mode["step_ms"] / 1e3 == pytest.approx(mode["tokens_per_step"], rel=1e-9)
    assert (m["accum8"]["grad_accum"], m["accum8"]["tokens_per_step"]) == (8, 8 * 2 * 64)
    assert 0 < v["loss_last_accum8"] < v["loss_first"]  # the accumulated steps keep training the model
    assert v["learns"] and v["learns"] == (v["loss_last_accum8"] < mod.LEARNS_RATIO * v["loss_first"])
    assert r["best_tokens_per_s"] == {k: mode["tokens_per_s"] for k, mode in m.items()}
    assert r["target_met"] == {k: False for k in m}
    md = (tmp_path / "bench_throughput.md").read_text()
    cell = mod.md_table(["x"], [[m["accum8"]["tokens_per_s"]]]).splitlines()[-1].strip("| ")
    assert "tokens/s accum8" in md and f"| {cell} |" in md
    # a variant whose loss does not fall (e.g. a Gram-space Polar Express) cannot meet the target
    fast = {**v, "learns": False, "modes": {k: {**mode, "tokens_per_s": 1e9} for k, mode in m.items()}}
    best, met = mod.best_per_mode([v, fast, {"variant": "x", "error": "timed out"}])
    assert best == r["best_tokens_per_s"] and met == {k: False for k in m}
    assert mod.best_per_mode([fast])[0] == {k: None for k in m}
    assert mod.learns(11.58, 0.35) and not mod.learns(11.58, 10.83)
    # A variant past its time limit becomes a record, not a crash.
    rec = mod.run_isolated("eager", ["--device", "cpu"], timeout=0.05)
    assert rec == {"variant": "eager", "error": "timed out after 0 s"}


def test_idle_gaps_charge_each_wait_to_the_kernel_that_ends_it():
    mod = bench("bench_step_kernels")
    # a: 0-10, b overlaps a (no gap), c waits 5 µs after b, a again waits 20 µs, d follows within 1 µs
    spans = [(0, 10, "a"), (8, 12, "b"), (17, 20, "c"), (40, 41, "a"), (41.5, 50, "d")]
    rows = mod.idle_gaps(spans, steps=2, top=5)
    assert rows == [{"next_kernel": "a", "ms_per_step": 20 / 1e3 / 2, "gaps_per_step": 0.5},
                    {"next_kernel": "c", "ms_per_step": 5 / 1e3 / 2, "gaps_per_step": 0.5}]
    assert mod.idle_gaps([], steps=1, top=5) == []


def test_launched_by_names_the_host_ops_around_each_matching_launch():
    from types import SimpleNamespace as NS

    mod = bench("bench_step_kernels")
    to = NS(name="aten::to", cpu_parent=None, kernels=[])
    copy = NS(name="aten::copy_", cpu_parent=to, kernels=[])
    memcpy = NS(name="cudaMemcpyAsync", cpu_parent=copy, kernels=[NS(name="Memcpy DtoD (Device -> Device)")])
    mm = NS(name="cudaLaunchKernel", cpu_parent=NS(name="aten::mm", cpu_parent=None, kernels=[]),
            kernels=[NS(name="nvjet_sm90_tst")])
    events = [to, copy, memcpy, memcpy, mm]  # two launches from the same chain in 2 steps
    assert mod.launched_by(events, r"^Memcpy DtoD", steps=2) == {
        "Memcpy DtoD (Device -> Device)": {"cudaMemcpyAsync < aten::copy_ < aten::to": 1.0}}
    assert mod.launched_by(events, r"^Memcpy DtoD", steps=2, depth=2) == {
        "Memcpy DtoD (Device -> Device)": {"cudaMemcpyAsync < aten::copy_": 1.0}}
    assert mod.launched_by(events, r"nothing", steps=1) == {}


def test_step_kernels_counts_every_op_once_by_category(tmp_path):
    mod = bench("bench_step_kernels")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--steps", "1", "--top", "50"])
    check_header(r, tmp_path, "bench_step_kernels")
    cats = r["by_category_ms"]
    assert sum(cats.values()) == pytest.approx(r["kernel_ms_per_step"], rel=1e-9)
    assert cats["matmul"] > 0 and cats["attention"] > 0 and cats["head softcap + cross-entropy"] > 0
    assert list(cats.values()) == sorted(cats.values(), reverse=True)
    for k in r["top_kernels"]:
        assert k["category"] == mod.category(k["name"])
    # kernel names as the H200 profiler writes them land in the intended category
    assert mod.category("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT") == "matmul"
    assert mod.category("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd") == "attention"
    assert mod.category("triton_red_fused__log_softmax_tanh_div_mul_0") == "head softcap + cross-entropy"
    assert mod.category("softcap_ce_bwd") == "head softcap + cross-entropy"  # the fused loss kernels
    assert sum(r["all_kernels_ms"].values()) == pytest.approx(r["kernel_ms_per_step"], rel=1e-9)
    assert mod.category("ncclDevKernel_AllGather_RING_LL") == "communication"
    assert mod.category("adam_cautious") == "optimizer elementwise"
    assert mod.category("triton_poi_fused_add_mul_rsqrt_7") == "other"


def test_suite_collect_packs_small_files_and_fitting_traces(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "results").mkdir(parents=True)
    (work / "results" / "a.json").write_text('{"x": 1}')
    (work / "results" / "cli_broken.json").write_text("Traceback: boom")
    (work / "results" / "a.md").write_text("## A\n")
    rank = work / "runs" / "run1" / "rank0"
    rank.mkdir(parents=True)
    (rank / "events.jsonl").write_text("{}\n")
    (rank / "trace.json.gz").write_bytes(os.urandom(300_000))
    (work / "runs" / "run1" / "rank1").mkdir()
    (work / "runs" / "run1" / "rank1" / "trace.json.gz").write_bytes(os.urandom(900_000))
    bench("suite_collect").main(["--work", str(work), "--out", str(out), "--max-mb", "1"])

    merged = json.loads((out / "bench_results.json").read_text())
    assert merged["a"] == {"x": 1} and merged["cli_broken"]["error"] == "not valid JSON"
    assert (out / "bench.md").read_text() == "## A\n"
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = set(tar.getnames())
        manifest = tar.extractfile("runs/MANIFEST.txt").read().decode()
    # 1 MiB budget: the small file and the smaller trace fit, the larger trace is listed as left out
    assert names == {"runs/MANIFEST.txt", "runs/run1/rank0/events.jsonl", "runs/run1/rank0/trace.json.gz"}
    assert "LEFT OUT\t900000\truns/run1/rank1/trace.json.gz" in manifest


def test_gpu_suite_skips_steps_past_its_deadline(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "SUITE_WORK": str(tmp_path / "work"),
           "SUITE_BUDGET_S": "0", "SUITE_SKIP_WHEELS": "1"}
    proc = subprocess.run(["bash", str(BENCH / "gpu_suite.sh"), "runs"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    steps = (tmp_path / "out" / "steps.txt").read_text().splitlines()
    assert steps[0] == "env SKIPPED (suite deadline)"
    assert "run_ws1 SKIPPED (suite deadline)" in steps and "hooks_gloo4 SKIPPED (suite deadline)" in steps
    bad = subprocess.run(["bash", str(BENCH / "gpu_suite.sh"), "nonsense"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "group must be" in bad.stderr


def test_suite_collect_drops_traces_until_the_archive_fits(tmp_path, monkeypatch):
    mod = bench("suite_collect")
    monkeypatch.setattr(mod, "RETURN_LIMIT", 500_000)
    work = tmp_path / "work"
    for rank, size in ((0, 300_000), (1, 900_000)):
        (work / "runs" / "r" / f"rank{rank}").mkdir(parents=True)
        (work / "runs" / "r" / f"rank{rank}" / "trace.json.gz").write_bytes(os.urandom(size))
    mod.collect(work, tmp_path / "out", max_mb=2)  # both traces fit the budget, not the return limit
    archive = tmp_path / "out" / "runs.tar.gz"
    assert archive.stat().st_size <= 500_000
    with tarfile.open(archive) as tar:
        assert set(tar.getnames()) == {"runs/MANIFEST.txt", "runs/r/rank0/trace.json.gz"}


def test_bench_revs_runs_each_command_on_both_trees_and_reads_printed_figures(tmp_path):
    """A command printing a number is timed by that number; the revision's tree is the working directory
    of its runs (here: HEAD's bench/ has bench_revs.py too), and the worktree is removed afterwards."""
    before = subprocess.run(["git", "worktree", "list"], cwd=BENCH.parent, capture_output=True, text=True).stdout
    proc = subprocess.run([sys.executable, str(BENCH / "bench_revs.py"), "HEAD", "--repeats", "2",
                           "printed=echo 1.25", "tree=test -f bench/bench_revs.py && echo 2.5"],
                          cwd=BENCH.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert "1.250 / 1.250 | 1.250 / 1.250" in rows["printed"] and "2.500 / 2.500 | 2.500 / 2.500" in rows["tree"]
    after = subprocess.run(["git", "worktree", "list"], cwd=BENCH.parent, capture_output=True, text=True).stdout
    assert after == before


@pytest.mark.parametrize("workload", ["trainer", "linear"])
def test_record_overhead_interleaves_modes_and_normalizes_to_plain(capsys, workload):
    bench("bench_record_overhead").main(["--workload", workload, "--rounds", "2", "--steps-per-round", "1",
                                         "--warmup", "1"])
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [float(x) for x in line.split("|")[2:6]]
            for line in out.splitlines() if line.startswith("| ") and line.split("|")[1].strip() in
            ("plain", "light", "profiler")}
    assert list(rows) == ["plain", "light", "profiler"]
    assert rows["plain"][1] == 1.0 and rows["plain"][3] == 1.0  # ratios are to plain, per round
    assert all(r[0] > 0 and r[1] > 0 for r in rows.values())
    assert ("reference trainer, eager, preset tiny" in out) == (workload == "trainer")
    # the records light recording wrote per step: one hook per label and micro-step (the trainer takes one
    # micro-step here, the Linear chain two), one step record; the Linear chain's 13 + 1 collectives
    cost = next(line for line in out.splitlines() if line.startswith("Where light recording's cost goes"))
    assert ("13.0 hook" if workload == "trainer" else "26.0 hook") in cost and "1.0 step" in cost
    assert workload == "trainer" or "14.0 collective" in cost
    # on CPU no record is resolved inside the step: the step end has every record of the step
    total = float(cost.split(": ")[1].split(" records")[0])
    split = next(line for line in out.splitlines() if line.startswith("Records resolved inside the step"))
    assert split.endswith(f": 0; left to the step end: {total:.0f} (medians).")


def test_polar_express_bench_times_both_banks_and_derives_bandwidth(tmp_path):
    mod = bench("bench_polar_express")
    r = mod.main(["--device", "cpu", "--out", str(tmp_path), "--repeats", "2"])
    check_header(r, tmp_path, "bench_polar_express")
    rows = {row["label"]: row for row in r["rows"]}
    assert rows["attn"]["shape"] == [24, 64, 64] and rows["mlp"]["shape"] == [16, 256, 64]  # tiny banks' views
    for row in rows.values():
        n = math.prod(row["shape"])
        assert row["bytes"] == n * (4 + 4)  # fp32 in, fp32 out (CPU iterates in fp32)
        assert row["torch.div_gb_s"] == pytest.approx(row["bytes"] / row["torch.div_ms"] / 1e6)
        assert row["polar_express_ms"] > row["torch.div_ms"] > 0
        assert row["divide_per_matrix_ms"] is None  # the Triton kernel is timed on a GPU only


def test_pipelined_losses_reads_every_loss_in_order_and_times_each_step():
    lib = bench("benchlib")
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"

    def step(s):
        if cuda:
            torch.cuda._sleep(int(3e7))  # ~15 ms of device work per step
        return torch.full((), float(s), device=dev)

    waits, periods = [], []
    assert lib.pipelined_losses(step, range(3, 8), waits, periods, torch.device(dev)) == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert len(waits) == 4 and all(w >= 0 for w in waits)  # every read but the last
    if cuda:  # one device period per step, each at least its own device work
        assert len(periods) == 5 and min(periods) > 5.0, periods
    else:
        assert periods == []


def test_step_gaps_reports_the_gaps_between_steps_and_the_stack_inside_the_longest(tmp_path, capsys):
    """bench/step_gaps.py: steps 0-3 with gaps of 1 ms and 12 ms; stack samples inside the 12 ms gap name
    where the host was, samples outside it do not count."""
    run, probe = tmp_path / "run", tmp_path / "probe"
    (run / "rank0").mkdir(parents=True)
    probe.mkdir()
    ms = 1_000_000
    bounds = [(0, 80), (81, 161), (173, 253), (254, 334)]  # gaps before steps 2 and 3: 12 ms and 1 ms
    (run / "rank0" / "events.jsonl").write_text("".join(
        json.dumps({"kind": "step", "rank": 0, "step": s, "start_ns": a * ms, "end_ns": b * ms}) + "\n"
        for s, (a, b) in enumerate(bounds)))
    (run / "progress.jsonl").write_text("".join(
        json.dumps({"event": "step", "step": s, "step_ms": ms_}) + "\n" for s, ms_ in enumerate([900, 81, 92, 81])))
    (probe / "stacks_1.txt").write_text(
        "".join(f"{t * ms} data.py:84:global_batch < train.py:290:train\n" for t in (163, 165, 170))
        + f"{100 * ms} model.py:10:forward < train.py:300:train\n")
    bench("step_gaps").main([str(run), "--stacks", str(probe), "--top", "1"])
    out = capsys.readouterr().out
    assert "step period median 81.0 ms, mean 84.7, max 92.0" in out
    assert "gaps between steps median 6.50 ms, max 12.00" in out
    assert "gap before step 2: 12.0 ms; main thread: [('data.py:84:global_batch', 3)]" in out
    assert "gap before step 3" not in out and "model.py" not in out


def test_memory_bench_pads_the_traces_and_gets_one_answer_under_either_parse_budget(tmp_path, capsys):
    r = bench("bench_memory").main(["--events", "5000", "--jsonl-mb", "2", "--work", str(tmp_path),
                                    "--json", str(tmp_path / "mem.json")])
    assert json.loads((tmp_path / "mem.json").read_text()) == r
    cases = {c["case"]: c for c in r["cases"]}
    assert all(c["rc"] == 0 and not c["timed_out"] and c["max_rss_mb"] > 0
               for c in cases.values()), cases
    # the parse budget changes when traces are parsed, never what is reported
    assert cases["report --json (default budget)"]["stdout_sha256"] == \
        cases["report --json (PARSE_MB=2048)"]["stdout_sha256"]
    # each padding event is one line of the trace: 5,000 of them add at least 5,000 × 80 bytes a rank
    pad = [p.stat().st_size for p in sorted((tmp_path / "kineto").glob("rank*.json"))]
    assert pad == r["kineto_trace_bytes"] and min(pad) > 5000 * 80
    doc = json.loads((tmp_path / "kineto" / "rank0.json").read_text())
    assert sum(e.get("tid") == 987654 for e in doc["traceEvents"]) == 5000
    assert abs(r["events_jsonl_bytes"] - 2 * 2**20) < 40_000 and (tmp_path / "out.perfetto.json.gz").stat().st_size > 0


@pytest.mark.parametrize("flush", ["step", "overlap"])
def test_hostcost_runs_the_cuda_branch_with_fake_events(flush):
    """bench_record_hostcost.py stands a fake CUDA in for the recorder's CUDA branch on a CPU machine: one
    event recorded per region end and collective end, one anchor per step, one synchronize per step, each
    event resolved once, and pooled (no new event per step once warm)."""
    p = subprocess.run([sys.executable, str(BENCH / "bench_record_hostcost.py"), "--steps", "6", "--warmup", "2",
                        "--flush", flush], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    calls = next(line for line in p.stdout.splitlines() if line.startswith("CUDA event calls per step"))
    # 20 regions and 14 collectives, two stamps each, plus the step's anchor; every stamp but the anchor resolved
    assert "record 69," in calls and "elapsed_time 68" in calls and "synchronize 1," in calls, calls
    assert "create 0," in calls or "create 1," in calls, calls
