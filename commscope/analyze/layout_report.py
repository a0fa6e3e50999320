"""One call from a loaded `Trace` to the layout report: stride findings, kernel-only findings, contention.

Why a separate module: the detectors are pure functions of frames; this is the only place that knows
where in a `Trace` their inputs live (the profiled window's own record_function ranges, the run's
config.json parameter shapes, the device properties) and how the JSON of `commscope layout --json`
looks (docs/layout.md).

Invariants: kernel-only ("low") findings are only added for kernels not launched by an op whose shapes
were recorded, so one slow kernel is never reported twice. A mismatched op whose measured slowdown against
its reference is below SLOWDOWN_FLAG ran no slower than an aligned op would: it is not a finding, and is
kept apart in `unflagged` ("mismatched layout, no measured cost"); an op without a reference (no slowdown)
stays a finding, as nothing measured clears it. `grouped` / `short_kernel` shape the findings
for tables (the CLI's and the HTML report's).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from commscope.analyze.contention import (CONTENTION_COLUMNS, UNSIZED_COLUMNS, device_limits, find_sm_contention,
                                          unsized_overlaps)
from commscope.analyze.layout import FINDING_COLUMNS, SLOWDOWN_FLAG, find_layout_mismatches, severity
from commscope.analyze.layout_kernels import UNLINKED, kernel_layout_evidence
from commscope.load.kineto_values import NOT_A_SHAPE
from commscope.util.ranges import int_ranges

JSON_FINDING_KEYS = ["op", "kernel", "dims", "strides", "duration_us", "achieved_gbps", "peak_gbps",
                     "est_saving_us", "where", "confidence", "deliberate", "rank", "pct_of_peak", "peak_source",
                     "bytes", "slowdown", "severity", "kind"]


@dataclass
class LayoutReport:
    findings: pd.DataFrame     # FINDING_COLUMNS, high-confidence first, then by duration
    contention: pd.DataFrame   # CONTENTION_COLUMNS
    device: str | None
    notes: list[str] = field(default_factory=list)  # what the input lacks for these checks
    # why SM contention was not looked for (no kernels, no device properties), None when it was: the
    # terminal then leaves the "none found" line out, as the note says why
    contention_skipped: str | None = None
    # False when the input holds nothing these checks read (a run recorded without the profiler): the
    # notes say why, and the terminal prints no "none found" line
    checked: bool = True
    # mismatched layouts measured within SLOWDOWN_FLAG of their reference: no cost, so not findings
    unflagged: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FINDING_COLUMNS))
    # collectives of unknown size that an SM-filling kernel overlapped: not judged (contention.unsized_overlaps)
    contention_unjudged: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=UNSIZED_COLUMNS))

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "notes": list(self.notes),
                "findings": [_clean({k: r[k] for k in JSON_FINDING_KEYS}) for _, r in self.findings.iterrows()],
                "unflagged": [_clean({k: r[k] for k in JSON_FINDING_KEYS}) for _, r in self.unflagged.iterrows()],
                "contention": [_clean(dict(r)) for _, r in self.contention.iterrows()],
                "contention_unjudged": [_clean(dict(r)) for _, r in self.contention_unjudged.iterrows()]}


def _clean(d: dict) -> dict:
    """JSON-safe values: numpy scalars → python, NaN and ±inf → None, a byte count as an integer (a float
    column's 77266944.0 reads as a measurement, not a size)."""
    out = {}
    for k, v in d.items():
        if hasattr(v, "item") and not isinstance(v, (list, dict)):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, float) and (k == "bytes" or k.endswith("_bytes")) and v.is_integer():
            v = int(v)
        out[k] = v
    return out


def split_unflagged(findings: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(findings, unflagged): rows whose measured slowdown is below SLOWDOWN_FLAG go to `unflagged` (with
    no severity: nothing is found to cost time); rows without a slowdown (no reference) stay findings."""
    no_cost = (pd.to_numeric(findings["slowdown"], errors="coerce") < SLOWDOWN_FLAG).to_numpy(dtype=bool)
    unflagged = findings[no_cost].reset_index(drop=True)
    if "severity" in unflagged:
        unflagged["severity"] = None
    return findings[~no_cost].reset_index(drop=True), unflagged


def unflagged_summary(unflagged: pd.DataFrame) -> tuple[int, dict[str, int], float, int] | None:
    """What the unflagged rows add up to: their count, the count per op (without the `aten::` prefix, in
    first-seen order), the largest measured slowdown, and how many ran faster than their reference by
    SLOWDOWN_FLAG or more (a mismatched op beating its aligned twin that far says the reference was one slow
    measurement, not that the mismatch is free); None when there are none."""
    if not len(unflagged):
        return None
    ops = unflagged["op"].astype(str).str.removeprefix("aten::").value_counts(sort=False)
    slowdown = pd.to_numeric(unflagged["slowdown"])
    return (len(unflagged), {str(op): int(n) for op, n in ops.items()}, float(slowdown.max()),
            int((slowdown <= 1 / SLOWDOWN_FLAG).sum()))


def param_shapes(config: dict) -> dict[str, list[int]]:
    """label → parameter shape from a run's config.json: param_table `shape` when written, else the
    optimizer's `shards` view (the parameter's own shape for 2-D labels; a same-size view for banks)."""
    cfg = (config or {}).get("config") or {}
    out = {r["label"]: list(r["shape"]) for r in cfg.get("param_table") or [] if r.get("shape")}
    for label, sh in (cfg.get("shards") or {}).items():
        if label not in out and sh.get("view"):
            out[label] = list(sh["view"])
    return out


def device_name(config: dict) -> str | None:
    """The first GPU's name in the trace's deviceProperties; None where there is none, or it is no string
    (a trace names its device as it likes: a number names none this project has measured)."""
    props = (config or {}).get("deviceProperties") or []
    name = props[0].get("name") if props and isinstance(props, list) and isinstance(props[0], dict) else None
    return name if isinstance(name, str) else None


NO_PROFILE_NOTE = ("No profiler trace in this run directory (recorded without --profile): layout mismatches and "
                   "SM contention are read from one; record with `commscope run --profile START:STOP`, or "
                   "`commscope.record(..., profile_steps=\"START:STOP\")` in your own script.")
OUTSIDE_STEPS_NOTE = ("The run's profiler trace covers none of the selected steps: layout mismatches and SM "
                      "contention are read from it; choose --steps inside the profiled window.")


def layout_report(trace: Any, *, peak_gbps: float | None = None, min_numel: int = 4096,
                  min_inflation: float = 1.2, profiled: bool | None = None) -> LayoutReport:
    """`profiled`: whether the input held profiled ops or kernels before a step selection emptied `trace`
    of them (None: judged from `trace`), which picks the note of a run with nothing to check."""
    name = device_name(trace.config)
    if trace.source == "run" and trace.ops.empty and trace.kernels.empty:
        # a valid run with nothing to conclude here: empty findings and the reason, not an error
        note = OUTSIDE_STEPS_NOTE if profiled else NO_PROFILE_NOTE
        return LayoutReport(pd.DataFrame(columns=FINDING_COLUMNS), pd.DataFrame(columns=CONTENTION_COLUMNS), name,
                            [note], "no profiler trace", checked=False)
    regions = trace.extra.get("kineto_regions") if trace.source == "run" else None
    regions = trace.regions if regions is None or regions.empty else regions
    shapes = param_shapes(trace.config)
    high = find_layout_mismatches(trace.ops, regions, trace.hooks, device_name=name, peak_gbps=peak_gbps,
                                  param_shapes=shapes, min_numel=min_numel)
    low = kernel_layout_evidence(trace.kernels, trace.ops, device_name=name, peak_gbps=peak_gbps)
    parts = [f for f in (high, low) if len(f)]
    findings = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FINDING_COLUMNS)
    findings, unflagged = split_unflagged(findings)
    limits = device_limits(trace.config)
    contention = find_sm_contention(trace.collectives, trace.kernels, limits, min_inflation=min_inflation)
    unjudged = unsized_overlaps(trace.collectives, trace.kernels, limits)
    notes, skipped = [], None
    unusable = [p for p in trace.problems if NOT_A_SHAPE in p]
    no_shapes = not trace.ops["dims"].map(lambda d: isinstance(d, list) and any(d)).any()
    if no_shapes:
        notes.append("No usable recorded shapes: stride/layout findings need them, so only kernel-name evidence is "
                     "checked." if unusable else
                     # the ops frame holds only ops that recorded shapes: empty, it cannot tell a trace without
                     # cpu ops from one profiled with record_shapes=False, so the note names both
                     "No cpu op with recorded shapes in the input (none recorded, or torch.profiler ran with "
                     "record_shapes=False): stride/layout findings need them, so only kernel-name evidence is "
                     "checked." if trace.ops.empty else
                     "No recorded shapes (torch.profiler record_shapes=False): stride/layout findings need them, "
                     "so only kernel-name evidence is checked.")
    if unusable:
        notes.append(f"Recorded shapes that cannot be used are taken as unknown in {len(unusable)} trace file(s) "
                     f"(an op without shapes is judged by kernel evidence only), e.g. {unusable[0]}")
    if trace.kernels.empty:
        skipped = "no GPU kernels"
        notes.append("No GPU kernels: kernel-only layout evidence and SM contention do not apply.")
    elif limits is None:
        skipped = "device properties missing"
        peak = "" if peak_gbps is not None else (
            "; the device's peak bandwidth is unknown (give --peak-gbps), so a kernel is judged only against a "
            "faster aligned peer in the trace")
        notes.append(f"Device properties missing (no deviceProperties with an SM count): SM contention is not "
                     f"judged ({len(trace.kernels)} GPU kernels in the input){peak}.")
    unlinked = int((findings["where"] == UNLINKED).sum()) if len(findings) else 0
    if unlinked:
        notes.append(f"{unlinked} kernel-only finding(s) have no place: their kernel is not linked to a cpu op "
                     f"with recorded shapes (no such op carries its External id: launched before the profiler saw its "
                     f"op, or ids that do not link them), though {len(trace.ops):,} cpu ops recorded shapes.")
    if len(unjudged):
        notes.append(_unjudged_note(unjudged))
    # neither check could run (no shapes for the stride check, no kernels for the kernel check): no finding is
    # no evidence of no mismatch, so no "none found" line; the notes say why
    checked = not (no_shapes and trace.kernels.empty)
    return LayoutReport(findings, contention if len(contention) else pd.DataFrame(columns=CONTENTION_COLUMNS),
                        name, notes, skipped, checked=checked, unflagged=unflagged, contention_unjudged=unjudged)


def _unjudged_note(unjudged: pd.DataFrame) -> str:
    ranks = int_ranges(sorted({int(r) for r in unjudged["rank"]}))
    return (f"SM contention is not judged for {len(unjudged)} collective(s) of unknown size that an SM-filling "
            f"kernel overlapped (rank(s) {ranks}, up to {unjudged['duration_us'].max():,.1f} µs; in a Kineto "
            "trace: launched before the profiling window, so no op recorded their size): one op's collectives "
            "take from tens of µs to milliseconds with their size, so none gives them a baseline "
            "(`contention_unjudged` in --json lists them).")


KIND_ORDER = {"stride order": 0, "broadcast": 1, "kernel evidence": 2}


def grouped(findings: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct finding (its `kind` among the keys): count, summed time and saving, median
    GB/s; stride-order findings first, then broadcast reads, then kernel evidence, each by time."""
    if findings.empty:
        return findings
    f = findings.assign(_dims=findings["dims"].map(str), _strides=findings["strides"].map(str),
                        kind=findings["kind"].fillna("kernel evidence") if "kind" in findings else "kernel evidence")
    keys = ["kind", "op", "_dims", "_strides", "where", "confidence", "deliberate"]
    g = f.groupby(keys, sort=False, dropna=False).agg(
        count=("rank", "size"), kernel=("kernel", "first"), dims=("dims", "first"), strides=("strides", "first"),
        duration_us=("duration_us", "sum"), achieved_gbps=("achieved_gbps", "median"),
        peak_gbps=("peak_gbps", "first"), est_saving_us=("est_saving_us", "sum"),
        slowdown=("slowdown", "median"), peak_source=("peak_source", "first")).reset_index()
    g["severity"] = [severity(x) for x in g["slowdown"]]
    g["pct_of_peak"] = 100 * g["achieved_gbps"] / g["peak_gbps"]
    # stride-order mismatches first (what a layout change fixes), then broadcast reads, then kernel evidence
    g["_kind"] = g["kind"].map(KIND_ORDER).fillna(len(KIND_ORDER))
    return g.sort_values(["_kind", "duration_us"], ascending=[True, False]).drop(columns=["_kind"])


def short_kernel(name: str | None, width: int = 60) -> str:
    """`void at::native::elementwise_kernel<128, 4, …>(…)` → `elementwise_kernel<128, 4, …>`, at most
    `width` characters (the terminal table's narrow column: `vectorized_elementwise_kernel<8, …>`
    becomes `vectorized_ew<8, …>`)."""
    if not isinstance(name, str):
        return "—"
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"^at::native::(\(anonymous namespace\)::)?", "", name)
    m = re.match(r"([\w:]+)(<\s*\d+(?:,\s*\d+)?)?", name)
    base = m.group(1) + ((m.group(2) + ", …>") if m and m.group(2) else "") if m else name
    if len(base) > width:
        base = base.replace("elementwise_kernel", "ew")
    return base if len(base) <= width else base[:width - 1] + "…"


def readable_kernel(name: str, width: int = 60) -> str:
    """A kernel's name as the page shows it: whole up to `width` characters, else short_kernel's form (a
    CUTLASS template name runs to ~1,500 characters)."""
    return name if len(name) <= width else short_kernel(name, width)
