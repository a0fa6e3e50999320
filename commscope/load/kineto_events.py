"""A Kineto chrome trace's bytes → `Events`: per kind of event (device activity, runtime launches, cpu
ops, user annotations, and the user-code Python frames on threads that launch collectives), the columns
that `commscope.load.kineto` shapes into frames (after commscope.load.kineto_values has checked them).

Two readers, one result:
- typed (the fast path): msgspec decodes each event into a Struct naming only the fields commscope reads,
  its `args` included (one Struct of the keys read of any kind of event, in the same pass); the decoder
  skips everything else without building Python objects, and shapes (`Input Dims`, …) stay raw JSON until
  read. Events are a union tagged by `ph`: only complete events (`X`, the only phase read) get fields;
  the others (a third of a trace: `s`/`f` flow events) decode to field-less Structs. This is 5–10× less
  work than decoding ~10⁵ dicts, which dominated loading.
- generic: orjson to plain dicts and one loop over them. Used for any document the typed reader rejects
  (odd types, an `args` that is not an object, a missing or unknown `ph`, a top-level array, broken
  JSON…), so unusual or broken input behaves exactly as it did, errors included.

Invariant: for every document the typed reader accepts, both readers return equal `Events`
(tests/unit/test_load_kineto.py checks it on the 8×H100 fixture and the gloo trace). Columns hold the
values as decoded (`ts`/`dur` in µs); missing optional values are the same defaults in both readers.
Exceptions, by design:
- cpu op shapes serve the `ops` frame (built `with_ops`) and gloo pairing; without `with_ops` the typed
  reader leaves `o_strides` / `o_types` empty and fills `o_dims` only for collective launches and
  executions (names `c10d::…`, `gloo:…`, `record_param_comms`), None elsewhere — decoding every op's shapes was half of its work;
- `o_args[i]` is the `args` dict of cpu op i: whole in the generic reader, only the keys collective
  matching reads (ARG_KEYS) in the typed one, built on access (only collective launches are read).
"""
from __future__ import annotations

from typing import Any, Optional, Union

import msgspec

from commscope.errors import UserError
from commscope.util.outputs import exported_trace
from commscope.util.text import printable
from commscope.load.files import FileProblem, decode_json
from commscope.load.kineto_values import MAX_SHAPE_BYTES, is_int, is_num
from commscope.load.stack_labels import PY_CAT, frame_label

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}


class Events:
    """Columns of one trace (see the module docstring); plain lists, in file order within each kind."""

    def __init__(self) -> None:
        self.doc: Any = None  # what was decoded (pool workers keep it alive: see kineto.keep_documents)
        self.di: dict = {}
        self.base = 0
        self.device_properties: Any = None
        self.k_name, self.k_ts, self.k_dur, self.k_stream, self.k_corr = [], [], [], [], []
        self.k_ext, self.k_grid, self.k_block, self.k_kind = [], [], [], []
        self.l_corr, self.l_tid, self.l_ts, self.l_ext = [], [], [], []
        self.o_name, self.o_tid, self.o_ts, self.o_dur, self.o_ext = [], [], [], [], []
        self.o_dims, self.o_strides, self.o_types, self.o_hta_stream = [], [], [], []
        self.o_args: Any = []
        self.a_name, self.a_tid, self.a_ts, self.a_dur = [], [], [], []
        # `Input Dims` and `Input type` of the `nccl:<op>` / `rccl:<op>` user annotations, by their position
        # among the annotations: in some older traces they, nested inside `record_param_comms`, are all
        # that names and sizes a collective (commscope.load.kineto_comms)
        self.a_shapes: dict[int, tuple] = {}
        # `python_function` events (with_stack=True) that are user code, on threads that launch collectives
        # (commscope.load.stack_labels): name, tid, ts, dur
        self.p_name, self.p_tid, self.p_ts, self.p_dur = [], [], [], []
        # the GPU-side `ProfilerStep#N` annotations (gpu_user_annotation): name, ts, dur (device windows,
        # load.device_steps; HTA's cut-off, kineto.parse_file)
        self.gpu_step_name: list = []
        self.gpu_step_ts: list = []
        self.gpu_step_dur: list = []
        # whether k_stream, k_corr, k_ext, l_corr, l_ext, o_ext hold Python ints only (the typed reader's
        # int fields), so kineto.column need not check the type of every value
        self.ints = False
        # what the reader dropped or could not use, by reason → count (kineto.parse_file words them)
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n


class NotATrace(FileProblem):
    """A file whose content is no chrome trace (not JSON, or JSON without a `traceEvents` list): in a folder
    of traces the loader skips it with `skip_line`, where a lone file is an error."""

    def __init__(self, path: str, what: str):
        super().__init__(path, what)
        # a problem line reaches report --json: a file name's undecodable bytes as \xNN, not lone surrogates
        self.skip_line = f"{printable(path)}: {what.removeprefix('is ')}; skipped"


def read_events(path: str, raw: bytes, with_ops: bool) -> Events:
    """Events of the trace whose bytes are `raw`; `with_ops` also fills `o_strides` / `o_types`."""
    # the typed decoder skips fields it does not read without checking their text: JSON is UTF-8, and a
    # file that is not is refused whole (isascii is a fast scan; only other text is decoded to check it)
    if exported_trace(raw):  # `commscope export --perfetto`'s output: a whole job's trace, no rank's
        raise NotATrace(path, "is a trace commscope exported (export --perfetto), not a profiler's trace")
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotATrace(path, "is not UTF-8 text") from None
    try:
        doc = (_SHAPE_DOC if with_ops else _DOC).decode(raw)
    except msgspec.DecodeError:  # includes ValidationError: not the shape the typed reader expects
        return _generic(path, raw)
    except RecursionError:  # arrays or objects nested deeper than any decoder's stack: no trace is like that
        raise NotATrace(path, "nests JSON arrays or objects too deeply to be a chrome trace") from None
    ev = _check_header(path, doc.traceEvents, doc.distributedInfo, doc.baseTimeNanoseconds,
                       doc.deviceProperties)
    ev.doc = doc
    _typed(doc.traceEvents, ev, with_ops)
    ev.ints = True
    return ev


def _check_header(path: str, events: Any, di: Any, base: Any, props: Any) -> Events:
    """The header fields, typed: `distributedInfo` an object (else empty: kineto.parse_file then takes the
    rank from the file name), `baseTimeNanoseconds` a finite number (else 0, and the reason is kept),
    `deviceProperties` a list of objects (an entry that is not one is dropped, and the reason kept)."""
    if not isinstance(events, list):
        raise NotATrace(path, "is not a chrome trace (no traceEvents list)")
    ev = Events()
    if di is not None and not isinstance(di, dict):
        ev.drop("distributedInfo is not an object (ignored)")
    ev.di = di if isinstance(di, dict) else {}
    if base is None:
        ev.base = 0
    elif is_num(base) and abs(base) < 2**62:  # also False for NaN/inf; never converts a huge int to float
        ev.base = int(base)
    else:
        ev.base = 0
        ev.drop("baseTimeNanoseconds is not a finite number (taken as 0: times are relative)")
    if isinstance(props, dict):  # one device written as an object, not a list of one
        props = [props]
    if props is not None and not isinstance(props, list):
        ev.drop("deviceProperties is not a list of objects (ignored)")
        props = None
    elif props is not None and not all(isinstance(p, dict) for p in props):
        ev.drop("deviceProperties entries that are not objects (ignored)", sum(not isinstance(p, dict) for p in props))
        props = [p for p in props if isinstance(p, dict)]
    ev.device_properties = props
    return ev


# --- typed reader --------------------------------------------------------------------------------------

_UNSET = msgspec.UNSET
_ABSENT = msgspec.Raw(b"null")  # by identity: a raw-JSON key the `args` did not have (decodes to None)
# cpu ops whose `Input Dims` the collectives are sized from: gloo pairing, and the c10d / nccl ops that
# name an older trace's `record_param_comms` (commscope.load.kineto_comms)
_COLLECTIVE_OPS = ("c10d::", "gloo:", "nccl:", "rccl:")
_COMM_RANGES = ("nccl:", "rccl:")


class _Args(msgspec.Struct, gc=False, frozen=True):
    """`args` of any event, decoded in the same pass as the event: the keys read of kernels, launches
    and cpu ops, and the ones collective matching reads of its ops (ARG_KEYS). UNSET where absent,
    except `External id` (−1 for every kind) and raw JSON values (null, as the generic reader's .get).
    Shapes stay raw JSON: building them for every op was half the decode; they are decoded where read."""

    # ints (Kineto writes no other type; any other makes the document the generic reader's): their
    # columns skip the per-value type check (Events.ints)
    stream: Union[int, msgspec.UnsetType] = _UNSET
    correlation: Union[int, msgspec.UnsetType] = _UNSET
    external_id: int = msgspec.field(name="External id", default=-1)
    grid: msgspec.Raw = _ABSENT  # kernel launch shapes: decoded once per distinct value (_shared)
    block: msgspec.Raw = _ABSENT
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_ABSENT)
    types: msgspec.Raw = msgspec.field(name="Input type", default=_ABSENT)
    collective: Any = msgspec.field(name="Collective name", default=_UNSET)
    dtype: Any = _UNSET
    in_nelems: Any = msgspec.field(name="In msg nelems", default=_UNSET)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=_UNSET)
    group: Any = msgspec.field(name="Process Group Name", default=_UNSET)
    group_size: Any = msgspec.field(name="Group size", default=_UNSET)


class _ShapeArgs(_Args, gc=False, frozen=True):
    """With `with_ops`: strides too (only the `ops` frame reads them)."""

    strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_ABSENT)


# The `args` keys of a cpu op that `o_args` holds in the typed reader (the generic one keeps all): what
# kineto_comms reads of collective launches, with the _Args field of each.
ARG_KEYS = {"Collective name": "collective", "dtype": "dtype", "In msg nelems": "in_nelems",
            "Out msg nelems": "out_nelems", "Process Group Name": "group", "Group size": "group_size",
            "Input type": "types"}
_NO_ARGS, _NO_SHAPE_ARGS = _Args(), _ShapeArgs()


class _Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (`ph` "X"): the only phase commscope reads."""

    cat: Optional[str] = None
    name: str = ""
    tid: Any = None
    ts: float = 0
    dur: float = 0
    args: _Args = _NO_ARGS


class _ShapeEvent(_Event, gc=False):
    args: _ShapeArgs = _NO_SHAPE_ARGS


class _Skipped(msgspec.Struct, tag_field="ph", gc=False):
    """An event of any other phase: decoded to a field-less Struct, its contents skipped unbuilt (a third
    of a Kineto trace's events are `s`/`f` flow events). `cat` None routes it nowhere in `_typed`."""

    cat = None  # a class attribute, not a field


# Every phase of the Trace Event Format. An event of another phase, or without `ph`, makes the document
# one the typed reader rejects, so it is read by the generic reader (which ignores such events too).
_PHASES = ["B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O", "D", "M", "V",
           "v", "R", "c", "(", ")"]
_OTHER = tuple(msgspec.defstruct(f"_Phase_{ph}" if ph.isalpha() else f"_Phase_{ord(ph)}", [],
                                  bases=(_Skipped,), tag=ph, gc=False) for ph in _PHASES)


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[Union[(_Event,) + _OTHER]]
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


class _ShapeDoc(_Doc, gc=False):
    traceEvents: list[Union[(_ShapeEvent,) + _OTHER]]


_DOC = msgspec.json.Decoder(_Doc)
_SHAPE_DOC = msgspec.json.Decoder(_ShapeDoc)
_RAWS = msgspec.json.Decoder(list)


# What a shape's raw JSON longer than MAX_SHAPE_BYTES decodes to: a string, which check_shapes then
# counts and makes None (unknown shape) like any other value that is not a shape.
_TOO_LONG = msgspec.Raw(b'"(longer than MAX_SHAPE_BYTES)"')


def _capped(raw: msgspec.Raw) -> msgspec.Raw:
    return raw if len(raw) <= MAX_SHAPE_BYTES else _TOO_LONG


def _decode(raw: msgspec.Raw):
    return msgspec.json.decode(_capped(raw))


def _decode_raws(raws: list) -> list:
    """Raw JSON values decoded, each distinct text once and in one call (one JSON array of them), so equal
    values are one shared object (check_shapes judges each once; treat them as read-only); one longer than
    MAX_SHAPE_BYTES is not decoded (_TOO_LONG)."""
    keys = [bytes(_capped(r)) for r in raws]
    distinct = dict.fromkeys(keys)
    for k, v in zip(distinct, _RAWS.decode(b"[" + b",".join(distinct) + b"]")):
        distinct[k] = v
    return [distinct[k] for k in keys]


def _shared(raws: list) -> list:
    """Raw JSON values decoded, one object per distinct text: a few launch shapes repeat over thousands
    of kernels, and shared lists pickle to the parent process as references (and are not ~10⁴ more
    objects for it to build and for its garbage collector to scan). Treat them as read-only."""
    memo: dict = {}
    return [memo[k] if (k := bytes(r)) in memo else memo.setdefault(k, msgspec.json.decode(r))
            for r in map(_capped, raws)]


class _OpArgs:
    """`args` dicts of cpu ops, built on access from their _Args (the keys in ARG_KEYS that were present;
    only collective launches are read)."""

    def __init__(self, args: list) -> None:
        self._args = args

    def take(self, rows: list[int]) -> "_OpArgs":
        return _OpArgs([self._args[i] for i in rows])

    def __len__(self) -> int:
        return len(self._args)

    def __getitem__(self, i: int) -> dict:
        a = self._args[i]
        out = {}
        for key, attr in ARG_KEYS.items():
            v = getattr(a, attr)
            if v is not _UNSET and v is not _ABSENT:
                out[key] = _decode(v) if isinstance(v, msgspec.Raw) else v
        return out


def _typed(events: list, ev: Events, with_ops: bool) -> None:
    gpu, launch, ops, ann, gpu_ann, py = [], [], [], [], [], []
    route = {**{c: gpu for c in GPU_CATS}, **{c: launch for c in LAUNCH_CATS},
             "cpu_op": ops, "user_annotation": ann, "gpu_user_annotation": gpu_ann, PY_CAT: py}.get
    for e in events:  # the one loop over every event: keep it minimal (other phases have cat None)
        b = route(e.cat)
        if b is not None:
            b.append(e)

    ka = [e.args for e in gpu]
    ev.k_name = [e.name for e in gpu]
    ev.k_ts = [e.ts for e in gpu]
    ev.k_dur = [e.dur for e in gpu]
    ev.k_kind = [GPU_CATS[e.cat] for e in gpu]
    ev.k_stream = [-1 if a.stream is _UNSET else a.stream for a in ka]
    ev.k_corr = [-1 if a.correlation is _UNSET else a.correlation for a in ka]
    ev.k_ext = [a.external_id for a in ka]
    ev.k_grid = _shared([a.grid for a in ka])
    ev.k_block = _shared([a.block for a in ka])

    launch = [e for e in launch if e.args.correlation is not _UNSET and e.args.correlation is not None]
    ev.l_corr = [e.args.correlation for e in launch]
    ev.l_tid = [e.tid for e in launch]
    ev.l_ts = [e.ts for e in launch]
    ev.l_ext = [e.args.external_id for e in launch]

    # gloo executions on worker threads are recorded as user annotations in some versions: they are ops,
    # in file order among the cpu ops (a second pass, only for such traces; ~100× fewer annotations)
    if any(e.name.startswith("gloo:") for e in ann):
        ops = [e for e in events if e.cat == "cpu_op" or (e.cat == "user_annotation" and e.name.startswith("gloo:"))]
        ann = [e for e in ann if not e.name.startswith("gloo:")]
    oa = [e.args for e in ops]
    ev.o_name = [e.name for e in ops]
    ev.o_tid = [e.tid for e in ops]
    ev.o_ts = [e.ts for e in ops]
    ev.o_dur = [e.dur for e in ops]
    ev.o_ext = [a.external_id for a in oa]
    ev.o_hta_stream = [a.stream is not _UNSET for a in oa]
    ev.o_args = _OpArgs(oa)
    if with_ops:
        ev.o_dims = _decode_raws([a.dims for a in oa])
        ev.o_strides = _decode_raws([a.strides for a in oa])
        ev.o_types = _decode_raws([a.types for a in oa])
    else:  # shapes only where gloo pairing reads them (names tested once each: a few hundred distinct)
        coll = {n for n in set(ev.o_name) if n.startswith(_COLLECTIVE_OPS) or n == "record_param_comms"}
        ev.o_dims = [_decode(a.dims) if n in coll else None for a, n in zip(oa, ev.o_name)]
    ev.a_name = [e.name for e in ann]
    ev.a_tid = [e.tid for e in ann]
    ev.a_ts = [e.ts for e in ann]
    ev.a_dur = [e.dur for e in ann]
    ev.a_shapes = {i: (_decode(e.args.dims), _decode(e.args.types))
                   for i, e in enumerate(ann) if e.name.startswith(_COMM_RANGES)}
    gpu_steps = [e for e in gpu_ann if e.name.startswith("ProfilerStep#")]
    ev.gpu_step_name = [e.name for e in gpu_steps]
    ev.gpu_step_ts = [e.ts for e in gpu_steps]
    ev.gpu_step_dur = [e.dur for e in gpu_steps]
    if py:
        _keep_python_frames(ev, ((e.name, e.tid, e.ts, e.dur) for e in py))


def _launch_threads(ev: Events) -> set:
    """The threads that launch collectives: those of the cpu ops kineto_comms finds collectives from."""
    out = set()
    for n, t in zip(ev.o_name, ev.o_tid):
        if n == "record_param_comms" or n.startswith("c10d::"):
            try:
                out.add(t)
            except TypeError:  # an unhashable tid (a malformed trace) launches nothing we can match
                pass
    return out


def _keep_python_frames(ev: Events, frames) -> None:
    """Of the `python_function` events (name, tid, ts, dur), keep those that can label a collective
    (stack_labels.frame_label) on threads that launch collectives: a with_stack trace has one per Python call."""
    threads = _launch_threads(ev)
    if not threads:
        return
    for name, tid, ts, dur in frames:
        try:
            if tid not in threads:
                continue
        except TypeError:
            continue
        if frame_label(name) is not None:
            ev.p_name.append(name); ev.p_tid.append(tid); ev.p_ts.append(ts); ev.p_dur.append(dur)


# --- generic reader ------------------------------------------------------------------------------------

def _decode_lenient(path: str, raw: bytes) -> Any:
    """The document, also where it holds non-finite numbers (`NaN`, `Infinity`, `1e999`: what Python's json
    writes for them, which orjson refuses); they are then dropped where read (check_values). Anything
    else unreadable raises decode_json's one-line error."""
    try:
        return decode_json(path, raw)
    except UserError as err:
        import json

        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8 JSON even so: decode_json's message stands
            msg = str(err)
            raise NotATrace(path, msg[len(path) + 1:] if msg.startswith(f"{path} ") else msg) from None


def _generic(path: str, raw: bytes) -> Events:
    """Every complete event, each field checked for its type: an event whose name, ts or dur has the
    wrong type is dropped, an id (stream, correlation, External id) of the wrong type is taken as
    missing; either way the reason is counted in `Events.dropped` (never folded into figures)."""
    doc = _decode_lenient(path, raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise NotATrace(path, "is not a chrome trace (no traceEvents list)")
    ev = _check_header(path, doc["traceEvents"], doc.get("distributedInfo"), doc.get("baseTimeNanoseconds"),
                       doc.get("deviceProperties"))
    ev.doc = doc

    def ident(args: dict, key: str, default: Any) -> Any:
        v = args.get(key, default)
        if v is default or is_int(v):
            return v
        ev.drop(f"'{key}' is not an integer (taken as missing)")
        return default

    py = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict):
            ev.drop("an event is not a JSON object")
            continue
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        name, ts, dur = e.get("name", ""), e.get("ts", 0), e.get("dur", 0)
        if not isinstance(name, str) or not is_num(ts) or not is_num(dur):
            if cat in GPU_CATS or cat in LAUNCH_CATS or cat in ("cpu_op", "user_annotation", "gpu_user_annotation",
                                                                 PY_CAT):
                ev.drop("name, ts or dur of the wrong type")
            continue
        args = e.get("args") or {}
        if not isinstance(args, dict):
            ev.drop("args is not an object (ignored)")
            args = {}
        if cat in GPU_CATS:
            ev.k_name.append(name); ev.k_ts.append(ts); ev.k_dur.append(dur)
            ev.k_stream.append(ident(args, "stream", -1)); ev.k_corr.append(ident(args, "correlation", -1))
            ev.k_ext.append(ident(args, "External id", -1)); ev.k_grid.append(args.get("grid"))
            ev.k_block.append(args.get("block")); ev.k_kind.append(GPU_CATS[cat])
        elif cat in LAUNCH_CATS:
            c = ident(args, "correlation", None)
            if c is not None:
                ev.l_corr.append(c); ev.l_tid.append(e.get("tid")); ev.l_ts.append(ts)
                ev.l_ext.append(ident(args, "External id", -1))
        elif cat == "cpu_op" or (cat == "user_annotation" and name.startswith("gloo:")):
            ev.o_name.append(name); ev.o_tid.append(e.get("tid")); ev.o_ts.append(ts)
            ev.o_dur.append(dur); ev.o_ext.append(ident(args, "External id", -1))
            ev.o_dims.append(args.get("Input Dims")); ev.o_strides.append(args.get("Input Strides"))
            ev.o_types.append(args.get("Input type"))
            ev.o_args.append(args)
            ev.o_hta_stream.append("stream" in args)
        elif cat == "user_annotation":
            if name.startswith(_COMM_RANGES):
                ev.a_shapes[len(ev.a_name)] = (args.get("Input Dims"), args.get("Input type"))
            ev.a_name.append(name); ev.a_tid.append(e.get("tid")); ev.a_ts.append(ts)
            ev.a_dur.append(dur)
        elif cat == "gpu_user_annotation" and name.startswith("ProfilerStep#"):
            ev.gpu_step_name.append(name); ev.gpu_step_ts.append(ts); ev.gpu_step_dur.append(dur)
        elif cat == PY_CAT:
            py.append((name, e.get("tid"), ts, dur))
    if py:
        _keep_python_frames(ev, py)
    return ev
