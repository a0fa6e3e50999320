"""What a user waits for: whole commands as processes, commscope against HTA, alternating (A B A B).

    python bench/bench_process.py [TRACE_DIR] [--repeats 3] [--json OUT.json]

Default TRACE_DIR: tests/data/modded-nanogpt-8xh100. Each repeat runs, one after the other:
- `commscope report TRACE_DIR --json --no-hta` (a process: interpreter start, CLI import, load, analyze,
  print);
- a Python process that only constructs HTA's `TraceAnalysis(trace_dir=COPY)` on a copy of the same files
  (parsing only; HTA's analyses would come on top);
- `commscope --version` and `commscope --help`: the floor every command pays before doing any work.
Wall time of each process from spawn to exit; the minimum (the least-disturbed run) and the median are
reported with the 1-minute load average, since the machine may be shared. Every process runs from
compiled bytecode, as an installed package does: PYTHONDONTWRITEBYTECODE is cleared for them and their
.pyc files go to a temporary PYTHONPYCACHEPREFIX (removed at the end), written by one untimed run of each.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/data/modded-nanogpt-8xh100"
HTA_CONSTRUCT = ("import os, logging, sys; os.environ['HTA_DISABLE_NS_ROUNDING'] = '1'; logging.disable(logging.WARNING)\n"
                 "from hta.trace_analysis import TraceAnalysis\nTraceAnalysis(trace_dir=sys.argv[1])")


def commscope_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("commscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "commscope"]


def wall(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"bench_process: {argv[:3]} failed ({p.returncode}): {p.stderr.decode()[-400:]}")
    return dt


def stats(xs: list[float]) -> dict:
    return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3), "runs": len(xs)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=str(FIXTURE))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true", help="time commscope's processes only")
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args(argv)
    cs = commscope_cmd()
    cases = {"commscope_report": [*cs, "report", a.path, "--json", "--no-hta"],
             "commscope_version": [*cs, "--version"], "commscope_help": [*cs, "--help"]}
    tmp = tempfile.mkdtemp(prefix="bench-process-")
    try:
        if not a.no_hta:
            copy = os.path.join(tmp, "traces")
            os.mkdir(copy)
            for n in os.listdir(a.path):
                if n.endswith((".json", ".json.gz")):
                    shutil.copy(os.path.join(a.path, n), copy)
            cases["hta_construct"] = [sys.executable, "-c", HTA_CONSTRUCT, copy]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        times: dict[str, list[float]] = {k: [] for k in cases}
        loads = []
        for cmd in cases.values():
            wall(cmd, env)  # page cache and .pyc files warm, untimed
        for _ in range(a.repeats):
            loads.append(os.getloadavg()[0])
            for name, cmd in cases.items():
                times[name].append(wall(cmd, env))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"date": date.today().isoformat(), "machine": f"{os.cpu_count()} cores",
           "command": "python bench/bench_process.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "path": a.path, **{k: stats(v) for k, v in times.items()},
           "load_avg_1min": {"min": round(min(loads), 2), "max": round(max(loads), 2)}}
    if "hta_construct" in times:
        res["hta_over_commscope_min"] = round(min(times["hta_construct"]) / min(times["commscope_report"]), 2)
        res["hta_over_commscope_median"] = round(statistics.median(times["hta_construct"])
                                                 / statistics.median(times["commscope_report"]), 2)
    print(json.dumps(res, indent=1))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
