"""NorMuonAndAdam: one optimizer for all labelled parameters, with an explicit communication schedule.

Why: the reference record replaced param groups and gradient hooks by a table (param_table.py) and two
orders, so the optimizer step *is* the communication schedule and can be measured and reordered. This
module reproduces that schedule and the older hook-driven one ("hooks") so the two can be compared.

A step (explicit schedule), every collective through `recorder.collective` and every phase/update inside
a `recorder.region`:
- phase 1 (`opt.phase1`): in scatter_order, launch each label's gradient reduce — reduce_scatter of the
  gradient for sharded labels (banks as their (N, rows, cols) matrix view, each rank receiving N/ws whole
  matrices; Adam tensors as row chunks of dim 0), all_reduce for replicated labels. With NCCL the
  reduce_scatter is in place (the sum lands in the rank's own rows of the gradient): at world size 1 a
  separate output made NCCL copy every sharded gradient, 1.0 ms per speedrun step on an H200
  (`in_place_reduce=False` keeps the separate buffer, the default on gloo).
- phase 2 (`opt.phase2`): in work_order, wait for the reduce, compute the update on the local shard
  (`update:<label>`), and for sharded labels launch the all_gather of the updated shard straight into the
  parameter (the shard is a view of the parameter, so no stacking copies).
- phase 3 (`opt.phase3`): wait for lm_head's gather first (so the tied embed copy can run while other
  gathers are in flight), copy lm_head into embed while tied, then wait for the rest.
Matrix partition (`matrix_owners`, the trainer's `--optimizer-partition alpha-lpt`): a NorMuon bank may
instead be updated by an arbitrary owner per matrix (whole matrices, unequal counts per rank, -1 = never
updated, e.g. the mlp bank's zero padding), as planned by commscope.plan. reduce_scatter and
all_gather_into_tensor only split evenly, so such a bank moves with all_to_all_single and per-owner split
sizes (phase `reduce`: every rank sends each owner its matrices' gradients, the owner sums the R copies;
phase `gather`: each owner sends its updated matrices to every rank). With owners in rank order over
a contiguous prefix of the bank (what alpha-lpt gives) both transfers read and write the bank in place;
other owner sets go through an owner-ordered copy (`unpack:<label>`). Bytes match the bank's
reduce_scatter + all_gather exactly (no padding to the largest share); why this and not packed or
broadcast collectives: docs/plan.md, "alpha-lpt in the trainer".
With comm_schedule="hooks", Adam labels' reduces are instead launched from post-accumulate-grad hooks
during the last micro-step's backward (the trainer calls `set_last_micro_step`); phase 1 then launches
only what is left. Both schedules compute the same numbers.

Tied embeddings: until `split_step`, embed's gradient is folded into lm_head's (transposed for the
(D, V) head layout), only lm_head is communicated and updated, and embed is overwritten with lm_head
(transposed) after lm_head's gather. Right after step `split_step - 1` (or at construction if
split_step <= 0) the two are untied: lm_head's Adam moments are all-gathered, transposed and each rank
keeps its own row slice as embed's moments; the step count carries over.

Gradients are averaged over ranks as SUM then divide by world size: gloo has no AVG for reduce_scatter,
and one code path keeps CPU and GPU runs numerically alike. Without an initialized process group
(unit tests at world size 1) nothing is communicated; a one-rank job inside a group still runs every
collective, so its schedule is recorded like a multi-rank one.

Invariants: all ranks launch the same collectives in the same order (the orders and the set of labels
with a gradient are identical on every rank); every handle is waited exactly once within `step()`;
after `step()` every parameter is identical on all ranks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor, nn

from commscope.errors import UserError
from commscope.recording.api import NullRecorder
from instrumented_model.adam import ADAM_EPS, adam_step_
from instrumented_model.kernels import transpose_add, transpose_copy
from instrumented_model.normuon import normuon_step_, second_moment_shape, shape_lr_mul
from instrumented_model.param_table import PARAM_TABLE, SCATTER_ORDER, WORK_ORDER, ParamSpec, check_order


@dataclass
class _Slot:
    """One label's static layout and per-step in-flight state."""

    label: str
    spec: ParamSpec
    param: nn.Parameter
    comms: Literal["sharded", "replicated", "local"]
    view_shape: tuple[int, ...]  # matrix view for NorMuon banks, the parameter shape for Adam
    chunk: int  # rows of dim 0 of view_shape owned by this rank (all of them unless sharded)
    lr_mul: float
    state: dict[str, Any] = field(default_factory=dict)
    reduce_buf: Tensor | None = None  # reduce_scatter output, reused every step (None when in place)
    reduced: tuple[Any, Tensor] | None = None  # (handle or None, tensor holding the summed gradient)
    gather: Any = None
    # Matrix partition only (None for the even bank split): owners per matrix, the matrices in owner order
    # (rank 0's first; the all_to_all layout), how many each rank owns, this rank's, and its buffer.
    owners: tuple[int, ...] | None = None
    order: Tensor | None = None
    in_place: bool = False  # `order` is 0..n-1: the bank view itself is the all_to_all layout
    counts: list[int] = field(default_factory=list)
    own_idx: Tensor | None = None
    exchange: Tensor | None = None  # (R·own, rows, cols): R gradient copies in, then R weight copies out
    gathered: Tensor | None = None  # all_to_all output of the gather (a view of the bank when in place)

    def full_view(self) -> Tensor:
        return self.param.data.view(self.view_shape)

    def shard(self, rank: int) -> Tensor:
        """This rank's slice of the parameter (a view: updating it updates the parameter)."""
        if self.comms != "sharded":
            return self.full_view()
        return self.full_view()[rank * self.chunk:(rank + 1) * self.chunk]


class NorMuonAndAdam:
    """See the module docstring. Hyperparameters: `lr` (NorMuon), `adam_lr`, `wd` (decoupled, scaled by
    each row's wd_mul and the step's lr), `momentum` and `beta2` (NorMuon)."""

    def __init__(self, labelled_params: dict[str, nn.Parameter], *, rank: int = 0, world_size: int = 1,
                 group: Any = None, recorder: Any = None, scatter_order=SCATTER_ORDER,
                 work_order=WORK_ORDER, comm_schedule: str = "explicit", head_layout: str = "transposed",
                 split_step: int | None = None, lr: float = 0.02, adam_lr: float = 0.008, wd: float = 0.01,
                 momentum: float = 0.95, beta2: float = 0.95, param_table: dict[str, ParamSpec] = PARAM_TABLE,
                 matrix_owners: dict[str, Any] | None = None, in_place_reduce: bool | None = None,
                 symmetric_gram: bool = True):
        if comm_schedule not in ("explicit", "hooks"):
            raise UserError(f"comm_schedule must be 'explicit' or 'hooks', not {comm_schedule!r}")
        if head_layout not in ("transposed", "standard"):
            raise UserError(f"head_layout must be 'transposed' or 'standard', not {head_layout!r}")
        unknown = sorted(set(labelled_params) - set(param_table))
        if unknown:
            raise UserError(f"labels not in the param table: {unknown}")
        self.rank, self.world_size, self.group = rank, world_size, group
        self.rec = recorder if recorder is not None else NullRecorder()
        self.comm_schedule, self.head_layout, self.split_step = comm_schedule, head_layout, split_step
        self.lr, self.adam_lr, self.wd, self.momentum, self.beta2 = lr, adam_lr, wd, momentum, beta2
        self.param_table = param_table
        if in_place_reduce is None:  # NCCL's in-place reduce_scatter is documented; gloo gets a separate output
            in_place_reduce = dist.is_available() and dist.is_initialized() and dist.get_backend(group) == "nccl"
        self.in_place_reduce = in_place_reduce
        # Polar Express's Gram products from the upper-triangle Triton kernel (normuon.symmetric_gram, fused
        # CUDA path only): 9% less Polar Express time than cuBLAS's full products on an H200 (docs/benchmarks.md)
        self.symmetric_gram = symmetric_gram
        self.matrix_owners = dict(matrix_owners or {})
        bad = sorted(lb for lb in self.matrix_owners
                     if lb not in labelled_params or param_table[lb].optim != "normuon")
        if bad:
            raise UserError(f"matrix_owners: {bad} are not NorMuon banks of this model")
        self.scatter_order = check_order("scatter_order", scatter_order, labelled_params)
        self.work_order = check_order("work_order", work_order, labelled_params)
        self.slots = {label: self._make_slot(label, p) for label, p in labelled_params.items()}
        self.tied = "lm_head" in self.slots and "embed" in self.slots
        if self.tied:
            self._check_tie_shapes()
            if split_step is not None and split_step <= 0:
                self.tied = False  # untied from the start: no moments to move yet
        self._last_micro_step = True
        self._tied_ready: set[str] = set()
        self._hooks: list[Any] = []

    # ----- layout -----

    def _make_slot(self, label: str, p: nn.Parameter) -> _Slot:
        spec = self.param_table[label]
        ws = self.world_size
        if spec.optim == "normuon":
            try:
                view_shape = spec.matrix_view(tuple(p.shape))
            except ValueError as e:
                raise UserError(f"{label}: {e}") from None
            lr_mul = spec.lr_mul * shape_lr_mul(view_shape[1], view_shape[2])
        else:
            view_shape, lr_mul = tuple(p.shape), spec.lr_mul
        # A single rank inside a process group still communicates (a trivial collective), so a one-GPU
        # run records and times the same schedule as a multi-GPU one; without a group there is no one to ask.
        comms = spec.comms if ws > 1 or (dist.is_available() and dist.is_initialized()) else "local"
        if comms == "sharded" and view_shape[0] % ws:
            raise UserError(f"{label}: {view_shape[0]} {'matrices' if spec.optim == 'normuon' else 'rows'} "
                            f"do not split evenly over world size {ws}")
        chunk = view_shape[0] // ws if comms == "sharded" else view_shape[0]
        slot = _Slot(label, spec, p, comms, view_shape, chunk, lr_mul)
        shard_shape = (chunk, *view_shape[1:])
        dev = p.device
        if comms == "sharded" and label in self.matrix_owners:
            return self._make_partitioned_slot(slot, self.matrix_owners[label])
        if spec.optim == "normuon":
            slot.state = {"momentum_buffer": torch.zeros(shard_shape, dtype=torch.float32, device=dev),
                          "second_moment": torch.zeros(second_moment_shape(shard_shape), dtype=torch.float32,
                                                       device=dev)}
        else:
            slot.state = {"step": 0, "exp_avg": torch.zeros(shard_shape, dtype=torch.float32, device=dev),
                          "exp_avg_sq": torch.zeros(shard_shape, dtype=torch.float32, device=dev)}
        if comms == "sharded" and not self.in_place_reduce:
            slot.reduce_buf = torch.empty(shard_shape, dtype=p.dtype, device=dev)
        return slot

    def _make_partitioned_slot(self, slot: _Slot, owners: Any) -> _Slot:
        """Layout of a bank updated per owner: owner order, counts, own matrices (see module doc)."""
        n, ws, dev = slot.view_shape[0], self.world_size, slot.param.device
        owners = tuple(int(o) for o in owners)
        if len(owners) != n or any(not -1 <= o < ws for o in owners):
            raise UserError(f"matrix_owners[{slot.label!r}]: need {n} owners in [-1, {ws - 1}], got {owners}")
        per_rank = [[k for k in range(n) if owners[k] == r] for r in range(ws)]
        order = [k for ks in per_rank for k in ks]
        mine = per_rank[self.rank]
        slot.owners, slot.chunk, slot.counts = owners, len(mine), [len(ks) for ks in per_rank]
        slot.in_place = order == list(range(len(order)))
        slot.order = torch.tensor(order, dtype=torch.long, device=dev)
        slot.own_idx = torch.tensor(mine, dtype=torch.long, device=dev)
        rows_cols = slot.view_shape[1:]
        slot.exchange = torch.empty((ws * len(mine), *rows_cols), dtype=slot.param.dtype, device=dev)
        own_shape = (len(mine), *rows_cols)
        slot.state = {"momentum_buffer": torch.zeros(own_shape, dtype=torch.float32, device=dev),
                      "second_moment": torch.zeros(second_moment_shape(own_shape), dtype=torch.float32,
                                                   device=dev)}
        return slot

    def _owner_ordered(self, slot: _Slot, t: Tensor) -> Tensor:
        """The bank's matrices in owner order: a view when in place, else a copy."""
        return t[:len(slot.order)] if slot.in_place else t.index_select(0, slot.order)

    def _check_tie_shapes(self) -> None:
        head, emb = self.slots["lm_head"].param, self.slots["embed"].param
        want = tuple(emb.shape[::-1]) if self.head_layout == "transposed" else tuple(emb.shape)
        if tuple(head.shape) != want or emb.dim() != 2:
            raise UserError(f"lm_head {tuple(head.shape)} cannot be tied to embed {tuple(emb.shape)} "
                            f"with head_layout={self.head_layout}")

    # ----- communication -----

    def _launch_reduce(self, slot: _Slot) -> None:
        """Launch the gradient reduce of one label (after folding embed into lm_head while tied)."""
        grad = slot.param.grad
        if not grad.is_contiguous():  # collectives need dense memory
            grad = slot.param.grad = grad.contiguous()
        if slot.label == "lm_head" and self.tied:
            emb_grad = self.slots["embed"].param.grad
            if emb_grad is not None:
                if self.head_layout == "transposed":
                    transpose_add(grad, emb_grad)
                else:
                    grad.add_(emb_grad)
        grad_view = grad.view(slot.view_shape)  # a view of dense memory: collectives can send it as is
        if slot.comms == "local":
            slot.reduced = (None, grad_view)
        elif slot.comms == "replicated":
            h = self.rec.collective(dist.all_reduce, grad_view, label=slot.label, phase="allreduce",
                                    group=self.group)
            slot.reduced = (h, grad_view)
        else:
            if slot.owners is not None:  # each owner receives every rank's copy of its matrices
                h = self.rec.collective(dist.all_to_all_single, slot.exchange,
                                        self._owner_ordered(slot, grad_view),
                                        [slot.chunk] * self.world_size, slot.counts,
                                        label=slot.label, phase="reduce", group=self.group)
                slot.reduced = (h, slot.exchange)
                return
            # in place: the rank's own rows of the gradient receive the sum (NCCL's in-place form,
            # recvbuff = sendbuff + rank·recvcount), so no buffer, and at world size 1 no copy at all
            out = grad_view[self.rank * slot.chunk:(self.rank + 1) * slot.chunk] if self.in_place_reduce \
                else slot.reduce_buf
            h = self.rec.collective(dist.reduce_scatter_tensor, out, grad_view,
                                    label=slot.label, phase="reduce", group=self.group)
            slot.reduced = (h, out)

    def _launch_gather(self, slot: _Slot) -> None:
        if slot.owners is not None:  # R copies of the own updated matrices are in exchange (see _update)
            out = self._owner_ordered(slot, slot.full_view()) if slot.in_place else torch.empty(
                (len(slot.order), *slot.view_shape[1:]), dtype=slot.param.dtype, device=slot.param.device)
            slot.gathered = out
            slot.gather = self.rec.collective(dist.all_to_all_single, out, slot.exchange, slot.counts,
                                              [slot.chunk] * self.world_size,
                                              label=slot.label, phase="gather", group=self.group)
        elif slot.comms == "sharded":
            slot.gather = self.rec.collective(dist.all_gather_into_tensor, slot.full_view(),
                                              slot.shard(self.rank), label=slot.label, phase="gather",
                                              group=self.group)

    def _wait_gather(self, slot: _Slot) -> None:
        slot.gather.wait()
        if slot.owners is not None and not slot.in_place:
            with self.rec.region(f"unpack:{slot.label}"):
                slot.full_view().index_copy_(0, slot.order, slot.gathered)

    # ----- hooks schedule -----

    def install_hooks(self) -> None:
        """Hooks schedule: launch Adam labels' reduces from post-accumulate-grad hooks as their gradients
        become final during the last micro-step's backward. Call once, after construction."""
        if self.comm_schedule != "hooks":
            raise UserError("install_hooks() is only for comm_schedule='hooks'")
        if self._hooks:
            return
        for slot in self.slots.values():
            if slot.spec.optim == "adam":
                self._hooks.append(slot.param.register_post_accumulate_grad_hook(
                    lambda _p, slot=slot: self._on_grad_ready(slot)))

    def set_last_micro_step(self, last: bool) -> None:
        """Tell the hooks whether the coming backward is the last micro-step of the step."""
        self._last_micro_step = last

    @torch.no_grad()
    def _on_grad_ready(self, slot: _Slot) -> None:
        if not self._last_micro_step or slot.reduced is not None:
            return
        if self.tied and slot.label in ("lm_head", "embed"):
            # lm_head's reduce carries embed's gradient too, so it waits for whichever comes second.
            self._tied_ready.add(slot.label)
            if len(self._tied_ready) < 2:
                return
            slot = self.slots["lm_head"]
        self._launch_reduce(slot)

    # ----- the step -----

    def _active(self, label: str) -> bool:
        """Whether this label is reduced and updated this step (embed is not while tied)."""
        return self.slots[label].param.grad is not None and not (self.tied and label == "embed")

    @torch.no_grad()
    def step(self, step_idx: int, lr_scale: float = 1.0) -> None:
        """One optimizer step (the three phases). `lr_scale` multiplies both learning rates (schedules)."""
        if self.tied and self.split_step is not None and step_idx >= self.split_step:
            if any(s.reduced is not None for s in self.slots.values()):
                raise RuntimeError("step() skipped past split_step with reduces already in flight")
            self._untie()
        rec = self.rec
        with rec.region("opt.phase1"):
            for label in self.scatter_order:
                slot = self.slots[label]
                if self._active(label) and slot.reduced is None:
                    self._launch_reduce(slot)
        with rec.region("opt.phase2"):
            for label in self.work_order:
                slot = self.slots[label]
                if slot.reduced is None:
                    continue
                handle, summed = slot.reduced
                if handle is not None:
                    handle.wait()
                with rec.region(f"update:{label}"):
                    self._update(slot, summed, lr_scale)
                self._launch_gather(slot)
        with rec.region("opt.phase3"):
            head = self.slots.get("lm_head")
            if head is not None and head.gather is not None:
                self._wait_gather(head)
            if self.tied and head is not None and head.reduced is not None:
                self._copy_head_to_embed()
            for slot in self.slots.values():
                if slot.gather is not None and slot is not head:
                    self._wait_gather(slot)
        for slot in self.slots.values():
            slot.reduced = slot.gather = None
        self._tied_ready.clear()
        if self.tied and self.split_step is not None and step_idx + 1 >= self.split_step:
            # Untie now rather than at the next step() so the next backward's hooks already see it.
            self._untie()

    def _update(self, slot: _Slot, summed: Tensor, lr_scale: float) -> None:
        if slot.owners is not None:
            if slot.chunk == 0:
                return  # owns none of this bank: sends nothing, receives the others' matrices
            # the R received copies, summed in rank order (the reduction reduce_scatter does in the bank)
            summed = summed.view(self.world_size, slot.chunk, *slot.view_shape[1:]).sum(0)
        grad_scale = 1.0 / self.world_size
        st = slot.state
        target = slot.shard(self.rank)
        copies = None
        if slot.owners is not None:
            # the gradient copies in exchange are consumed (summed), so it now carries R copies of the
            # updated weights, one per destination rank
            copies = slot.exchange.view(self.world_size, slot.chunk, *slot.view_shape[1:])
            target = copies[0]
            torch.index_select(slot.full_view(), 0, slot.own_idx, out=target)
        # normuon_step_ / adam_step_ compute the direction and apply the cautious step (one fused kernel
        # per elementwise stage on CUDA, the eager functions elsewhere)
        wd = self.wd * slot.spec.wd_mul
        if slot.spec.optim == "normuon":
            normuon_step_(target, summed, st["momentum_buffer"], st["second_moment"], momentum=self.momentum,
                          beta2=self.beta2, lr=self.lr * lr_scale * slot.lr_mul, wd=wd, grad_scale=grad_scale,
                          symmetric=self.symmetric_gram)
        else:
            st["step"] += 1
            adam_step_(target, summed, st["exp_avg"], st["exp_avg_sq"], st["step"], slot.spec.adam_betas,
                       self.adam_lr * lr_scale * slot.lr_mul, wd, ADAM_EPS, grad_scale)
        if copies is not None:
            copies[1:] = target

    # ----- tied embeddings -----

    def _copy_head_to_embed(self) -> None:
        head, emb = self.slots["lm_head"].param.data, self.slots["embed"].param.data
        if self.head_layout == "transposed":
            transpose_copy(emb, head)
        else:
            emb.copy_(head)

    @torch.no_grad()
    def _untie(self) -> None:
        """Give embed lm_head's Adam moments in embed's own sharding and make the two independent."""
        head, emb = self.slots["lm_head"], self.slots["embed"]
        for key in ("exp_avg", "exp_avg_sq"):
            mine = head.state[key]
            if self.head_layout == "standard":
                moved = mine  # lm_head and embed are both (V, D) and sharded by the same rows
            elif head.comms != "sharded":
                moved = mine.T
            else:  # lm_head is sharded along D, embed along V: gather, transpose, take own rows
                full = torch.empty(head.view_shape, dtype=mine.dtype, device=mine.device)
                self.rec.collective(dist.all_gather_into_tensor, full, mine, label="lm_head", phase="untie",
                                    group=self.group).wait()
                moved = full.T[self.rank * emb.chunk:(self.rank + 1) * emb.chunk]
            emb.state[key].copy_(moved)
        emb.state["step"] = head.state["step"]
        self.tied = False

    # ----- misc -----

    def zero_grad(self) -> None:
        for slot in self.slots.values():
            slot.param.grad = None

    def config(self) -> dict:
        """What config.json records about the optimizer."""
        return {
            "param_table": [self.param_table[label].row(label) for label in self.scatter_order],
            "scatter_order": list(self.scatter_order),
            "work_order": list(self.work_order),
            "comm_schedule": self.comm_schedule,
            "head_layout": self.head_layout,
            "split_step": self.split_step, "in_place_reduce": self.in_place_reduce,
            "symmetric_gram": self.symmetric_gram,
            "lr": self.lr, "adam_lr": self.adam_lr, "wd": self.wd, "momentum": self.momentum,
            "normuon_beta2": self.beta2, "adam_eps": ADAM_EPS,
            "shards": {label: {"comms": s.comms, "view": list(s.view_shape), "chunk": s.chunk,
                               **({"owners": list(s.owners), "counts": s.counts} if s.owners is not None else {})}
                       for label, s in self.slots.items()},
        }
