"""Step windows on device time for one rank of a GPU trace, and the step of each of its kernels.

Kineto writes a step as the host's `ProfilerStep#N` range. The device runs behind the host, often by a
whole step: on the 8×H100 fixture (tests/data/modded-nanogpt-8xh100) ranks 3–7 launch step 11 while the
GPU still runs step 10, so the host range of step 11 holds step 10's kernels and step 11's own kernels
run after its host range has ended. Per-step figures of device work therefore use device windows:

- a kernel, memcpy or memset belongs to the step whose host range contains its launch (the runtime call
  with its `correlation` id); one without a known launch (launched before the profiler started, or its
  runtime event is missing) to the step whose device window holds its start, else none (−1);
- a step's device window runs from the first start to the last end of the kernels launched in it,
  widened to the step's GPU-side `ProfilerStep#N` annotations (category `gpu_user_annotation`) where
  Kineto wrote them: `basis` "launch-correlation";
- a step with such an annotation but no kernel of known launch: the annotation's range,
  `basis` "device-annotation";
- a step with neither (and every step of a trace without device activity): the host range, "host".

Why the annotation is not the window by itself: Kineto ties a kernel to the innermost user range open on
the thread that launched it, so the GPU-side `ProfilerStep#N` spans only the kernels launched on the
step's own thread outside every nested `record_function` — not the backward pass (autograd's thread),
torch.compile's `## Call CompiledFxGraph ##` or the optimizer's `Optimizer.step#…`: on the 8×H100 fixture
a handful of a step's ~800 device events, the first ~10 ms of a ~36 ms device step. Its start agrees with
the first kernel launched in the step; it still bounds the window where runtime launches are missing.

Consecutive device windows may overlap (a step's last kernels running beside the next step's first ones
on another stream): time in the overlap belongs to both windows.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from commscope.load.frames import frame, step_of

_STEP_RE = re.compile(r"^ProfilerStep#(\d{1,18})$")  # int64 step numbers


def _first_last(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per step id ≥ 0: (earliest start, latest end) of the events carrying it."""
    sel = step >= 0
    if not sel.any():
        return {}
    ids, inv = np.unique(step[sel], return_inverse=True)
    first = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(ids), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, inv, start[sel])
    np.maximum.at(last, inv, end[sel])
    return {int(i): (int(a), int(b)) for i, a, b in zip(ids, first, last)}


def _annotations(names: list, start: np.ndarray, end: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per step id: the hull of its GPU-side ProfilerStep annotations (Kineto may write one per stream)."""
    ids = np.array([int(m.group(1)) if (m := _STEP_RE.match(n)) else -1 for n in names], dtype=np.int64)
    return _first_last(ids, np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64))


def device_steps(host: pd.DataFrame, k_start: np.ndarray, k_end: np.ndarray, k_launch: pd.arrays.IntegerArray,
                 ann_names: list, ann_start: np.ndarray, ann_end: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """(the rank's steps frame with device windows, each kernel's step) from its host steps frame `host`
    (one rank, host ranges in start_ns/end_ns), its device activity (start, end, launch: int64 epoch ns,
    launch <NA> where unknown) and its GPU ProfilerStep annotations (names, start and end ns)."""
    n = len(k_start)
    if not len(host):
        return host, np.full(n, -1, dtype=np.int64)
    order = np.argsort(host["start_ns"].to_numpy(np.int64), kind="stable")
    ids = host["step"].to_numpy(np.int64)[order]
    hs, he = host["start_ns"].to_numpy(np.int64)[order], host["end_ns"].to_numpy(np.int64)[order]
    o = int(hs[0])  # float64 of differences from a point inside the trace is exact (docs/frames.md)
    k_step = np.full(n, -1, dtype=np.int64)
    known = ~np.asarray(k_launch.isna(), dtype=bool) if n else np.zeros(0, dtype=bool)
    if known.any():
        t = (k_launch[known].to_numpy(np.int64) - o).astype(np.float64)
        k_step[known] = step_of(t, (hs - o).astype(np.float64), (he - o).astype(np.float64), ids)
    k_start, k_end = np.asarray(k_start, dtype=np.int64), np.asarray(k_end, dtype=np.int64)
    launched = _first_last(k_step, k_start, k_end)
    ann = _annotations(ann_names, ann_start, ann_end) if n else {}
    start, end, basis = hs.copy(), he.copy(), np.full(len(ids), "host", dtype=object)
    for i, s in enumerate(ids.tolist()):
        spans = [w for w in (launched.get(s), ann.get(s)) if w is not None]
        if spans:
            start[i], end[i] = min(a for a, _ in spans), max(b for _, b in spans)
            basis[i] = "launch-correlation" if s in launched else "device-annotation"
    if (~known).any():  # no launch in the trace: the device window its start falls in
        w = np.argsort(start, kind="stable")
        t = (k_start[~known] - o).astype(np.float64)
        k_step[~known] = step_of(t, (start[w] - o).astype(np.float64), (end[w] - o).astype(np.float64), ids[w])
    steps = frame("steps", {"rank": host["rank"].to_numpy()[order], "step": ids, "start_ns": start, "end_ns": end,
                            "loss": host["loss"].to_numpy()[order], "basis": pd.Series(basis, dtype=object),
                            "host_start_ns": hs, "host_end_ns": he})
    return steps, k_step
