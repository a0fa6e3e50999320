"""Report page and Perfetto-export cost: render time, page weight by part, output sizes.

Usage: python bench/bench_report.py [TRACE_DIR] [--ranks N [--straggler R] [--desync R]] [--no-perfetto]
                                   [--hta] [--every-rank-ops]
    TRACE_DIR defaults to tests/data/modded-nanogpt-8xh100, and with --ranks to
    tests/data/cpurun-hooks-gloo2.

Copies the input to a temporary folder first (inputs are never written next to), or with --ranks writes
an N-rank job made from it by bench/gen_job.py there (deleted afterwards; 1024 ranks of the CPU run are
445 MB), loads it once as `commscope report` does (ops in the loading pass up to PAGE_ALL_RANKS profiler
traces; above, the layout section parses its ranks' ops inside the report's analyses; `--every-rank-ops`:
every rank's in the loading pass, as `commscope layout` loads), then times
summarize (without HTA), the report's analyses (report_context), the HTML page and the Perfetto document,
and prints the sizes: the page's total and each part (the inlined plotly.js, every section, the
compressed data the page's script draws at scale). Peak RSS is the process's.
The machine is printed with the numbers so figures quoted elsewhere can name it.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

from commscope.analyze.left_in_flight import left_in_flight
from commscope.analyze.report_context import PAGE_ALL_RANKS, report_context
from commscope.analyze.summary import summarize
from commscope.load import load_path
from reports.page import render_html
from reports.perfetto import build_perfetto

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "modded-nanogpt-8xh100"
DEFAULT_SCALE = ROOT / "tests" / "data" / "cpurun-hooks-gloo2"


def page_parts(page: str) -> list[tuple[str, int]]:
    """(part, bytes) of a page: the head (CSS, scripts, plotly.js), each section, and within them each
    compressed data block (`<script type="application/gzip-base64" id=...>`)."""
    marks = [(m.start(), m.group(2)) for m in re.finditer(r'<(section|details) id="([^"]+)"', page)]
    parts = [("head (plotly.js, CSS, report.js)", marks[0][0] if marks else len(page))]
    for (a, name), (b, _) in zip(marks, marks[1:] + [(len(page), "")]):
        parts.append((f"section {name}", b - a))
    for m in re.finditer(r'<script type="application/gzip-base64" id="([^"]+)">([^<]*)<', page):
        parts.append((f"  data {m.group(1)}", len(m.group(2))))
    return parts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="?")
    ap.add_argument("--ranks", type=int, help="generate a job of this many ranks from SRC (bench/gen_job.py)")
    ap.add_argument("--straggler", type=int, help="with --ranks: the rank that stalls (default 2N/3 + 1)")
    ap.add_argument("--desync", type=int, help="with --ranks: also plant a desync on this rank (a second fault: "
                    "the page lists and draws its rank too)")
    ap.add_argument("--no-perfetto", action="store_true", help="skip the Perfetto document")
    ap.add_argument("--hta", action="store_true", help="run HTA's analyses too (its views are on the page)")
    ap.add_argument("--every-rank-ops", action="store_true", help="parse every rank's ops while loading, "
                    "whatever the number of ranks (the cost the report avoids above PAGE_ALL_RANKS)")
    args = ap.parse_args(argv)
    src = Path(args.src) if args.src else (DEFAULT_SCALE if args.ranks else DEFAULT)
    with tempfile.TemporaryDirectory() as tmp:
        if args.ranks:
            sys.path.insert(0, str(ROOT / "bench"))
            import gen_job

            straggler = args.straggler if args.straggler is not None else 2 * args.ranks // 3 + 1
            copy = Path(gen_job.generate(src, Path(tmp) / "gen", args.ranks, straggler=straggler,
                                         desync=args.desync)["job"])
        else:
            copy = Path(tmp) / src.name
            shutil.copytree(src, copy)
        t = time.perf_counter()
        trace = load_path(copy, with_ops=True, with_ops_up_to=None if args.every_rank_ops else PAGE_ALL_RANKS)
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        summary = summarize(trace, with_hta=args.hta)
        t_sum = time.perf_counter() - t
        t = time.perf_counter()
        ctx = report_context(trace, summary)
        t_ctx = time.perf_counter() - t
        t = time.perf_counter()
        page = render_html(ctx)
        t_page = time.perf_counter() - t
        size = len(page.encode())
        t_pf, perfetto = None, None
        if not args.no_perfetto:
            t = time.perf_counter()
            # timed with its analysis, as `commscope export` runs both
            perfetto = orjson.dumps(build_perfetto(trace, left_in_flight(trace)), option=orjson.OPT_SERIALIZE_NUMPY)
            t_pf = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"input: {src}" + (f" → {args.ranks}-rank job" if args.ranks else "") +
          (", every rank's ops loaded" if args.every_rank_ops else "") +
          f" ({len(trace.ranks)} ranks, {len(trace.compute)} compute, {len(trace.collectives)} collectives)")
    print(f"load {t_load:.2f} s, summarize ({'HTA' if args.hta else 'no HTA'}) {t_sum:.2f} s, report analyses {t_ctx:.2f} s, "
          f"HTML page {t_page:.2f} s" + (f", perfetto {t_pf:.2f} s" if t_pf is not None else "") +
          f"; peak RSS {rss:.0f} MB")
    print(f"HTML {size / 1e6:.3f} MB" + (f", perfetto JSON {len(perfetto) / 1e6:.2f} MB" if perfetto else ""))
    print("| part of the page | kB |\n|---|---|")
    for name, n in page_parts(page):
        print(f"| {name} | {n / 1e3:.1f} |")


if __name__ == "__main__":
    main()
