"""HTML tables for the report, rendered from summarize()'s plain-data structures.

Why our own tiny renderer instead of DataFrame.to_html: every numeric cell whose text rounds carries its
exact value in a `data-value` attribute next to the formatted text (the text is the value elsewhere), so
tests (and scripts scraping a report) can compare the page with summarize() exactly, and table shapes stay independent of the analyzer's internal frames.

Display rules, one for the whole page: headers are humanized from the keys with their unit in
parentheses (`gap_median_ms` → "Gap median (ms)"; HEADERS names the columns the rule would say less about,
such as `hidden_pct` → "Hidden by compute (%)"; the raw key stays in the header's `data-key`), and so are
the keys of key/value tables and the headings of nested data where they are snake_case names (`key_text`;
names from the trace itself, such as `deviceProperties`, paths and ranks stay as they are); percentages
(`*_pct*`, HTA's `*_pctg` and `percentage`) print with one decimal ("<0.1" for tiny non-zero ones), and so
do the shares the document keeps as fractions of 1 (FRACTIONS: `last_share`, `score`, HTA's `idle_time_ratio`), shown as
percentages like every other share on the page while `data-value` keeps the document's fraction; identifiers
and timestamps (rank, step, seq, pid, stream, …, `*_ns`) print as plain integers; byte sizes (BYTE_KEYS,
`*_bytes`) in decimal units with 3 significant digits (`byte_size`: "512 B", "4.10 kB", "1.05 MB", the
one byte format of the page, its timeline hovers included); other integers, and whole counts that arrive
as floats, get thousands separators;
bandwidths (`*_gbps`) with 3 significant digits in fixed notation ("<0.001" below a thousandth of a
GB/s, `bandwidth`, the terminal's format too); other floats print with 3 decimals ("<0.001" for tiny
non-zero values). Tables sit in a horizontally scrolling box, so a wide one never widens the page.

Invariants: every string is HTML-escaped; cells never lose their value (display rounding only); tables are
generic over keys, so new summary fields show up without code changes here.
"""
from __future__ import annotations

import html
import math
import re
from typing import Any, Iterable, Mapping

import numpy as np

from commscope.util.text import counted  # noqa: F401 (the renderers import it from here)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


ID_KEYS = {"rank", "step", "seq", "pid", "tid", "stream", "group", "correlation", "micro_step", "position",
           "key", "last_rank", "flow", "steps_selected", "world_size", "ranks"}
UNITS = {"ms": "ms", "us": "µs", "ns": "ns", "pct": "%", "pctg": "%", "pp": "pp", "gbps": "GB/s", "s": "s",
         "mb": "MB", "gb": "GB"}
HEADERS = {  # where the generic rule would say less than the column means
    "op": "Op", "count": "Calls (all ranks)", "count_per_rank": "Calls per rank", "bytes": "Bytes per call",
    "bytes_per_rank": "Bytes per rank", "mean_ms": "Mean duration (ms)", "exposed_ms": "Exposed per rank (ms)",
    "exposed_in_steps_ms": "Exposed inside the steps, per rank (ms)",
    "hidden_pct": "Hidden by compute (%)", "busbw_gbps": "Bus bandwidth (GB/s)",
    # the per-rank communication overlaps (docs/analysis.md, "The quantities"): one word, three rules
    "hta_comm_overlap_pct": "Comm overlap, HTA's rule (%)",
    "hta_comm_overlap_pct_from_hta": "Comm overlap, HTA's rule, computed by HTA (%)",
    "device_comm_overlap_pct": "Comm overlap, device only (%)",
    "recorded_comm_overlap_pct": "Comm overlap, recorded spans (%)",
    "diff_pp": "commscope − HTA (pp)",
    "algbw_gbps": "Algorithm bandwidth (GB/s)", "times_last": "Times last",
    "last_share": "Last (% of its collectives)", "score": "Share of all waiting caused (%)",
    "idle_time_ratio": "Share of the idle time (%)",
    "hta_comm_overlap_pct_by_rank": "Comm overlap by rank, computed by HTA",
    "pct_of_peak": "Achieved (% of peak)", "percentage": "Share of kernel time (%)",
    "wait_caused_ms": "Wait caused (ms)", "host_pct": "Host time (% of wall)",
    "queued_behind_ms": "Queued behind, by label (ms)",
    "pct_of_median_step": "% of median step",
    "max_hta_comm_overlap_diff_pp": "Largest |commscope − HTA| comm overlap (pp)",
    "world_size_from": "World size taken from", "rank_from": "Rank taken from", "rank_files": "Trace files by rank",
    "files": "Trace file by rank",
    # keys of the run configuration (config.json, summary.json) that carry no unit suffix
    "hang_timeout": "Hang timeout (s)", "tokens_per_s": "Tokens per second",
}

# A column's definition, the header's tooltip (title) wherever the key heads a table column; the
# quantities are those of docs/analysis.md ("The quantities"), per rank means over the ranks with the label.
COLUMN_HELP = {
    "label": "The collective's label: the name of what it communicates (Label source says where the name comes from).",
    "op": "The collective operation(s) of the label.",
    "count": "Calls of the label, counted over all ranks together.",
    "count_per_rank": "Calls per rank: the mean over the ranks with the label of each rank's calls; a fraction "
                      "where ranks made different numbers of calls.",
    "bytes": "Full-array bytes of one call (the lower median over its calls that move data; barriers left out).",
    "bytes_per_rank": "Bytes of all the label's calls of one rank (mean over the ranks with the label).",
    "mean_ms": "Mean duration of one call, measured as the caption says.",
    "exposed_ms": "Exposed per rank: the time a rank waits on the label's collectives that compute does not "
                  "hide (total per rank, mean over the ranks with the label).",
    "exposed_in_steps_ms": "The part of Exposed per rank from collectives launched inside a step.",
    "hidden_pct": "Share of the label's duration, over all ranks, that the ranks' compute covered: on GPU traces "
                  "every other device event of the rank, memcpy and memset included, where Comm overlap, device "
                  "only counts compute kernels alone (docs/analysis.md, \"Compute set\").",
    "busbw_gbps": "Bus bandwidth: algorithm bandwidth times the nccl-tests factor of the op and group size "
                  "(total bus bytes over total transfer time). A dash where the size or group size is unknown, "
                  "or where no call of the label has every member of its group in the input (withheld: the "
                  "note under the table).",
    "algbw_gbps": "Algorithm bandwidth: the label's total bytes over its total transfer time, a call's transfer "
                  "time being its shortest duration over the ranks, over the calls with every member of their "
                  "group in the input.",
    "label_source": "Where the label's name comes from: recorder, scope, stack, size or name.",
    "own_exposed_ms": "Own exposed: the exposed time not spent behind earlier collectives of its process group "
                      "(Exposed per rank − Queued).",
    "queued_ms": "Queued: the part of Exposed per rank spent waiting behind earlier collectives of the same "
                 "process group still in flight (a group runs its collectives in launch order); 0 where the "
                 "start is a measured execution start (Kineto).",
    "queue_charged_ms": "Queue charged: the exposed time of later collectives of other labels spent queued "
                        "behind this label's collectives.",
    "wake_delay_ms": "Wake delay: the rest of a blocked wait after the collective had completed (the caller "
                     "waking up); host-timed run directories only, not part of Exposed.",
    "attributed_exposed_ms": "Attributed exposed: the stall this label is responsible for, Own exposed + "
                             "Queue charged.",
    "queued_behind_ms": "Queued behind, by label: Queued split by the label each instant of it waited behind "
                        "(adds up to Queued).",
}

# Shares the document keeps as fractions of 1 (summarize()'s stragglers): displayed as percentages.
FRACTIONS = {"last_share", "score", "idle_time_ratio"}  # the last: HTA's idle time breakdown

# Byte sizes: summarize()'s and the layout analysis' keys, and the byte sizes of Kineto's deviceProperties.
BYTE_KEYS = {"bytes", "bytes_per_rank", "totalGlobalMem", "sharedMemPerBlock", "sharedMemPerBlockOptin",
             "sharedMemPerMultiprocessor"}
BYTE_PREFIXES = ("k", "M", "G", "T", "P", "E")

COUNT_WORDS = ("bytes", "count", "calls", "kernels", "runs", "steps", "collectives", "times_last")


def is_count(key: Any) -> bool:
    """Counts and byte sizes, which arrive as floats (means, medians) but are whole when integral."""
    return any(w in str(key).lower() for w in COUNT_WORDS)


def is_bytes(key: Any) -> bool:
    k = str(key)
    return k in BYTE_KEYS or k.endswith("_bytes")


def _finite(v: Any) -> float | str:
    """`v` as a float, or the text that stands for it when it is no finite number: "–" unknown, "∞"."""
    if v is None or isinstance(v, bool):
        return "–"
    x = float(v)
    if math.isnan(x):
        return "–"
    return "∞" if math.isinf(x) else x


def byte_size(v: Any) -> str:
    """A byte count in decimal (SI) units, 1 kB = 1000 B, as the page's bandwidths count GB/s (1e9 B/s):
    whole bytes below 1000 ("512 B"), else 3 significant digits ("4.10 kB", "1.05 MB", "268 MB", "80.0 GB");
    "–" when unknown. reports/static/report.js csBytes writes the same text for the rows it draws."""
    x = _finite(v)
    if isinstance(x, str):
        return x
    if abs(x) < 999.5:
        return f"{x:.0f} B"
    p = min(int(math.log10(abs(x)) // 3), len(BYTE_PREFIXES))
    m = float(f"{x / 1000 ** p:.3g}")
    if abs(m) >= 1000 and p < len(BYTE_PREFIXES):  # 999,999 B is 1.00 MB, not 1000 kB
        p, m = p + 1, float(f"{x / 1000 ** (p + 1):.3g}")
    digits = max(0, 2 - math.floor(math.log10(abs(m))))
    return f"{m:.{digits}f} {BYTE_PREFIXES[p - 1]}B"


def is_id(key: Any) -> bool:
    k = str(key).lower()
    return k in ID_KEYS or k.endswith("_ns") or k.endswith("_id")


def is_pct(key: Any) -> bool:
    """Percentages: `*_pct*` keys, and HTA's `*_pctg` and `percentage`."""
    words = str(key).lower().split("_")
    return "pct" in words or "pctg" in words or words == ["percentage"]


SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


# The loader's and analyses' step −1: an event no step of the trace holds (no ProfilerStep annotations, a
# collective launched before the profiling window). Said in words wherever the page quotes their text.
STEP_MINUS_ONE = re.compile(r"\bget step [−-]1\b|\bstep [−-]1\b")


def step_words(text: str) -> str:
    """`text` with "step −1" said as what it means: outside every step."""
    return STEP_MINUS_ONE.sub(lambda m: "are outside every step" if m.group(0).startswith("get")
                              else "outside every step", text)


def verdict_line(verdict: str, summary: str) -> str:
    """The verdict in capitals, then the doctor's summary without the "hang:" it starts with (HTML)."""
    said = summary[len(verdict) + 1:].strip() if summary.lower().startswith(verdict.lower() + ":") else summary
    return f"<b>{html.escape(verdict.upper())}</b> {html.escape(said)}"


def key_text(key: Any) -> str:
    """A row key or heading as a reader's label: snake_case names humanized (`mean_ms` → "Mean (ms)"),
    anything else (a path, a rank, a camelCase name the trace itself uses) as it is."""
    k = str(key)
    return humanize(k) if SNAKE.fullmatch(k) else k


def humanize(key: Any) -> str:
    """A column key as a header: `gap_median_ms` → "Gap median (ms)", `sum (us)` → "Sum (µs)"."""
    k = str(key)
    if k in HEADERS:
        return HEADERS[k]
    if "(" in k or " " in k:  # already prose (HTA's "sum (us)", "idle_time(us)")
        k = re.sub(r"\s*\(", " (", k.replace("_", " ").replace("(us)", "(µs)"))
        return k[:1].upper() + k[1:]
    words = k.split("_")
    unit = UNITS.get(words[-1].lower()) if len(words) > 1 else None
    if unit:
        words = words[:-1]
    text = " ".join(words)
    text = text[:1].upper() + text[1:]
    return f"{text} ({unit})" if unit else text


def bandwidth(v: Any) -> str:
    """GB/s, for the page and the terminal alike: 3 significant digits without scientific notation
    (0.00525, 0.045, 288, 1,230); "<0.001" below that (gloo moving a few bytes: the figure says nothing
    but "tiny", and the exact value stays in the page's data-value and --json); "–" when unknown."""
    x = _finite(v)
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    if abs(x) < 0.001:
        return "<0.001" if x > 0 else ">−0.001"
    r = float(f"{x:.3g}")  # round first: 9.996 is 10.0, not 10.00
    digits = max(0, 2 - math.floor(math.log10(abs(r))))
    return f"{r:,.{digits}f}"


def _pct_text(x: float) -> str:
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and abs(x) < 0.05:
        return "<0.1" if x > 0 else ">−0.1"
    return f"{x:,.1f}"


def fmt(v: Any, key: Any = None) -> str:
    """Display format (module docstring): ids plain, other integers with separators, bandwidths 3
    significant digits, percentages (and FRACTIONS, as percentages) 1 decimal, other floats 3 decimals."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    ident = key is not None and is_id(key)
    if key is not None and str(key).endswith("_gbps") and _is_num(v):
        return bandwidth(v)
    if key is not None and is_bytes(key) and _is_num(v):
        return byte_size(v)
    if key is not None and str(key) in FRACTIONS and _is_num(v):
        return _pct_text(100.0 * float(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v)) if ident else f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        x = float(v)
        if math.isinf(x):
            return "∞" if x > 0 else "−∞"
        if ident and x.is_integer():
            return str(int(x))
        if key is not None and is_count(key) and x.is_integer() and abs(x) < 1e15:
            return f"{int(x):,}"
        if key is not None and is_pct(key):
            return _pct_text(x)
        if x != 0 and abs(x) < 0.0005:
            return "<0.001" if x > 0 else ">−0.001"
        return f"{x:,.3f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x, key) for x in v)
    return str(v)


def _exact(text: str, v: Any) -> bool:
    """Does the displayed text read back as exactly `v`?"""
    try:
        return float(text.replace(",", "")) == float(v)
    except ValueError:
        return False


def cell(v: Any, tag: str = "td", key: Any = None) -> str:
    """A table cell. Numbers are right-aligned; where the display rounds, the exact value rides along in
    `data-value` (omitted where the text already reads back exactly, which keeps long tables light)."""
    text = fmt(v, key)
    if _is_num(v):
        exact = "" if _exact(text, v) else (
            f' data-value="{html.escape(repr(float(v)) if isinstance(v, (float, np.floating)) else str(int(v)))}"')
        return f'<{tag} class="num"{exact}>{html.escape(text)}</{tag}>'
    if isinstance(v, (dict,)):
        return f"<{tag}>{html.escape(', '.join(f'{k}: {fmt(x, k)}' for k, x in v.items()) or '–')}</{tag}>"
    return f"<{tag}>{html.escape(text)}</{tag}>"


def header_cell(key: Any) -> str:
    """A column header: the humanized key, the raw key in data-key, its COLUMN_HELP as the tooltip."""
    k = str(key)
    tip = COLUMN_HELP.get(k)
    title = f' title="{html.escape(tip)}"' if tip else ""
    return f'<th data-key="{html.escape(k)}"{title}>{html.escape(humanize(k))}</th>'


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
    head = "".join(header_cell(c) for c in columns)
    body = "\n".join("<tr>" + "".join(cell(r.get(c), key=c) for c in columns) + "</tr>" for r in records)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (f'<div class="scroll"><table{ident}>{cap}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>'
            '</table></div>')


def keyed_table(mapping: Mapping[str, Mapping[str, Any]], key_name: str, columns: list[str] | None = None,
                table_id: str | None = None) -> str:
    """A table of a dict of dicts (e.g. summarize()["labels"]), the outer key as the first column."""
    records = [{key_name: k, **dict(v)} for k, v in mapping.items()]
    cols = None if columns is None else [key_name] + columns
    return records_table(records, cols, table_id)


def scalar_table(mapping: Mapping[str, Any], key_name: str = "key", value_name: str = "value",
                 table_id: str | None = None, labels: Mapping[str, str] | None = None) -> str:
    """A two-column table of a flat dict (e.g. arrival skew); each value formatted by its own key, so
    an id (`pid`) stays a plain integer. A key reads as `labels[key]` where given, else as key_text(key)."""
    labels = labels or {}
    if not mapping:
        return '<p class="empty">(none)</p>'
    ident = f' id="{html.escape(table_id)}"' if table_id else ""
    head = "".join(f'<th data-key="{html.escape(c)}">{html.escape(humanize(c))}</th>' for c in (key_name, value_name))
    body = "\n".join(f'<tr><td data-key="{html.escape(str(k))}">{html.escape(labels.get(k) or key_text(k))}</td>'
                     f"{cell(v, key=k)}</tr>" for k, v in mapping.items())
    return f'<div class="scroll"><table{ident}><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>'


def nested(value: Any, depth: int = 0, limit: int | None = None) -> str:
    """Render arbitrary nested plain data (dicts, lists of records, scalars) as headings + tables.
    Used for parts of the summary whose shape is owned by someone else (HTA, configuration). `limit`: at
    most that many entries of each mapping and list, and a line saying how many are left out."""
    more = ""
    if limit is not None and isinstance(value, (Mapping, list, tuple)) and len(value) > limit:
        more = f'<p class="note">… and {len(value) - limit:,} more entries, left out here.</p>'
        value = dict(list(value.items())[:limit]) if isinstance(value, Mapping) else value[:limit]
    if isinstance(value, Mapping):
        scalars = {k: v for k, v in value.items() if not isinstance(v, (Mapping, list, tuple)) or
                   (isinstance(v, (list, tuple)) and all(not isinstance(x, (Mapping, list, tuple)) for x in v))}
        if limit is not None:  # a long list of scalars prints whole otherwise
            scalars = {k: (list(v[:limit]) + [f"… {len(v) - limit:,} more"] if isinstance(v, (list, tuple))
                           and len(v) > limit else v) for k, v in scalars.items()}
        # an empty list is an answer ("no watchdog fired"), not a blank cell
        scalars = {k: "none" if isinstance(v, (list, tuple)) and not v else v for k, v in scalars.items()}
        parts = [scalar_table(scalars)] if scalars else []
        for k, v in value.items():
            if k in scalars:
                continue
            h = min(4 + depth, 6)
            if isinstance(v, Mapping) and v and all(isinstance(x, Mapping) for x in v.values()) and \
                    all(not isinstance(y, (Mapping, list)) for x in v.values() for y in x.values()):
                rows = v if limit is None or len(v) <= limit else dict(list(v.items())[:limit])
                # per-rank entries (status, meta) are keyed by rank numbers: the column says so
                key = "rank" if all(str(x).isdigit() for x in rows) else "key"
                parts.append(f"<h{h}>{html.escape(key_text(k))}</h{h}>" + keyed_table(rows, key) +
                             (f'<p class="note">… and {len(v) - limit:,} more entries, left out here.</p>'
                              if rows is not v else ""))
            else:
                parts.append(f"<h{h}>{html.escape(key_text(k))}</h{h}>" + nested(v, depth + 1, limit))
        return ("\n".join(parts) if parts else '<p class="empty">(none)</p>') + more
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, Mapping) for x in value):
            return records_table(value) + more
        return f"<p>{html.escape(fmt(list(value)))}</p>" + more
    return f"<p>{html.escape(fmt(value))}</p>"


def listed(ctx: Any, rows: list[dict], key: str = "rank", also: Iterable[int] = ()) -> tuple[list[dict], str]:
    """`rows` of the ranks the page lists (all below the threshold; `also`: more ranks kept at scale, such as
    a verdict's culprits), and the note that says which at scale. `ctx`: the report's ReportContext."""
    if ctx.listed_ranks is None:
        return rows, ""
    keep = {int(r) for r in ctx.listed_ranks} | {int(r) for r in also}
    return [r for r in rows if r.get(key) is not None and int(r[key]) in keep], listed_note(ctx)


def listed_note(ctx: Any) -> str:
    ranks = ", ".join(str(r) for r in ctx.listed_ranks or [])
    return (f'<p class="note">{len(ctx.trace.ranks)} ranks: this table lists ranks {ranks} only (the '
            "representative ranks and those that made the others wait most); <code>commscope report --json</code> "
            "has every rank.</p>")
