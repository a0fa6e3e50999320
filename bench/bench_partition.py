"""Bank vs alpha-lpt optimizer partition: per-rank NorMuon update time and the gather wait it causes.

Why: with the bank's even split every rank updates the same number of matrices of a bank, but not the
same work (the mlp bank's padding matrices are free on the ranks that hold them, attn and mlp matrices
cost differently), so the all_gather of the updated weights waits for the busiest rank. The alpha-lpt
partition (commscope.plan) balances the Polar Express flops. This script trains the reference model
once per partition with `commscope run` (same seed, steps, ranks) and reads the two run directories back
with commscope.load:

- update ms: per rank and step, the summed `update:attn` + `update:mlp` region time (median over steps,
  step 0 dropped: warm-up);
- gather wait ms: per rank and step, the time the rank blocked in `wait()` on the attn/mlp all_gathers
  (median over steps) — on the least loaded rank this is mostly waiting for the busiest one;
- arrival skew ms: per step, the spread of the ranks' launch times of those all_gathers (last − first,
  summed over the two banks; median over steps) — the imbalance itself, seen from the collectives;
- planned load: the planner's per-rank Polar Express GFLOP for the partition (what it balances).

Run: python bench/bench_partition.py --out OUT [--nproc 4 --steps 8 --preset tiny --device cpu]
     python bench/bench_partition.py --out OUT --bank-run RUN --alpha-run RUN   (analyze existing runs,
     e.g. the GPU suite's run_gloo4 and run_gloo4_alpha; --nproc and --preset must match them)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import benchlib  # noqa: F401  (puts the repo on sys.path)
import torch

from benchlib import header, md_table, provenance_line, write_results

PARTITIONS = ("bank", "alpha-lpt")
BANKS = ("attn", "mlp")


def run_partition(partition: str, run_dir: Path, args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "commscope", "run", "--nproc", str(args.nproc), "--steps", str(args.steps),
           "--preset", args.preset, "--device", args.device, "--optimizer-partition", partition,
           "--out", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # ranks share the cores: no intra-op thread contention
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def planned_gflop(partition: str, world_size: int, preset: str) -> list[float]:
    """The planner's per-rank load (padding work included) in GFLOP, as `commscope plan` evaluates it."""
    from commscope.plan import evaluate_strategy, matrices_for_config
    from instrumented_model.config import make_config

    ms = matrices_for_config(make_config(preset, world_size))
    name = "bank" if partition == "bank" else "alpha_lpt"
    return [x / 1e9 for x in evaluate_strategy(name, ms, world_size, cost="flops")["per_rank_load"]]


def analyze(run_dir: Path) -> dict:
    """Per-rank medians over steps (step 0 dropped) of update ms and gather wait ms; skew per step."""
    from commscope.analyze.skew import launch_skew
    from commscope.load import load_path

    trace = load_path(str(run_dir))
    reg = trace.regions
    reg = reg[reg["name"].isin([f"update:{b}" for b in BANKS]) & (reg["step"] > 0)]
    update = ((reg["end_ns"] - reg["start_ns"]) / 1e6).groupby([reg["rank"], reg["step"]]).sum()
    coll = trace.collectives
    gathers = coll[coll["label"].isin(BANKS) & (coll["phase"] == "gather") & (coll["step"] > 0)]
    wait = ((gathers["wait_end_ns"] - gathers["wait_ns"]) / 1e6).astype(float)
    wait = wait.groupby([gathers["rank"], gathers["step"]]).sum()
    skew = launch_skew(gathers)
    skew_ms = (skew.groupby("step")["skew_ns"].sum() / 1e6).median() if len(skew) else float("nan")
    ranks = sorted(trace.ranks)
    update_ms = [float(update.xs(r, level="rank").median()) for r in ranks]
    wait_ms = [float(wait.xs(r, level="rank").median()) for r in ranks]
    opt = trace.regions[(trace.regions["name"] == "optimizer") & (trace.regions["step"] > 0)]
    opt_ms = ((opt["end_ns"] - opt["start_ns"]) / 1e6).groupby(opt["rank"]).median()
    return {"update_ms": update_ms, "gather_wait_ms": wait_ms, "optimizer_ms": [float(opt_ms[r]) for r in ranks],
            "gather_skew_ms": float(skew_ms),
            "update_max_over_mean": max(update_ms) / (sum(update_ms) / len(update_ms))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--bank-run", default=None, help="existing run dir of the bank partition (skips running)")
    p.add_argument("--alpha-run", default=None, help="existing run dir of the alpha-lpt partition")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    given = {"bank": args.bank_run, "alpha-lpt": args.alpha_run}
    if (args.bank_run is None) != (args.alpha_run is None):
        p.error("give both --bank-run and --alpha-run, or neither")
    result = {**header(torch.device(args.device), "bench_partition.py", argv), "nproc": args.nproc,
              "steps": args.steps, "preset": args.preset, "partitions": {}}
    rows = []
    for part in PARTITIONS:
        run_dir = Path(given[part]) if given[part] else Path(args.out) / "runs" / part
        if not given[part]:
            run_partition(part, run_dir, args)
        res = analyze(run_dir)
        res["run_dir"] = str(run_dir)
        res["planned_gflop"] = planned_gflop(part, args.nproc, args.preset)
        result["partitions"][part] = res
        for r in range(args.nproc):
            rows.append([part, r, res["planned_gflop"][r], res["update_ms"][r], res["gather_wait_ms"][r],
                         res["optimizer_ms"][r]])
        rows.append([part, "max/mean", None, res["update_max_over_mean"], None, None])
        rows.append([part, "gather arrival skew ms/step", None, None, res["gather_skew_ms"], None])
    table = md_table(["partition", "rank", "planned GFLOP", "update ms (attn+mlp)", "gather wait ms",
                      "optimizer ms"], rows)
    md = f"{table}\n\n{provenance_line(result)} Medians over steps 1..{args.steps - 1}.\n"
    write_results(args.out, "bench_partition", result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
