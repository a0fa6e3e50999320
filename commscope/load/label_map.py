"""A size → label map given by the user (`--label-map FILE`, docs/traces.md "Where labels come from").

FILE is a JSON object `{"attn": [50331648, …], "mlp": [201326592]}`: label → the full-array byte sizes of
its collectives (the `bytes` commscope reports per collective, nccl-tests convention: reduce_scatter
input, all_gather output, all_reduce the tensor). A single size may be given bare (`"mlp": 201326592`).
`commscope.size_labels(model.named_parameters())` writes such a map from a model.

`check_label_map` is the one validation, for maps read from a file and maps built in Python alike;
anything else than a non-empty string label with positive integer sizes is refused with one line
(UserError); a label's control characters are written as escapes, as the loader writes the trace's own
labels. The relabelling itself is commscope.analyze.labels.
"""
from __future__ import annotations

import os
from typing import Any

from commscope.errors import UserError
from commscope.util.text import escape_controls

MAX_FILE_BYTES = 64 << 20  # a map names sizes, not collectives: anything larger is not one


def read_label_map(path: str | os.PathLike, option: str = "--label-map") -> dict[str, list[int]]:
    """The map in the JSON file at `path`, checked (`check_label_map`); UserError naming `option` and the
    file when it cannot be read or is not such a map."""
    import orjson

    from commscope.load.files import describe

    where = f"{option} {os.fspath(path)}"
    what = describe(os.fspath(path))
    if what not in (None, "missing", "a directory"):  # a FIFO or device would block the read
        raise UserError(f"{where}: is {what}, not a JSON file")
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise UserError(f"{where}: larger than {MAX_FILE_BYTES >> 20} MiB, not a label map")
        with open(path, "rb") as f:
            raw = f.read()
    except IsADirectoryError:
        raise UserError(f"{where}: is a directory, not a JSON file") from None
    except FileNotFoundError:
        raise UserError(f"{where}: does not exist") from None
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror or e})") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise UserError(f"{where}: not JSON ({str(e).splitlines()[0]})") from None
    return check_label_map(doc, where)


def check_label_map(doc: Any, where: str = "label map") -> dict[str, list[int]]:
    """`doc` as label → sorted distinct sizes, or UserError saying what is wrong with it."""
    if not isinstance(doc, dict):
        raise UserError(f"{where}: expected a JSON object of label → list of byte sizes, "
                        f"e.g. {{\"attn\": [50331648]}}, got {_kind(doc)}")
    if not doc:
        raise UserError(f"{where}: the map names no label")
    out: dict[str, list[int]] = {}
    for label, sizes in doc.items():
        if not isinstance(label, str) or not label.strip():
            raise UserError(f"{where}: a label is an empty string")
        if _is_size(sizes):
            sizes = [sizes]
        if not isinstance(sizes, (list, tuple)):
            raise UserError(f"{where}: label {label!r}: expected a list of byte sizes, got {_kind(sizes)}")
        bad = next((s for s in sizes if not _is_size(s)), None)
        if isinstance(bad, (int, float)) and not isinstance(bad, bool) and bad >= 1 << 62:
            raise UserError(f"{where}: label {label!r}: size {repr(bad)[:40]} is too large for a byte count "
                            "(below 2^62)")
        if bad is not None or not sizes:
            got = "an empty list" if not sizes else repr(bad)[:40]
            raise UserError(f"{where}: label {label!r}: sizes are positive integers (bytes), got {got}")
        # a label's control characters as escapes, as the loader writes the trace's own labels (a newline
        # would break a terminal table's row)
        key = escape_controls(label)
        out[key] = sorted({int(s) for s in sizes} | set(out.get(key, [])))
    return out


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 62


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)
