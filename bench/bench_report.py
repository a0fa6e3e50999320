"""Report and Perfetto-export cost on the 8-rank H100 fixture: render time and output sizes.

Usage: python bench/bench_report.py [TRACE_DIR]   (default: tests/data/modded-nanogpt-8xh100)
Copies the traces to a temporary folder first (inputs are never written next to), loads them once,
then times summarize (without HTA), the HTML page, and the Perfetto document, and prints sizes.
The machine is printed with the numbers so figures quoted elsewhere can name it.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

from commscope.analyze.summary import summarize
from reports.perfetto import build_perfetto
from commscope.load import load_path
from reports.page import render_html
from commscope.analyze.report_context import report_context

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "modded-nanogpt-8xh100"


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / src.name
        shutil.copytree(src, copy)
        t = time.perf_counter()
        trace = load_path(copy)
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        summary = summarize(trace, with_hta=False)
        t_sum = time.perf_counter() - t
        t = time.perf_counter()
        page = render_html(report_context(trace, summary)).encode()
        t_page = time.perf_counter() - t
        t = time.perf_counter()
        perfetto = orjson.dumps(build_perfetto(trace), option=orjson.OPT_SERIALIZE_NUMPY)
        t_pf = time.perf_counter() - t
    from plotly.offline import get_plotlyjs

    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"input: {src} ({len(trace.ranks)} ranks, {len(trace.compute)} compute, {len(trace.collectives)} collectives)")
    print(f"load {t_load:.2f} s, summarize (no HTA) {t_sum:.2f} s, HTML page {t_page:.2f} s, perfetto {t_pf:.2f} s")
    print(f"HTML {len(page) / 1e6:.2f} MB (plotly.js {len(get_plotlyjs()) / 1e6:.2f} MB of it), "
          f"perfetto JSON {len(perfetto) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
