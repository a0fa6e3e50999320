"""Which `commscope.label(...)` scope a collective was launched in: the label of a raw profiler trace.

`commscope.label("attn")` (commscope.recording.label) is a `record_function("commscope.label:attn")`
scope; in a Kineto trace it is a user annotation and lands in the `regions` frame. A collective belongs
to the innermost such region on its rank that contains its launch (`call_ns`, the `record_param_comms`
/ `c10d::` op; start ≤ launch ≤ end). Innermost = the latest start, then the shortest. Collectives with
no launch in the trace (kernels launched before the window) or outside every scope get None.

Pure function over frames (docs/frames.md). Regions are matched by time on the rank, not by thread: the
`regions` frame has no thread, and a scope opened in a DDP comm hook is on the autograd thread while the
main thread sits in `backward()`. A scope on another thread that encloses the launch in time would be
taken too; scripts open label scopes only around their own collective calls, so this does not arise in
practice, but it is what the rule cannot exclude.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from commscope.recording.label import PREFIX


def enclosing_labels(collectives: pd.DataFrame, regions: pd.DataFrame) -> pd.Series:
    """Per row of `collectives` (same index), the label of its innermost enclosing `commscope.label:*`
    region, or None."""
    out = pd.Series([None] * len(collectives), index=collectives.index, dtype=object)
    if not len(collectives) or not len(regions):
        return out
    names = regions["name"].astype(str)
    sc = regions[names.str.startswith(PREFIX)]
    if not len(sc):
        return out
    s_rank = sc["rank"].to_numpy()
    s_start, s_end = sc["start_ns"].to_numpy(np.int64), sc["end_ns"].to_numpy(np.int64)
    s_label = sc["name"].astype(str).str.slice(len(PREFIX)).to_numpy(dtype=object)
    call = collectives["call_ns"]
    for i, (rank, t) in enumerate(zip(collectives["rank"].to_numpy(), call)):
        if pd.isna(t):
            continue
        t = int(t)
        hit = np.flatnonzero((s_rank == rank) & (s_start <= t) & (s_end >= t))
        if len(hit):
            inner = hit[np.lexsort((s_end[hit] - s_start[hit], -s_start[hit]))[0]]
            out.iat[i] = s_label[inner]
    return out
