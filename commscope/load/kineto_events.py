"""A Kineto chrome trace's bytes → `Events`: per kind of event (device activity, runtime launches, cpu
ops, user annotations), the columns that `commscope.load.kineto` shapes into frames.

Two readers, one result:
- typed (the fast path): msgspec decodes each event into a Struct naming only the fields commscope reads;
  the decoder skips everything else without building Python objects, and `args` stay raw bytes until a
  kind of event needs them (decoded a kind at a time into Structs of the few keys it needs). This is
  5–10× less work than decoding ~10⁵ dicts, which dominated loading.
- generic: orjson to plain dicts and one loop over them. Used for any document the typed reader rejects
  (odd types, `args` that are not objects, a top-level array, broken JSON…), so unusual or broken input
  behaves exactly as it did, errors included.

Invariant: for every document the typed reader accepts, both readers return equal `Events`
(tests/test_load_kineto.py checks it on the 8×H100 fixture and the gloo trace). Columns hold the
values as decoded (`ts`/`dur` in µs); missing optional values are the same defaults in both readers.
Exception, by design: cpu op shapes serve the `ops` frame (built `with_ops`) and gloo pairing; without
`with_ops` the typed reader leaves `o_strides` / `o_types` empty and fills `o_dims` only for collective
launches and executions (names `c10d::…`, `gloo:…`), None elsewhere — decoding every op's shapes was half
of its work.
`o_args[i]` is the full `args` dict of cpu op i (decoded on access in the typed reader: only collective
launches read it).
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec

from commscope.errors import UserError
from commscope.load.files import decode_json

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
        self.gpu_step_ts: list = []


def read_events(path: str, raw: bytes, with_ops: bool) -> Events:
    """Events of the trace whose bytes are `raw`; `with_ops` also fills `o_strides` / `o_types`."""
    try:
        doc = _DOC.decode(raw)
    except msgspec.DecodeError:  # includes ValidationError: not the shape the typed reader expects
        return _generic(path, raw)
    ev = _check_header(path, doc.traceEvents, doc.distributedInfo, doc.baseTimeNanoseconds,
                       doc.deviceProperties)
    ev.doc = doc
    try:
        _typed(doc.traceEvents, ev, with_ops)
    except msgspec.DecodeError:  # some `args` is not an object of the expected shape
        return _generic(path, raw)
    return ev


def _check_header(path: str, events: Any, di: Any, base: Any, props: Any) -> Events:
    if not isinstance(events, list):
        raise UserError(f"{path} is not a chrome trace (no traceEvents list)")
    if not isinstance(di, dict) or "rank" not in di or "world_size" not in di:
        raise UserError(f"{path} has no distributedInfo (rank, world_size): record with a "
                        "torch.distributed job running so the profiler can tell which rank it is")
    ev = Events()
    ev.di, ev.base, ev.device_properties = di, int(base or 0), props
    return ev


# --- typed reader --------------------------------------------------------------------------------------

class _Event(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    cat: Optional[str] = None
    name: str = ""
    tid: Any = None
    ts: float = 0
    dur: float = 0
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event]
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


class _KernelArgs(msgspec.Struct, gc=False):
    stream: Any = -1
    correlation: Any = -1
    external_id: Any = msgspec.field(name="External id", default=-1)
    grid: Any = None
    block: Any = None


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=-1)


_UNSET = msgspec.UNSET
_COLLECTIVE_OPS = ("c10d::", "gloo:")  # the ops whose shapes kineto_comms reads (gloo pairing)


class _OpArgs(msgspec.Struct, gc=False):
    stream: Any = _UNSET  # only its presence matters (HTA counts such ops as GPU activity)
    external_id: Any = msgspec.field(name="External id", default=-1)


class _OpShapeArgs(_OpArgs, gc=False):
    dims: Any = msgspec.field(name="Input Dims", default=None)
    strides: Any = msgspec.field(name="Input Strides", default=None)
    types: Any = msgspec.field(name="Input type", default=None)


_DOC = msgspec.json.Decoder(_Doc)
_KERNEL_ARGS = msgspec.json.Decoder(list[_KernelArgs])
_LAUNCH_ARGS = msgspec.json.Decoder(list[_LaunchArgs])
_OP_ARGS = msgspec.json.Decoder(list[_OpArgs])
_OP_SHAPE_ARGS = msgspec.json.Decoder(list[_OpShapeArgs])


def _args(events: list, decoder: msgspec.json.Decoder) -> list:
    """The `args` of `events`, decoded in one call (one JSON array of the raw objects)."""
    return decoder.decode(b"[" + b",".join([e.args for e in events]) + b"]")


class _LazyArgs:
    """`args` dicts of cpu ops, decoded on access (only collective launches are read)."""

    def __init__(self, raws: list) -> None:
        self._raws = raws

    def __len__(self) -> int:
        return len(self._raws)

    def __getitem__(self, i: int) -> dict:
        return msgspec.json.decode(self._raws[i])


def _typed(events: list, ev: Events, with_ops: bool) -> None:
    gpu, launch, cpu, gpu_ann = [], [], [], []
    route = {**{c: gpu for c in GPU_CATS}, **{c: launch for c in LAUNCH_CATS},
             "cpu_op": cpu, "user_annotation": cpu, "gpu_user_annotation": gpu_ann}.get
    for e in events:  # the one loop over every event: keep it minimal
        b = route(e.cat)
        if b is not None and e.ph == "X":
            b.append(e)

    ka = _args(gpu, _KERNEL_ARGS)
    ev.k_name = [e.name for e in gpu]
    ev.k_ts = [e.ts for e in gpu]
    ev.k_dur = [e.dur for e in gpu]
    ev.k_kind = [GPU_CATS[e.cat] for e in gpu]
    ev.k_stream = [a.stream for a in ka]
    ev.k_corr = [a.correlation for a in ka]
    ev.k_ext = [a.external_id for a in ka]
    ev.k_grid = [a.grid for a in ka]
    ev.k_block = [a.block for a in ka]

    la = _args(launch, _LAUNCH_ARGS)
    keep = [i for i, a in enumerate(la) if a.correlation is not None]
    ev.l_corr = [la[i].correlation for i in keep]
    ev.l_tid = [launch[i].tid for i in keep]
    ev.l_ts = [launch[i].ts for i in keep]
    ev.l_ext = [la[i].external_id for i in keep]

    # gloo executions on worker threads are recorded as user annotations in some versions
    ops = [e for e in cpu if e.cat == "cpu_op" or e.name.startswith("gloo:")]
    ann = [e for e in cpu if e.cat != "cpu_op" and not e.name.startswith("gloo:")]
    oa = _args(ops, _OP_SHAPE_ARGS if with_ops else _OP_ARGS)
    ev.o_name = [e.name for e in ops]
    ev.o_tid = [e.tid for e in ops]
    ev.o_ts = [e.ts for e in ops]
    ev.o_dur = [e.dur for e in ops]
    ev.o_ext = [a.external_id for a in oa]
    ev.o_hta_stream = [a.stream is not _UNSET for a in oa]
    ev.o_args = _LazyArgs([e.args for e in ops])
    if with_ops:
        ev.o_dims = [a.dims for a in oa]
        ev.o_strides = [a.strides for a in oa]
        ev.o_types = [a.types for a in oa]
    else:  # shapes only where gloo pairing reads them
        ev.o_dims = [ev.o_args[i].get("Input Dims") if e.name.startswith(_COLLECTIVE_OPS) else None
                     for i, e in enumerate(ops)]
    ev.a_name = [e.name for e in ann]
    ev.a_tid = [e.tid for e in ann]
    ev.a_ts = [e.ts for e in ann]
    ev.a_dur = [e.dur for e in ann]
    ev.gpu_step_ts = [e.ts for e in gpu_ann if e.name.startswith("ProfilerStep#")]


# --- generic reader ------------------------------------------------------------------------------------

def _generic(path: str, raw: bytes) -> Events:
    doc = decode_json(path, raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UserError(f"{path} is not a chrome trace (no traceEvents list)")
    ev = _check_header(path, doc["traceEvents"], doc.get("distributedInfo"), doc.get("baseTimeNanoseconds"),
                       doc.get("deviceProperties"))
    ev.doc = doc
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        args = e.get("args") or {}
        if cat in GPU_CATS:
            ev.k_name.append(e.get("name", "")); ev.k_ts.append(e.get("ts", 0)); ev.k_dur.append(e.get("dur", 0))
            ev.k_stream.append(args.get("stream", -1)); ev.k_corr.append(args.get("correlation", -1))
            ev.k_ext.append(args.get("External id", -1)); ev.k_grid.append(args.get("grid"))
            ev.k_block.append(args.get("block")); ev.k_kind.append(GPU_CATS[cat])
        elif cat in LAUNCH_CATS:
            c = args.get("correlation")
            if c is not None:
                ev.l_corr.append(c); ev.l_tid.append(e.get("tid")); ev.l_ts.append(e.get("ts", 0))
                ev.l_ext.append(args.get("External id", -1))
        elif cat == "cpu_op" or (cat == "user_annotation" and e.get("name", "").startswith("gloo:")):
            ev.o_name.append(e.get("name", "")); ev.o_tid.append(e.get("tid")); ev.o_ts.append(e.get("ts", 0))
            ev.o_dur.append(e.get("dur", 0)); ev.o_ext.append(args.get("External id", -1))
            ev.o_dims.append(args.get("Input Dims")); ev.o_strides.append(args.get("Input Strides"))
            ev.o_types.append(args.get("Input type"))
            ev.o_args.append(args)
            ev.o_hta_stream.append("stream" in args)
        elif cat == "user_annotation":
            ev.a_name.append(e.get("name", "")); ev.a_tid.append(e.get("tid")); ev.a_ts.append(e.get("ts", 0))
            ev.a_dur.append(e.get("dur", 0))
        elif cat == "gpu_user_annotation" and e.get("name", "").startswith("ProfilerStep#"):
            ev.gpu_step_ts.append(e.get("ts", 0))
    return ev
