"""Analysis speed: commscope load + analyze vs constructing HTA's TraceAnalysis, side by side, same files.

    python bench/bench_load.py [TRACE_DIR] [--repeats 5] [--hta-repeats 2] [--json out.json]

Default TRACE_DIR: the 8×H100 fixture (/work/shared/fixtures/modded-nanogpt-8xh100). commscope is timed
as `load_path` + `summarize(with_hta=False)` (everything `commscope report --json` computes except HTA);
HTA as `TraceAnalysis(trace_dir=<temp copy>)` (parsing only: its analyses come on top). Runs alternate
(commscope, HTA, commscope, …) so background load hits both alike; the minimum wall time of each is
reported (the least-disturbed run), with the median and the machine's load average next to it.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings

FIXTURE = "/work/shared/fixtures/modded-nanogpt-8xh100"


def machine() -> str:
    cpu = platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def time_commscope(path: str) -> tuple[float, dict]:
    from commscope.analyze.summary import summarize
    from commscope.load import load_path

    t = time.perf_counter()
    doc = summarize(load_path(path), with_hta=False)
    return time.perf_counter() - t, doc


def time_hta(path: str) -> float:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    tmp = tempfile.mkdtemp(prefix="bench-hta-")
    try:
        for n in os.listdir(path):
            if n.endswith((".json", ".json.gz")):
                shutil.copy(os.path.join(path, n), tmp)
        logging.disable(logging.WARNING)
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            TraceAnalysis(trace_dir=tmp)
            return time.perf_counter() - t
    finally:
        logging.disable(logging.NOTSET)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=FIXTURE)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hta-repeats", type=int, default=2)
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args()

    ours, theirs, loads = [], [], []
    time_commscope(a.path)  # warm imports and page cache, untimed
    for i in range(max(a.repeats, a.hta_repeats)):
        loads.append(os.getloadavg()[0])
        if i < a.repeats:
            dt, doc = time_commscope(a.path)
            ours.append(dt)
        if i < a.hta_repeats:
            try:
                theirs.append(time_hta(a.path))
            except ImportError:
                pass
    res = {
        "machine": machine(), "path": a.path, "ranks": doc["ranks"],
        "commscope_s": {"min": round(min(ours), 3), "median": round(statistics.median(ours), 3), "runs": len(ours)},
        "hta_construct_s": ({"min": round(min(theirs), 3), "median": round(statistics.median(theirs), 3),
                             "runs": len(theirs)} if theirs else None),
        "speedup_min_over_min": round(min(theirs) / min(ours), 1) if theirs else None,
        "load_avg_1min": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
    }
    print(json.dumps(res, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
