"""The loaded data model: the `Trace` dataclass and the column contract of its frames (docs/frames.md).

Both readers (run directories and Kineto traces) build their frames through `frame()`, so every frame
has every column in a fixed order even when empty, and analyzers never need to test for a column.
Times are int64 nanoseconds on one common axis; a time column some rows lack is pandas' nullable Int64
(<NA> = missing), never float: float64 resolves epoch nanoseconds only to 256 ns.

A run's fault evidence (docs/faults.md) — the watchdog/inflight reports and NCCL Flight Recorder dumps
it left — has its own frames (`FaultEvidence`, columns in EVIDENCE_COLUMNS): it is not on every rank and
not in Kineto traces, and `select_steps` keeps it whole (a hang is evidence about the run, not a step).

Also here: the small vocabularies shared by both readers — normalized collective op names and dtype
sizes — step assignment by searchsorted, and `match_positions`, the Kineto reader's kernel → launch join.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

COLUMNS: dict[str, list[str]] = {
    # start_ns/end_ns: the window per-step figures use (device time on GPU traces), `basis` says which;
    # host_start_ns/host_end_ns: the host's own step range (equal to the window where basis is "host")
    "steps": ["rank", "step", "start_ns", "end_ns", "loss", "basis", "host_start_ns", "host_end_ns"],
    "collectives": ["rank", "step", "label", "phase", "op", "bytes", "dtype", "group", "group_size", "seq",
                    "call_ns", "return_ns", "wait_ns", "wait_end_ns", "start_ns", "end_ns", "stream",
                    "timing", "label_source", "end_at_wait"],
    "compute": ["rank", "step", "name", "start_ns", "end_ns", "stream", "kind"],
    "regions": ["rank", "step", "micro_step", "name", "start_ns", "end_ns", "compute"],
    "hooks": ["rank", "step", "micro_step", "label", "position", "t_ns"],
    "ops": ["rank", "name", "start_ns", "end_ns", "tid", "external_id", "dims", "strides", "dtypes",
            "kernel_names", "kernel_ns", "kernel_dur_ns", "grids"],
    "kernels": ["rank", "name", "stream", "start_ns", "end_ns", "correlation", "external_id", "grid", "block",
                "is_comm"],
}


# A collective some rank launched, finished or not: the rows of `FaultEvidence.inflight` and
# `.flight_recorder`, and of doctor's launch table (analyze.launches). Values are kept as the file gave them.
LAUNCH_COLUMNS = ["rank", "group", "group_size", "seq", "label", "op", "bytes", "dtype", "step", "call_ns", "wait_ns",
                  "finished", "source"]
EVIDENCE_COLUMNS: dict[str, list[str]] = {
    # one row per evidence file: kind "watchdog" | "inflight" | "flight_recorder"; fired_ns: the watchdog's
    # firing time (None for the other kinds); blocked_at: where the watchdog found the rank's main thread,
    # its innermost user-code frame ("optimizer.py:327 step: handle.wait()"; None for the other kinds, or
    # when the report holds no such frame); waiting_on: the collective the watchdog found the rank waiting
    # on, (op, label, group, seq) (None for the other kinds, or when the report names none)
    "reports": ["rank", "kind", "path", "fired_ns", "blocked_at", "waiting_on"],
    "inflight": LAUNCH_COLUMNS,
    "flight_recorder": LAUNCH_COLUMNS,
}


# Columns a reader may leave out and frame() fills with something other than NaN: a steps frame built
# from host records alone (run directories, CPU traces) has host windows; collectives of a run directory
# carry the label the recorder was given.
# `collectives.label_source`: where its label comes from — "recorder" (run directories), "scope" (a
# `commscope:<label>:<phase>` range), "stack" (a user-code Python frame), "size" (a --label-map size,
# commscope.analyze.labels), "name" (its own name: generic).
LABEL_SOURCES = ("recorder", "scope", "stack", "size", "name")
STEP_BASES = ("device-annotation", "launch-correlation", "host")
_DEFAULTS: dict[tuple[str, str], Any] = {("steps", "basis"): "host", ("collectives", "label_source"): "recorder"}
_COPIES: dict[tuple[str, str], str] = {("steps", "host_start_ns"): "start_ns", ("steps", "host_end_ns"): "end_ns"}


def is_ns(col: str) -> bool:
    return col.endswith("_ns")


def ns_array(values: list) -> pd.arrays.IntegerArray:
    """Exact nullable int64 from Python ints / None / NaN (float64 of epoch ns only resolves 256 ns)."""
    return pd.array([None if v is None or v != v else int(v) for v in values], dtype="Int64")


def frame(kind: str, data: dict[str, Any] | pd.DataFrame | None = None) -> pd.DataFrame:
    """A frame of `kind` with exactly the contract's columns (missing ones filled with NaN / <NA>).

    Time columns (`*_ns`) are int64 when complete, nullable Int64 when some are missing — never float.
    """
    cols = COLUMNS[kind]
    built_here = not isinstance(data, pd.DataFrame)
    df = pd.DataFrame(data) if built_here else data
    dtypes = dict(df.dtypes.items())  # one lookup per column instead of a Series per column
    for c in cols:
        if c not in dtypes and (kind, c) in _COPIES and _COPIES[kind, c] in df:
            df[c] = df[_COPIES[kind, c]].copy()
            dtypes[c] = df[c].dtype
        elif c not in dtypes and (kind, c) in _DEFAULTS:
            df[c] = pd.Series([_DEFAULTS[kind, c]] * len(df), index=df.index, dtype=object)
            dtypes[c] = df[c].dtype
        if c not in dtypes:
            df[c] = pd.array([None] * len(df), dtype="Int64") if is_ns(c) else np.nan
        elif is_ns(c) and dtypes[c].kind == "f":
            if df[c].notna().any() and df[c].abs().max() > 2**53:
                raise ValueError(f"{kind}.{c} holds epoch ns as float64 (lossy); build it with ns_array()")
            df[c] = df[c].round().astype("Int64")
    if built_here and list(df.columns) == cols and df.index.equals(pd.RangeIndex(len(df))):
        return df  # already the contract's frame, and nobody else holds it: no reordering copy
    return df[cols].reset_index(drop=True)


def unlinked(kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel, whether it has no usable `correlation` (missing or negative): it cannot be joined to the
    cpu op that launched it, which both the loader's collectives and HTA's analyses join kernels by."""
    return pd.to_numeric(kernels["correlation"], errors="coerce").fillna(-1).to_numpy() < 0


def rel(col: pd.Series | np.ndarray, origin: int) -> np.ndarray:
    """Nanoseconds since `origin` as float64, NaN where missing; exact (integers subtracted first)."""
    # fast paths (called for every time column by every analyzer): numpy int64, and nullable Int64 via its
    # data and mask, without building intermediate Series
    arr = col.array if isinstance(col, pd.Series) else col
    if isinstance(col, pd.Series) and isinstance(col.dtype, np.dtype):
        arr = col.to_numpy()
    if isinstance(arr, np.ndarray) and arr.dtype.kind == "i":
        return (arr.astype(np.int64, copy=False) - np.int64(origin)).astype(np.float64)
    if isinstance(arr, pd.arrays.IntegerArray) and arr.dtype.kind == "i":
        out = (arr._data.astype(np.int64, copy=False) - np.int64(origin)).astype(np.float64)
        out[arr._mask] = np.nan
        return out
    if isinstance(col, np.ndarray):
        col = pd.Series(col)
    if pd.api.types.is_integer_dtype(col.dtype):
        return (col.astype("Int64") - int(origin)).to_numpy(dtype="float64", na_value=np.nan)
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype="float64") - float(origin)


def origin_ns(trace: "Trace") -> int:
    """A time inside the trace: analyzers compute in float64 ns relative to it, which is exact."""
    for df, c in ((trace.steps, "start_ns"), (trace.compute, "start_ns"), (trace.collectives, "end_ns"),
                  (trace.kernels, "start_ns"), (trace.regions, "start_ns")):
        if len(df) and df[c].notna().any():
            return int(df[c].min())
    return 0


@dataclass
class FaultEvidence:
    """What a run left about how it ended, beyond events.jsonl (docs/faults.md), as frames.

    `reports`: which rank left which evidence file; `inflight`: the collectives listed in watchdog.json and
    inflight.json (launched, completion unknown: `finished` False, `source` the file name);
    `flight_recorder`: the Flight Recorder dumps' collective entries (`seq` = NCCL's collective_seq_id,
    `source` "flight_recorder"). `error`: why some evidence file could not be read (then all frames are
    empty): the loader never fails on it, `doctor` reports it and the HTML report goes on without it."""

    reports: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EVIDENCE_COLUMNS["reports"]))
    inflight: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LAUNCH_COLUMNS))
    flight_recorder: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LAUNCH_COLUMNS))
    error: str | None = None

    def ranks(self, kind: str) -> list[int]:
        """Sorted ranks that left a report of `kind`."""
        r = self.reports
        return sorted(int(x) for x in r.loc[r["kind"] == kind, "rank"])


@dataclass
class Trace:
    """Everything the analyzers need, for all ranks of one run (see docs/frames.md)."""

    source: str  # "run" | "kineto"
    path: str
    world_size: int
    backend: str | None
    device: str | None
    config: dict = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    steps: pd.DataFrame = field(default_factory=lambda: frame("steps"))
    collectives: pd.DataFrame = field(default_factory=lambda: frame("collectives"))
    compute: pd.DataFrame = field(default_factory=lambda: frame("compute"))
    regions: pd.DataFrame = field(default_factory=lambda: frame("regions"))
    hooks: pd.DataFrame = field(default_factory=lambda: frame("hooks"))
    ops: pd.DataFrame = field(default=None, repr=False)  # lazy: see `_ops_loader` and the property below
    kernels: pd.DataFrame = field(default_factory=lambda: frame("kernels"))
    # analyzer-only material beyond the contract (e.g. the cpu ops HTA counts as GPU activity)
    extra: dict = field(default_factory=dict)
    faults: FaultEvidence = field(default_factory=FaultEvidence)  # run directories only
    # `ops` (shapes, strides, linked kernels of every cpu op) is half of a Kineto parse and only the layout
    # analysis needs it: loaders built `with_ops` set it at once, others set a loader and the frame is
    # built on first access.
    _ops_loader: Callable[[], pd.DataFrame] | None = field(default=None, repr=False, compare=False)
    # Set beside `_ops_loader` by loaders that can parse some ranks' files alone: the ops of a set of ranks
    # (None or a frame holding at least those ranks' rows). A rank selection taken before `ops` is built
    # reads through it, so a large job's report parses the ops of the few ranks its layout section reads.
    _ops_of_ranks: Callable[[frozenset], pd.DataFrame | None] | None = field(default=None, repr=False,
                                                                            compare=False)

    @property
    def run_args(self) -> dict:
        """The trainer's options of a `commscope run` directory (config.json's `args`); {} for any other
        input, or where the run's config does not say."""
        args = (self.config.get("config") or {}).get("args") if self.source == "run" else None
        return args if isinstance(args, dict) else {}

    def _same_job(self) -> "Trace":
        """A Trace of the same job and input (source, path, world size, config, problems, faults) and no
        events yet: the start of a selection."""
        return Trace(**{k: getattr(self, k) for k in ("source", "path", "world_size", "backend", "device",
                                                      "config", "problems", "faults")})

    def ops_of(self, ranks) -> pd.DataFrame:
        """The `ops` rows of `ranks`: while `ops` is not built and the loader can parse ranks apart
        (`_ops_of_ranks`), from those ranks' files alone (`ops` stays unbuilt); else selected from `ops`."""
        keep = frozenset(int(r) for r in ranks)
        if self.__dict__.get("_ops_loader") is not None and self._ops_of_ranks is not None:
            df = frame("ops", self._ops_of_ranks(keep))
        else:
            df = self.ops
        return df if not len(df) else df[df["rank"].isin(keep)].reset_index(drop=True)

    def select_ranks(self, ranks: list[int]) -> "Trace":
        """A copy holding only the events of `ranks` (world size and config unchanged): for analyses a
        large job's report runs on a few representative ranks. Its `ops` come from `ops_of(ranks)` on
        first access."""
        keep = frozenset(int(r) for r in ranks)
        out = self._same_job()
        out.ranks = [r for r in self.ranks if r in keep]
        for kind in ("steps", "collectives", "compute", "regions", "hooks", "kernels"):
            df = getattr(self, kind)
            setattr(out, kind, df[df["rank"].isin(keep)].reset_index(drop=True))
        out.extra = {k: (v[v["rank"].isin(keep)].reset_index(drop=True)
                         if isinstance(v, pd.DataFrame) and "rank" in v else v) for k, v in self.extra.items()}
        out.ops = None
        out._ops_loader = lambda: self.ops_of(keep)
        out._ops_of_ranks = lambda rs: self.ops_of(keep & rs)
        return out

    def select_steps(self, steps: tuple[int, int] | None) -> "Trace":
        """A copy restricted to steps in [a, b) (events outside any step are dropped too)."""
        if steps is None:
            return self
        a, b = steps
        out = self._same_job()
        out.ranks, out.extra = self.ranks, self.extra
        for kind in ("steps", "collectives", "compute", "regions", "hooks"):
            df = getattr(self, kind)
            setattr(out, kind, df[(df["step"] >= a) & (df["step"] < b)].reset_index(drop=True))
        if len(self.steps):
            sel = out.steps
            # cpu ops are host work: the host's step ranges bound them, each rank's by its own (one window
            # over all ranks would take a rank ahead of the others into its next step)
            hs, he = ("host_start_ns", "host_end_ns") if "host_start_ns" in sel else ("start_ns", "end_ns")

            def window(df: pd.DataFrame) -> pd.DataFrame:
                return _in_rank_windows(df, sel, hs, he)

            k = self.kernels
            if self.source == "kineto" and "step" in k:
                # a Kineto kernel carries the step that launched it (load.device_steps): the device may
                # still run the previous step's kernels inside a step's time range
                out.kernels = k[(k["step"] >= a) & (k["step"] < b)].reset_index(drop=True)
            else:  # a run directory's profiler kernels are numbered by the profiler, not the recorder
                out.kernels = _in_rank_windows(k, sel, "start_ns", "end_ns")
            out.ops = None
            out._ops_loader = lambda: window(self.ops)
            out._ops_of_ranks = lambda rs: window(self.ops_of(rs))  # a row filter: commutes with ranks
        else:
            out.kernels = self.kernels
            out.ops = None
            out._ops_loader = lambda: self.ops
            out._ops_of_ranks = self.ops_of
        return out


def _in_rank_windows(df: pd.DataFrame, steps: pd.DataFrame, lo: str, hi: str) -> pd.DataFrame:
    """The rows of `df` that start inside their own rank's window, from the earliest `lo` to the latest `hi`
    of that rank's `steps` (a rank without steps keeps none)."""
    if not len(df) or not len(steps):
        return df.iloc[0:0].reset_index(drop=True)
    bounds = steps.groupby("rank")[[lo, hi]].agg({lo: "min", hi: "max"})
    start, rank = df["start_ns"], df["rank"]
    keep = (start >= rank.map(bounds[lo])) & (start <= rank.map(bounds[hi]))
    return df[keep.fillna(False).to_numpy(bool)].reset_index(drop=True)  # an unknown bound keeps nothing


def _get_ops(self: Trace) -> pd.DataFrame:
    loader = self.__dict__.get("_ops_loader")
    if loader is not None:  # a loader set after any earlier access wins
        self.__dict__["_ops_value"] = frame("ops", loader())
        self.__dict__["_ops_loader"] = None
    elif self.__dict__.get("_ops_value") is None:
        self.__dict__["_ops_value"] = frame("ops")
    return self.__dict__["_ops_value"]


def _set_ops(self: Trace, value: pd.DataFrame | None) -> None:
    self.__dict__["_ops_value"] = value
    self.__dict__["_ops_loader"] = None  # an explicit frame replaces any pending load


# After the dataclass is built: `ops` stays an __init__ argument but reads/writes go through these.
Trace.ops = property(_get_ops, _set_ops)


# --- shared vocabularies -------------------------------------------------------------------------------

_OP_PATTERNS = [
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
    ("all_gather", re.compile(r"all_?gather", re.I)),
    ("all_reduce", re.compile(r"all_?reduce", re.I)),
    ("all_to_all", re.compile(r"all_?to_?all", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("barrier", re.compile(r"barrier", re.I)),
    ("send", re.compile(r"(^|[_:])send", re.I)),
    ("recv", re.compile(r"(^|[_:])recv", re.I)),
    ("reduce", re.compile(r"(^|[_:])reduce", re.I)),
]


# in the group of a rank's send or recv, `<group> (point-to-point, rank R)`: not a collective of its group,
# its peer not matched (load.kineto_comms._point_to_point)
P2P_MARK = " (point-to-point, rank "
# in the group of a collective whose members disagree, `<group> (unpaired, rank R)` (load.loader._pair)
UNPAIRED_MARK = " (unpaired, rank "


def normalize_op(name: str) -> str:
    """`_reduce_scatter_base`, `c10d::allgather_`, `ncclDevKernel_AllReduce_Sum_f32_RING_LL` → op name."""
    base = name.split("(")[0]
    base = re.sub(r"^(ncclDevKernel|ncclKernel)_", "", base)
    for op, pat in _OP_PATTERNS:
        if pat.search(base):
            return op
    return base or "unknown"


# Element sizes by dtype name: torch's (`torch.bfloat16`), short forms, and the C++ spellings Kineto records
# in an op's "Input type" (`c10::BFloat16`, `long int`, `signed char`, `c10::complex<float>`, ...).
DTYPE_SIZES = {
    "float": 4, "float32": 4, "fp32": 4, "f32": 4, "int": 4, "int32": 4, "half": 2, "float16": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2, "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8, "byte": 1,
    "uint8": 1, "unsigned char": 1, "char": 1, "signed char": 1, "int8": 1, "bool": 1, "short": 2,
    "short int": 2, "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "complex<float>": 8, "complex64": 8,
    "complex<double>": 16, "complex128": 16,
}


def dtype_size(dtype: Any) -> float:
    """Bytes per element of a dtype name (see DTYPE_SIZES), NaN when unknown or not a string."""
    if not isinstance(dtype, str):
        return np.nan
    name = dtype.lower().removeprefix("torch.").removeprefix("c10::")
    return DTYPE_SIZES.get(name, np.nan)


def assign_steps(rank_of_event: np.ndarray, t_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Step index of each event: searchsorted of its time into its rank's step starts; −1 outside a step."""
    out = np.full(len(t_ns), -1, dtype=np.int64)
    if len(steps) == 0 or len(t_ns) == 0:
        return out
    o = int(steps["start_ns"].min())
    t = rel(t_ns if isinstance(t_ns, pd.Series) else pd.Series(t_ns), o)
    # per rank by positions, not a groupby of sub-frames (called three times per rank file while loading)
    s_rank, s_start = steps["rank"].to_numpy(), steps["start_ns"].array
    starts_all, ends_all = rel(steps["start_ns"], o), rel(steps["end_ns"], o)
    ids_all = steps["step"].to_numpy(np.int64)
    for rank in pd.unique(s_rank):
        pos = np.flatnonzero(s_rank == rank)  # none for a NaN rank, which the groupby dropped
        pos = pos[s_start[pos].argsort()]  # sort_values("start_ns")'s order: the same argsort
        mask = np.asarray(rank_of_event) == rank
        out[mask] = step_of(t[mask], starts_all[pos], ends_all[pos], ids_all[pos])
    return out


def step_of(t: np.ndarray, starts: np.ndarray, ends: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Step id of each time `t` within one rank's steps (sorted by start), −1 outside every step or NaN."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & ~np.isnan(t)
    ok[ok] &= t[ok] <= ends[i[ok]]
    res = np.full(len(t), -1, dtype=np.int64)
    res[ok] = ids[i[ok]]
    return res


def match_positions(keys: pd.Series, table_keys: pd.Series) -> np.ndarray:
    """Per key, the row position of the row of `table_keys` holding it, −1 if none; the last such row when
    several hold it; a missing key (None/NaN) matches nothing.

    The loader's one kernel → launch join by correlation id (launch times, the launching thread of
    collectives, the External id of the op that launched a kernel): a kernel has one launch, so where
    merged or damaged traces repeat a correlation id the last launch is taken."""
    if table_keys.is_unique:
        pos = pd.Index(table_keys).get_indexer(keys)
    else:
        last = np.flatnonzero(~table_keys.duplicated(keep="last").to_numpy())
        sub = pd.Index(table_keys.to_numpy()[last]).get_indexer(keys)
        pos = np.where(sub >= 0, last[sub], -1)
    return np.where(keys.isna().to_numpy(), -1, pos)
