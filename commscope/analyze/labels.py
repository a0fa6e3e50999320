"""Labels from a size → label map (`--label-map`): `relabel_by_size(collectives, label_map)`.

A collective whose label is still generic — its own name (`label_source` "name": no commscope scope, no
user-code Python frame enclosed its launch; docs/frames.md) — and whose `bytes` equal a size of the map
takes that size's label (`label_source` "size"); its phase stays empty. A size that several labels
claim gives their names joined by `|` in the map's order (`attn|mlp`), and a note. Labels given by a
scope, the stack or the recorder are never changed; collectives of unknown size keep their names.

The map is label → full-array byte sizes (commscope.load.label_map reads and checks it; a map built in
Python, e.g. by `commscope.size_labels`, is checked the same way). Notes (the command adds them to the
trace's `problems`): sizes claimed by several labels, labels that matched no collective.

`shown_label(v)`: the name under which a collective's label is drawn; one without a label (a run
directory's record of `"label": null`) is drawn as NO_LABEL.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from commscope.load.label_map import check_label_map

SEP = "|"
NO_LABEL = "(no label)"


def shown_label(v) -> str:
    """A collective's label as drawn: the label, else NO_LABEL (None, NaN or empty)."""
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA or v == "":
        return NO_LABEL
    return v if isinstance(v, str) else str(v)


def size_table(label_map: Mapping[str, list[int]]) -> dict[int, str]:
    """bytes → the label of that size (several claimants joined by `|`, in the map's order)."""
    owners: dict[int, list[str]] = {}
    for label, sizes in label_map.items():
        for s in sizes:
            got = owners.setdefault(int(s), [])
            if label not in got:
                got.append(label)
    return {s: SEP.join(ls) for s, ls in owners.items()}


def relabel_by_size(collectives: pd.DataFrame, label_map: Mapping) -> tuple[pd.DataFrame, list[str]]:
    """`collectives` (a copy) with generic labels replaced from `label_map`, and the notes to report."""
    label_map = check_label_map(label_map)
    table = size_table(label_map)
    notes = []
    shared = {s: lab for s, lab in table.items() if SEP in lab}
    if shared:
        shown = "; ".join(f"{s} B: {lab}" for s, lab in sorted(shared.items())[:8])
        notes.append(f"label map: {len(shared)} size(s) claimed by several labels, so labelled with all of "
                     f"them: {shown}" + (" …" if len(shared) > 8 else ""))
    out = collectives.copy()
    if not len(out):
        return out, notes
    generic = (out["label_source"] == "name").to_numpy(bool)
    size = pd.to_numeric(out["bytes"], errors="coerce").to_numpy(np.float64)
    known = generic & np.isfinite(size)
    new = np.array([table.get(int(b)) if k else None for b, k in zip(size, known)], dtype=object)
    hit = np.array([v is not None for v in new], dtype=bool)
    if hit.any():
        labels = out["label"].astype(object).to_numpy(copy=True)
        sources = out["label_source"].astype(object).to_numpy(copy=True)
        labels[hit] = new[hit]
        sources[hit] = "size"
        out["label"] = labels
        out["label_source"] = sources
    used = {lab for v in set(new[hit]) for lab in v.split(SEP)} if hit.any() else set()
    unused = [lab for lab in label_map if lab not in used]
    if unused:
        notes.append(f"label map: {len(unused)} of {len(label_map)} label(s) matched no collective of a "
                     f"generic label: {', '.join(unused[:8])}" + (" …" if len(unused) > 8 else ""))
    return out, notes
