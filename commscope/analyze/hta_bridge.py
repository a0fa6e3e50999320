"""Holistic Trace Analysis side by side with commscope.

Runs HTA (PyPI `holistictraceanalysis` 0.5.0, the `hta` extra) on the GPU traces of a `Trace`:
temporal breakdown, comm/comp overlap, kernel-type and per-kernel breakdown, idle time by cause, queue
length per stream and CUDA launch delay, and puts its numbers next to commscope's with the reason
wherever they differ. HTA's frames are passed on as records (rows as HTA computes them); only the launch
delay, one row per launched kernel in HTA, is summarized per rank (pandas' describe).

Invariants: HTA is imported lazily (it is slow to import and optional); it only ever sees a temporary
directory of its own holding one symlink per rank file (HTA reads every *.json / *.json.gz of a directory,
and the analyses run here write nothing; a copy only where a symlink cannot be made), removed however the
call ends (an exception, or SIGTERM/SIGHUP turned into one by the CLI), with HTA_DISABLE_NS_ROUNDING=1
(its rounding gives sub-µs events negative durations); any HTA failure, per analysis, is reported in the
result and never raised.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
import warnings
from typing import Any

from commscope.load.frames import Trace, unlinked
from commscope.load.kineto import hta_unseen_comm_kernels
from commscope.util.abandon import abandon_on_stop
from commscope.util.num import rounded_float

NOTES = {
    "overlap": "HTA counts the cpu ops that carry args.stream (Triton kernel launches, host time) as GPU "
               "computation, drops kernels launched before the profiling window and the whole last "
               "ProfilerStep. commscope's hta_comm_overlap_pct_by_rank reproduces these rules so the numbers "
               "compare; device_comm_overlap_pct_by_rank is the device-only number: communication kernels against the compute kernels (memcpy, memset and syncs left out).",
    "labels": "HTA has no notion of labels or ranks' arrival: per-label exposure, skew and stragglers are "
              "commscope only. HTA classifies communication kernels by name (^nccl.*Kernel) only.",
    "temporal": "HTA's temporal breakdown spans each rank's whole trace (minus the last step) and counts "
                "communication kernels as non-compute time; commscope's step breakdown is per step and "
                "splits communication into hidden (counted as compute) and exposed.",
    "rounding": "HTA ran here with HTA_DISABLE_NS_ROUNDING=1: by default it rounds event times to whole µs, "
                "which gives sub-µs events negative durations and moves its overlap and idle figures; a "
                "TraceAnalysis of your own gives these figures with that variable set before it is built.",
}


def trace_files(trace: Trace) -> dict[int, str]:
    """rank → Kineto file of the loaded ranks (a Kineto folder's files, or a run directory's
    rank*/trace.json.gz), as the loader recorded them in `config["files"]`."""
    return {int(r): f for r, f in trace.config.get("files", {}).items() if int(r) in trace.ranks}


class _Session:
    """One TraceAnalysis and the ranks it holds; its GPU kernel breakdown is computed once for the two
    analyses that read it."""

    def __init__(self, ta, ranks: list[int]):
        self.ta, self.ranks = ta, ranks
        self._breakdown = None

    def kernel_breakdown(self):
        if self._breakdown is None:
            self._breakdown = self.ta.get_gpu_kernel_breakdown(visualize=False)
        return self._breakdown


def _records(df) -> list[dict]:
    return [{str(k): (rounded_float(v) if isinstance(v, float) else v) for k, v in row.items()}
            for row in df.to_dict("records")]


def _overlap(h: _Session):
    df = h.ta.get_comm_comp_overlap(visualize=False)
    return {str(int(r)): rounded_float(v) for r, v in zip(df["rank"], df["comp_comm_overlap_pctg"])}


def _temporal(h: _Session):
    df = h.ta.get_temporal_breakdown(visualize=False)
    return {str(int(row["rank"])): {k: rounded_float(v) for k, v in row.items() if k != "rank"}
            for row in df.to_dict("records")}


def _kernel_types(h: _Session):
    types, per_kernel = h.kernel_breakdown()
    top = per_kernel.groupby("name")["sum (us)"].sum().sort_values(ascending=False).head(10) \
        if "sum (us)" in per_kernel.columns else None
    types = types.rename(columns={"sum": "sum (us)"})  # HTA's kernel type sums are µs, as its per-kernel "sum (us)"
    return {"kernel_types": [{k: rounded_float(v) for k, v in row.items()} for row in types.to_dict("records")],
            "top_kernels_us": {str(k): rounded_float(v) for k, v in top.items()} if top is not None else None}


def _top_kernels(h: _Session):
    _, per = h.kernel_breakdown()
    cols = [c for c in ("name", "kernel_type", "rank", "sum (us)", "mean (us)", "max (us)", "min (us)", "stddev")
            if c in per.columns]
    return _records(per.sort_values("sum (us)", ascending=False, kind="stable")[cols].head(40))


def _idle(h: _Session):
    df, _ = h.ta.get_idle_time_breakdown(ranks=h.ranks, visualize=False)
    if {"idle_time", "idle_time_ratio", "rank", "stream"} <= set(df.columns):
        # HTA rounds the share to two decimals (1,414 µs of 356,899 reads 0.0, 99.6 % reads 1.0): the same
        # share from HTA's own idle times, unrounded, so it agrees with the times beside it
        total = df.groupby(["rank", "stream"])["idle_time"].transform("sum")
        df = df.assign(idle_time_ratio=(df["idle_time"] / total.where(total > 0)).fillna(0.0))
    return _records(df.rename(columns={"idle_time": "idle_time (us)"}))


def _queue(h: _Session):
    df = h.ta.get_queue_length_summary(ranks=h.ranks)
    if df is None:
        return []
    df = df.copy()
    df.columns = [" ".join(str(x) for x in c if x != "queue_length") if isinstance(c, tuple) else str(c)
                  for c in df.columns]
    df = df.rename(columns={"count": "samples"})  # describe()'s count: queue length samples of one stream
    if "samples" in df:
        df["samples"] = df["samples"].astype("int64")
    return _records(df.reset_index())


def _launch_delay(h: _Session):
    rows = []
    for rank, df in sorted(h.ta.get_cuda_kernel_launch_stats(ranks=h.ranks, visualize=False).items()):
        d = df["launch_delay"].describe(percentiles=[0.5, 0.95])
        rows.append({"rank": int(rank), "kernels": int(d["count"]), "median (us)": rounded_float(d["50%"]),
                     "p95 (us)": rounded_float(d["95%"]), "max (us)": rounded_float(d["max"])})
    return rows


# What commscope asks HTA, in this order: the result's key, and the function that asks it.
ANALYSES = (
    ("hta_comm_overlap_pct_by_rank", _overlap),
    ("temporal_breakdown", _temporal),
    ("kernel_breakdown", _kernel_types),
    ("top_kernels", _top_kernels),
    ("idle_time", _idle),
    ("queue_length", _queue),
    ("launch_delay", _launch_delay),
)


@contextlib.contextmanager
def _hushed(sink: io.StringIO):
    """HTA's prints, warnings and log lines go to `sink`: HTA 0.5.0 trips pandas 3 deprecations."""
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def run_hta(files: dict[int, str]) -> dict:
    """HTA's analyses (ANALYSES) on `files` (rank → path, given to HTA as they are: no temporary folder that
    a killed process would leave behind); each result or error keyed by analysis name, with HTA's version
    and the time TraceAnalysis took to load the files."""
    out: dict[str, Any] = {"status": "ok", "errors": {}}
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    try:
        import importlib.metadata as md

        from hta.trace_analysis import TraceAnalysis
        out["version"] = md.version("holistictraceanalysis")
    except Exception as e:  # ImportError, or a broken HTA install
        return {"status": "unavailable",
                "reason": f"HTA not importable ({type(e).__name__}: {e}); pip install 'commscope[hta]'"}
    sink = io.StringIO()
    old_level = logging.root.level
    # HTA joins a relative name to trace_dir: absolute paths are read where they are. trace_dir itself is
    # a folder that does not exist, so nothing HTA might write lands in the user's input.
    paths = {int(r): os.path.abspath(f) for r, f in files.items()}
    nowhere = os.path.join(tempfile.gettempdir(), f"commscope-hta-unused-{os.getpid()}")
    try:
        logging.disable(logging.WARNING)
        t0 = time.perf_counter()
        # HTA's fork pool cannot be unwound once a stop signal killed a worker, and a worker must end on the
        # SIGTERM its pool's terminate() sends (abandon_on_stop gives forked children the default actions)
        with abandon_on_stop():
            try:
                with _hushed(sink):
                    ta = TraceAnalysis(trace_files=paths, trace_dir=nowhere)
            except Exception as e:
                return {"status": "failed", "reason": f"TraceAnalysis failed: {type(e).__name__}: {e}"}
            out["construct_s"] = round(time.perf_counter() - t0, 3)
            session = _Session(ta, sorted(int(r) for r in files))
            for name, ask in ANALYSES:
                try:
                    with _hushed(sink):
                        out[name] = ask(session)
                except Exception as e:  # one analysis failing leaves the others' results
                    out["errors"][name] = f"{type(e).__name__}: {e}"
    finally:
        logging.disable(logging.NOTSET)
        logging.root.setLevel(old_level)
    if out["errors"]:
        out["status"] = "partial"
    return out


def compare(trace: Trace, summary: dict) -> dict:
    """HTA's numbers beside commscope's summary, with per-rank differences and the reasons they differ."""
    if not len(trace.kernels):
        return {"status": "skipped", "reason": "HTA analyzes GPU activity (events with args.stream); this "
                                               "trace has no GPU kernels"}
    several = sorted(r for r, fs in (trace.config.get("rank_files") or {}).items() if len(fs) > 1)
    if several:
        return {"status": "skipped", "reason": f"rank(s) {several[:8]} have several profiling windows (files); "
                                               "HTA reads one file per rank"}
    files = trace_files(trace)
    if not files:
        return {"status": "skipped", "reason": "no Kineto trace files to give HTA"}
    comm = trace.kernels[trace.kernels["is_comm"].astype(bool)]
    if len(comm) and unlinked(comm).all():
        # HTA joins kernels to launches by it; without it, on 1.2 MB of two ranks' traces, it took 62 s and 5 GB
        return {"status": "skipped", "reason": "the communication kernels carry no args.correlation, which HTA "
                                               "joins kernels to their launches by"}
    res = run_hta(files)
    if res["status"] not in ("ok", "partial"):
        return res
    # One quantity, HTA's rule, computed twice (by commscope and by HTA), and the device-only number beside
    # it: the row names say which is which (docs/analysis.md, "The quantities").
    ours = summary.get("hta_comm_overlap_pct_by_rank", {})
    theirs = res.get("hta_comm_overlap_pct_by_rank") or {}
    device = summary.get("device_comm_overlap_pct_by_rank", {})
    rows = []
    for r in sorted(set(ours) & set(theirs), key=int):
        a, b = ours[r], theirs[r]
        rows.append({"rank": int(r), "hta_comm_overlap_pct": a, "hta_comm_overlap_pct_from_hta": b,
                     "diff_pp": None if a is None or b is None else round(a - b, 2),
                     "device_comm_overlap_pct": device.get(r)})
    res["overlap_comparison"] = rows
    res["max_hta_comm_overlap_diff_pp"] = max((abs(x["diff_pp"]) for x in rows if x["diff_pp"] is not None),
                                              default=None)
    res["notes"] = dict(NOTES)
    total, unseen, example = hta_unseen_comm_kernels(trace.kernels)
    if unseen:
        res["notes"]["unseen_comm"] = (f"{unseen:,} of this trace's {total:,} communication kernels (e.g. "
                                       f"'{example}', RCCL's on ROCm) do not match HTA's ^nccl.*Kernel: HTA's "
                                       "overlap leaves them out and its kernel breakdown counts them as "
                                       "computation, where commscope counts them as communication.")
    return res
