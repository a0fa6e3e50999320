"""Fault injection for drills and tests: `--inject KIND@rank=R,step=S[,label=L][,ms=M][,how=op|size]`.

Kinds (each fires once, on rank R, at step S, at the first collective labelled L — or the first collective
of the step when no label is given):
- `crash`  the rank exits abruptly (`os._exit`, no status, no flush): what a segfault or OOM-kill looks like.
           Without a label it dies as step S begins.
- `hang`   the rank never launches the collective and blocks (a rank stuck before a collective), so its
           peers wait on a collective it will not join.
- `delay`  the rank sleeps M ms before launching: a straggler whose *launch* is late.
- `desync` the rank launches something else: `how=op` (default) a broadcast from the group's first rank
           over the same input (same bytes, wrong op; on gloo the group then blocks), `how=size` the same
           op over half the elements (on gloo a size mismatch aborts a receiving rank).

`FaultInjector` wraps any recorder (the `NullRecorder` interface) and intercepts `step()` and
`collective()`; everything else passes through. The recorder therefore records what the faulty rank
really did (the late launch time, the wrong op), which is what `commscope doctor` must find.

Invariants: parsing never touches torch (the launcher validates options before starting ranks); a rank
with no fault for it runs exactly the un-wrapped code path.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from commscope.errors import UserError

KINDS = ("crash", "hang", "delay", "desync")
DESYNC_HOW = ("op", "size")
CRASH_EXIT = 134  # what an abort looks like to the launcher
MAX_DELAY_MS = 86_400_000  # a day: longer than any hang timeout, within what time.sleep takes
_SYNTAX = "KIND@rank=R,step=S[,label=L][,ms=M][,how=op|size]"


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    step: int
    label: str | None = None
    ms: float | None = None
    how: str = "op"

    def __str__(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in (("label", self.label), ("ms", self.ms)) if v is not None)
        if self.kind == "desync":
            extra += f",how={self.how}"
        return f"{self.kind}@rank={self.rank},step={self.step}{extra}"


def _int(key: str, value: str, text: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise UserError(f"--inject {text!r}: {key} must be an integer, got {value!r}") from None
    if n < 0:
        raise UserError(f"--inject {text!r}: {key} must be >= 0, got {n}")
    return n


def parse_fault(text: str) -> Fault:
    """One `--inject` value → Fault; UserError naming the problem otherwise."""
    kind, at, rest = text.strip().partition("@")
    if not at or kind not in KINDS:
        raise UserError(f"--inject {text!r}: expected {_SYNTAX} with KIND one of {', '.join(KINDS)}")
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value or key not in ("rank", "step", "label", "ms", "how"):
            raise UserError(f"--inject {text!r}: bad field {part!r} (expected {_SYNTAX})")
        if key in fields:
            raise UserError(f"--inject {text!r}: {key} given twice")
        fields[key] = value
    for key in ("rank", "step"):
        if key not in fields:
            raise UserError(f"--inject {text!r}: {key}= is required ({_SYNTAX})")
    ms = None
    if "ms" in fields:
        try:
            ms = float(fields["ms"])
        except ValueError:
            raise UserError(f"--inject {text!r}: ms must be a number, got {fields['ms']!r}") from None
        if not 0 <= ms <= MAX_DELAY_MS:  # NaN fails too; time.sleep refuses a time_t overflow, mid-run
            raise UserError(f"--inject {text!r}: ms must be a number in 0..{MAX_DELAY_MS:,} (a day)")
    if kind == "delay" and ms is None:
        raise UserError(f"--inject {text!r}: delay needs ms=M (milliseconds)")
    if kind != "delay" and ms is not None:
        raise UserError(f"--inject {text!r}: ms= only applies to delay")
    how = fields.get("how", "op")
    if "how" in fields and kind != "desync":
        raise UserError(f"--inject {text!r}: how= only applies to desync")
    if how not in DESYNC_HOW:
        raise UserError(f"--inject {text!r}: how must be one of {', '.join(DESYNC_HOW)}")
    return Fault(kind, _int("rank", fields["rank"], text), _int("step", fields["step"], text),
                 fields.get("label"), ms, how)


def parse_faults(texts: Sequence[str] | None, *, world_size: int | None = None, steps: int | None = None,
                 labels: Sequence[str] | None = None) -> tuple[Fault, ...]:
    """All `--inject` values, checked against the job's world size, step count and collective labels when
    given (a label no collective carries would never fire: the drill would pass with no fault)."""
    faults = tuple(parse_fault(t) for t in texts or ())
    seen: set[tuple] = set()
    for f in faults:
        if labels is not None and f.label is not None and f.label not in labels:
            raise UserError(f"--inject {f}: no collective is labelled {f.label!r}; the labels are "
                            f"{', '.join(labels)}")
        if world_size is not None and f.rank >= world_size:
            raise UserError(f"--inject {f}: rank {f.rank} does not exist (world size {world_size})")
        if steps is not None and f.step >= steps:
            raise UserError(f"--inject {f}: step {f.step} is never reached (--steps {steps})")
        key = (f.rank, f.step, f.label)
        if key in seen:
            raise UserError(f"--inject {f}: two faults on rank {f.rank} at the same step and label")
        seen.add(key)
    return faults


def _hang_forever() -> None:
    # Short sleeps so a SIGTERM from the launcher is handled promptly (Python runs handlers between them).
    while True:
        time.sleep(0.2)


def _halve(t: Any) -> Any:
    flat = t.reshape(-1)
    return flat[: max(1, flat.numel() // 2)]


def _desync(fn: Callable, args: tuple, kwargs: dict, how: str) -> tuple[Callable, tuple, dict]:
    import torch
    import torch.distributed as dist

    from commscope.recording.collective import op_name

    op = op_name(fn)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:
        raise RuntimeError(f"desync injection: cannot desync {op} (no tensor arguments)")
    if how == "op":
        # The input (last tensor argument: all_reduce's only one, reduce_scatter/all_gather's second).
        group = kwargs.get("group")
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return dist.broadcast, (tensors[-1],), {"src": src, **({"group": group} if group is not None else {})}
    if op in ("all_gather", "reduce_scatter") and len(tensors) == 2:
        out, inp = tensors
        n = max(1, min(out.numel(), inp.numel()) // 2)
        k = n * (max(out.numel(), inp.numel()) // max(1, min(out.numel(), inp.numel())))
        big, small = (out, inp) if out.numel() >= inp.numel() else (inp, out)
        big_v, small_v = big.reshape(-1)[:k], small.reshape(-1)[:n]
        new = (big_v, small_v) if big is out else (small_v, big_v)
        return fn, new, kwargs
    return fn, (_halve(tensors[0]), *args[1:]), kwargs


class FaultInjector:
    """A recorder proxy that injects this rank's faults into `step()` and `collective()`."""

    def __init__(self, inner: Any, faults: Sequence[Fault], rank: int):
        self._inner = inner
        self._rank = rank
        self._pending = [f for f in faults if f.rank == rank]
        self._step: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def inner(self) -> Any:
        return self._inner

    def _take(self, label: str | None) -> Fault | None:
        for f in self._pending:
            if f.step == self._step and (f.label is None or f.label == label):
                self._pending.remove(f)
                return f
        return None

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[Any]:
        self._step = int(step)
        for f in list(self._pending):
            if f.kind == "crash" and f.label is None and f.step == self._step:
                os._exit(CRASH_EXIT)
        try:
            with self._inner.step(step) as info:
                yield info
        finally:
            self._step = None

    def collective(self, fn: Callable, *args: Any, label: str, phase: str, **kwargs: Any) -> Any:
        f = self._take(label) if self._pending else None
        if f is not None:
            if f.kind == "crash":
                os._exit(CRASH_EXIT)
            if f.kind == "hang":
                _hang_forever()
            if f.kind == "delay":
                time.sleep(f.ms / 1e3)
            if f.kind == "desync":
                fn, args, kwargs = _desync(fn, args, kwargs, f.how)
        return self._inner.collective(fn, *args, label=label, phase=phase, **kwargs)


def wrap(recorder: Any, faults: Sequence[Fault], rank: int) -> Any:
    """The recorder itself when no fault targets this rank, else a FaultInjector around it."""
    if not any(f.rank == rank for f in faults):
        return recorder
    return FaultInjector(recorder, faults, rank)
