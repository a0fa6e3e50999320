"""Analysis speed: commscope load + analyze vs constructing HTA's TraceAnalysis, side by side, same files.

    python bench/bench_load.py [TRACE_DIR] [--repeats 5] [--hta-repeats 2] [--json out.json] [--ab-gzip]

Default TRACE_DIR: tests/data/modded-nanogpt-8xh100, two of the four profiled steps of the published 8×H100
traces (docs/benchmarks.md's table was measured on all four: ~27k events per rank). commscope is timed
as `load_path` + `summarize(with_hta=False)` (everything `commscope report --json` computes except HTA);
HTA as `TraceAnalysis(trace_dir=<temp copy>)` (parsing only: its analyses come on top). Runs alternate
(commscope, HTA, commscope, …) so background load hits both alike; the minimum wall time of each is
reported (the least-disturbed run), with the median and the machine's load average next to it. CPU
seconds (this process + reaped worker processes, both tools use a process pool) are reported too: on a
shared, loaded machine they are a steadier basis for the ratio than wall time.

`--ab-gzip` also times commscope with the standard library's gzip instead of python-isal, alternating with
the default in the same process (the before/after of that change; pool workers are forked, so the switch
reaches them).
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

import benchlib
import torch

FIXTURE = benchlib.FIXTURE


def machine() -> str:
    """benchlib's machine line (CPU, torch) plus the versions of the libraries the loaders use."""
    from importlib.metadata import PackageNotFoundError, version

    libs = []
    for lib in ("pandas", "msgspec", "orjson", "isal", "holistictraceanalysis"):
        try:
            libs.append(f"{lib} {version(lib)}")
        except PackageNotFoundError:
            pass
    return f"{benchlib.machine(torch.device('cpu'))}, Python {platform.python_version()}, {', '.join(libs)}"


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@contextlib.contextmanager
def stdlib_gzip():
    import gzip
    import zlib

    from commscope.load import files

    saved = files._zlib, files._gzip
    files._zlib, files._gzip = zlib, gzip
    try:
        yield
    finally:
        files._zlib, files._gzip = saved


def time_commscope(path: str, stdlib: bool = False) -> tuple[float, float, dict]:
    from commscope.analyze.summary import summarize
    from commscope.load import load_path

    with stdlib_gzip() if stdlib else contextlib.nullcontext():
        c, t = cpu(), time.perf_counter()
        doc = summarize(load_path(path), with_hta=False)
        return time.perf_counter() - t, cpu() - c, doc


def time_hta(path: str) -> tuple[float, float]:
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
            c, t = cpu(), time.perf_counter()
            TraceAnalysis(trace_dir=tmp)
            return time.perf_counter() - t, cpu() - c
    finally:
        logging.disable(logging.NOTSET)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=FIXTURE)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hta-repeats", type=int, default=2)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--ab-gzip", action="store_true", help="also time commscope with the stdlib's gzip")
    a = ap.parse_args()

    ours, theirs, loads, ours_cpu, theirs_cpu, stdlib = [], [], [], [], [], []
    time_commscope(a.path)  # warm imports and page cache, untimed
    for i in range(max(a.repeats, a.hta_repeats)):
        loads.append(os.getloadavg()[0])
        if i < a.repeats:
            dt, dc, doc = time_commscope(a.path)
            ours.append(dt)
            ours_cpu.append(dc)
            if a.ab_gzip:
                stdlib.append(time_commscope(a.path, stdlib=True)[0])
        if i < a.hta_repeats:
            try:
                dt, dc = time_hta(a.path)
                theirs.append(dt)
                theirs_cpu.append(dc)
            except ImportError:
                pass
    res = {
        "machine": machine(), "path": a.path, "ranks": doc["ranks"],
        "commscope_s": {"min": round(min(ours), 3), "median": round(statistics.median(ours), 3), "runs": len(ours)},
        "hta_construct_s": ({"min": round(min(theirs), 3), "median": round(statistics.median(theirs), 3),
                             "runs": len(theirs)} if theirs else None),
        "speedup_min_over_min": round(min(theirs) / min(ours), 1) if theirs else None,
        "commscope_cpu_s_min": round(min(ours_cpu), 3),
        "hta_cpu_s_min": round(min(theirs_cpu), 3) if theirs_cpu else None,
        "cpu_ratio": round(min(theirs_cpu) / min(ours_cpu), 1) if theirs_cpu else None,
        "load_avg_1min": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
    }
    if stdlib:
        res["commscope_stdlib_gzip_s"] = {"min": round(min(stdlib), 3), "median": round(statistics.median(stdlib), 3),
                                          "runs": len(stdlib)}
    print(json.dumps(res, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
