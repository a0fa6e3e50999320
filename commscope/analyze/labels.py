"""Labels from a size → label map (`--label-map`): `relabel_by_size(collectives, label_map)`.

A collective whose label was inferred — its own name (`label_source` "name") or its innermost user-code
Python frame ("stack"; docs/frames.md) — and whose `bytes` equal a size of the map takes that size's
label (`label_source` "size"); its phase stays empty. The map is what the user asked for by name, so it
outranks a frame, which may hold many different collectives (a training loop, a module's forward). A
size that several labels claim gives their names joined by `|` in the map's order (`attn|mlp`), and a
note. Labels given in the code (a commscope scope, the recorder) are never changed; collectives of
unknown size keep their labels.

The map is label → full-array byte sizes (commscope.load.label_map reads and checks it; a map built in
Python, e.g. by `commscope.size_labels`, is checked the same way). Notes (the command adds them to the
trace's `problems`): sizes claimed by several labels, labels that matched no collective. A note lists at
most NOTE_LABELS labels of a size, or of the unused ones (each cut to NOTE_LABEL_CHARS characters), and at
most NOTE_SIZES sizes (fewer once the listing reaches NOTE_CHARS characters), and says how many more
there are: a map of thousands of clashing labels still gives a short line.

`shown_label(v)`: the name under which a collective's label is drawn; one without a label (a run
directory's record of `"label": null`) is drawn as NO_LABEL (`with_shown_labels`: over a frame's column).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from commscope.load.label_map import check_label_map
from commscope.rundir.schema import NO_LABEL

SEP = "|"
INFERRED = ("name", "stack")  # the label sources a map may replace: none the training code gave
NOTE_SIZES = 8          # sizes listed in the note on shared sizes, while the listing is under NOTE_CHARS
NOTE_CHARS = 300
NOTE_LABELS = 10        # labels listed per size, and unused labels listed
NOTE_LABEL_CHARS = 40   # characters of one listed label


def shown_label(v) -> str:
    """A collective's label as drawn: the label, else NO_LABEL (None, NaN or empty)."""
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA or v == "":
        return NO_LABEL
    return v if isinstance(v, str) else str(v)


def missing_labels(labels: pd.Series) -> np.ndarray:
    """Per row, whether the collective has no label (shown_label's rule, over a whole column)."""
    return (labels.isna() | (labels == "")).to_numpy(dtype=bool)


def with_shown_labels(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its `label` column as drawn (shown_label's rule over the whole column): the frame itself
    where every row has a label, else a copy whose unlabelled rows read NO_LABEL."""
    if not len(df) or "label" not in df:
        return df
    missing = missing_labels(df["label"])
    if not missing.any():
        return df
    return df.assign(label=np.where(missing, NO_LABEL, df["label"].astype(object)))


def _listed(labels: list[str], sep: str = ", ") -> str:
    """The first NOTE_LABELS of `labels` (each cut to NOTE_LABEL_CHARS) joined by `sep`, and how many more
    there are."""
    cut = [lab if len(lab) <= NOTE_LABEL_CHARS else lab[:NOTE_LABEL_CHARS - 1] + "…" for lab in labels[:NOTE_LABELS]]
    more = len(labels) - len(cut)
    return sep.join(cut) + (f" … {more} more" if more else "")


def size_table(label_map: Mapping[str, list[int]]) -> dict[int, str]:
    """bytes → the label of that size (several claimants joined by `|`, in the map's order)."""
    owners: dict[int, dict[str, None]] = {}  # a dict per size: ordered, and a label's test is O(1)
    for label, sizes in label_map.items():
        for s in sizes:
            owners.setdefault(int(s), {})[label] = None
    return {s: SEP.join(ls) for s, ls in owners.items()}


def relabel_by_size(collectives: pd.DataFrame, label_map: Mapping) -> tuple[pd.DataFrame, list[str]]:
    """`collectives` (a copy) with inferred labels (name, stack) replaced from `label_map`, and the notes to
    report."""
    label_map = check_label_map(label_map)
    table = size_table(label_map)
    notes = []
    shared = {s: lab for s, lab in table.items() if SEP in lab}
    if shared:
        listed: list[str] = []
        for s, lab in sorted(shared.items()):
            if len(listed) == NOTE_SIZES or sum(map(len, listed)) >= NOTE_CHARS:
                break
            listed.append(f"{s} B: {_listed(lab.split(SEP), SEP)}")
        more = len(shared) - len(listed)
        notes.append(f"label map: {len(shared)} size(s) claimed by several labels, so labelled with all of "
                     f"them: {'; '.join(listed)}" + (f"; … {more} more size(s)" if more else ""))
    out = collectives.copy()
    if not len(out):
        return out, notes
    generic = out["label_source"].isin(INFERRED).to_numpy(bool)
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
        notes.append(f"label map: {len(unused)} of {len(label_map)} label(s) matched no collective labelled "
                     f"by the trace or its stack: {_listed(unused)}")
    return out, notes
