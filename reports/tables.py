"""HTML tables for the report, rendered from summarize()'s plain-data structures.

Why our own tiny renderer instead of DataFrame.to_html: every numeric cell carries its exact value in a
`data-value` attribute next to the formatted text, so tests (and scripts scraping a report) can compare the
page with summarize() exactly, and table shapes stay independent of the analyzer's internal frames.

Invariants: every string is HTML-escaped; cells never lose their value (display rounding only); tables are
generic over keys, so new summary fields show up without code changes here.
"""
from __future__ import annotations

import html
import math
from typing import Any, Iterable, Mapping

import numpy as np


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def fmt(v: Any) -> str:
    """Display format: integers with thousands separators, floats with 3 significant decimals."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if float(v).is_integer() and abs(v) < 1e15:  # counts and byte sizes arrive as floats
            return f"{int(v):,}"
        a = abs(float(v))
        return f"{float(v):,.3f}" if a >= 0.001 or a == 0 else f"{float(v):.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def cell(v: Any, tag: str = "td") -> str:
    text = html.escape(fmt(v))
    if _is_num(v):
        return f'<{tag} class="num" data-value="{html.escape(repr(float(v)) if isinstance(v, (float, np.floating)) else str(int(v)))}">{text}</{tag}>'
    if isinstance(v, (dict,)):
        return f"<{tag}>{html.escape(', '.join(f'{k}: {fmt(x)}' for k, x in v.items()))}</{tag}>"
    return f"<{tag}>{text}</{tag}>"


def records_table(records: Iterable[Mapping[str, Any]], columns: list[str] | None = None, table_id: str | None = None,
                  caption: str | None = None) -> str:
    """An HTML table of `records` (list of dicts); columns default to the union of keys in first-seen order."""
    records = list(records)
    if columns is None:
        columns = []
        for r in records:
            columns += [k for k in r if k not in columns]
    if not records:
        return '<p class="empty">(none)</p>'
    ident = f' id="{html.escape(table_id)}"' if table_id else ""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(cell(r.get(c)) for c in columns) + "</tr>" for r in records)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table{ident}>{cap}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>'


def keyed_table(mapping: Mapping[str, Mapping[str, Any]], key_name: str, columns: list[str] | None = None,
                table_id: str | None = None) -> str:
    """A table of a dict of dicts (e.g. summarize()["labels"]), the outer key as the first column."""
    records = [{key_name: k, **dict(v)} for k, v in mapping.items()]
    cols = None if columns is None else [key_name] + columns
    return records_table(records, cols, table_id)


def scalar_table(mapping: Mapping[str, Any], key_name: str = "key", value_name: str = "value",
                 table_id: str | None = None) -> str:
    """A two-column table of a flat dict (e.g. overlap % by rank)."""
    return records_table([{key_name: k, value_name: v} for k, v in mapping.items()], [key_name, value_name], table_id)


def nested(value: Any, depth: int = 0) -> str:
    """Render arbitrary nested plain data (dicts, lists of records, scalars) as headings + tables.
    Used for parts of the summary whose shape is owned by someone else (HTA, configuration)."""
    if isinstance(value, Mapping):
        scalars = {k: v for k, v in value.items() if not isinstance(v, (Mapping, list, tuple)) or
                   (isinstance(v, (list, tuple)) and all(not isinstance(x, (Mapping, list, tuple)) for x in v))}
        parts = [scalar_table(scalars)] if scalars else []
        for k, v in value.items():
            if k in scalars:
                continue
            h = min(4 + depth, 6)
            if isinstance(v, Mapping) and v and all(isinstance(x, Mapping) for x in v.values()) and \
                    all(not isinstance(y, (Mapping, list)) for x in v.values() for y in x.values()):
                parts.append(f"<h{h}>{html.escape(str(k))}</h{h}>" + keyed_table(v, "key"))
            else:
                parts.append(f"<h{h}>{html.escape(str(k))}</h{h}>" + nested(v, depth + 1))
        return "\n".join(parts) if parts else '<p class="empty">(none)</p>'
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, Mapping) for x in value):
            return records_table(value)
        return f"<p>{html.escape(fmt(list(value)))}</p>"
    return f"<p>{html.escape(fmt(value))}</p>"
