"""The recording API every training script talks to, and its no-op implementation.

`NullRecorder` is what `trace="off"` gives and the contract `commscope.recording.Recorder` fulfils: the same
methods, each doing the minimum needed for training to proceed (collectives still run, waits still
wait). Keeping the two behind one interface means a training loop has a single code path whether it is
traced or not, so tracing cannot change what is computed.

Both are context managers: `with commscope.record(...) as rec:` closes the recorder on the way out, with
status "completed"; "interrupted" when a KeyboardInterrupt leaves the block (the user stopped it); else,
when an exception leaves it, "failed" and "<ExceptionType>: <message>" (the trainer's wording for
status.json, docs/run_format.md). `end_status` is that rule, shared with the recorder's interpreter-exit
path.

`StepInfo` checks what the loop assigns, in both implementations, so a script that runs untraced also
runs traced: `loss` and `tokens` are numbers, `extra` never names a field of the step record.

Invariants: `collective()` always launches with `async_op=True` and returns a handle whose `wait()` must
be called exactly once; `step()` contexts do not nest; `close()` is idempotent.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import numbers
import re
import signal
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist

from commscope.rundir.schema import NO_LABEL

# Function → normalized op name. Bytes follow the nccl-tests convention (full-array size).
OP_NAMES: dict[Callable, str] = {
    dist.all_reduce: "all_reduce",
    dist.reduce_scatter_tensor: "reduce_scatter",
    dist.all_gather_into_tensor: "all_gather",
    dist.broadcast: "broadcast",
    dist.all_gather: "all_gather",
    dist.reduce_scatter: "reduce_scatter",
    dist.all_to_all_single: "all_to_all",
    dist.barrier: "barrier",
}
# torch >= 2.13 spells the tensor forms *_single (the *_tensor names still work, deprecated).
for _fn, _name in (("reduce_scatter_single", "reduce_scatter"), ("all_gather_single", "all_gather")):
    if hasattr(dist, _fn):
        OP_NAMES[getattr(dist, _fn)] = _name


# Point-to-point calls: not collectives. Readers pair a collective's calls across ranks by (group, sequence
# number), which holds because every member makes every call of its group in one order; one rank's send
# and its peer's recv would take the same number as different ops (a false desync), and a pipeline's
# unequal sends would shift every later number. rec.collective refuses them (time them with rec.region).
_POINT_TO_POINT = frozenset(("send", "recv", "isend", "irecv", "batch_isend_irecv"))


def check_collective_fn(fn: Any, kwargs: dict) -> None:
    """ValueError for a point-to-point call (_POINT_TO_POINT: rec.collective records collectives), for a
    caller's own `async_op` (rec.collective passes async_op=True itself) and for a function that takes no
    async_op (dist.all_gather_object and the other object collectives block), before anything is launched
    or numbered."""
    name = getattr(fn, "__name__", None)
    if name in _POINT_TO_POINT and getattr(fn, "__module__", "").startswith("torch.distributed"):
        raise ValueError(f"rec.collective records collectives, which every member of a group calls in one "
                         f"order; dist.{name} is point-to-point (its peer calls another op): time it with "
                         "rec.region(...) instead")
    if "async_op" in kwargs:
        raise ValueError("rec.collective launches the collective with async_op=True itself and returns a handle "
                         "to wait() on: leave async_op out")
    if not _takes_async_op(fn):
        in_torch = name and getattr(fn, "__module__", "").startswith("torch.distributed")
        who = f"dist.{name}" if in_torch else (name or repr(fn))
        raise ValueError(f"rec.collective times collectives it launches with async_op=True; {who} takes no "
                         "async_op (it blocks, as the object collectives do): time it with rec.region(...) instead")


def _reads_async_op(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read (a C function): the call itself will say
        return True
    return "async_op" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


_REMEMBERED = 4096  # entries each per-process memo below keeps at most (a new function or name per call: bounded)
_remembered_async_op = functools.lru_cache(maxsize=_REMEMBERED)(_reads_async_op)  # a signature read once per fn


def _takes_async_op(fn: Any) -> bool:
    try:
        return _remembered_async_op(fn)
    except TypeError:  # an unhashable callable (_reads_async_op raises none): read each time
        return _reads_async_op(fn)


def _reads_group_at(fn: Any) -> int | None:
    """Where `fn` takes its process group positionally (`group`'s index among its positional parameters),
    None where it takes none or has no signature to read."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for i, p in enumerate(params):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return None
        if p.name == "group":
            return i
    return None


_remembered_group_at = functools.lru_cache(maxsize=_REMEMBERED)(_reads_group_at)


def group_argument(fn: Any, args: tuple, kwargs: dict) -> Any:
    """The process group a call `fn(*args, **kwargs)` runs on: `group=`, or the positional argument in its
    place (`dist.all_reduce(t, op, pg)` runs on pg, and recording it as the world group would number it
    with the world's collectives and read a healthy job as a desync); None (the default group) otherwise."""
    if "group" in kwargs:
        return kwargs["group"]
    try:
        at = _remembered_group_at(fn)
    except TypeError:  # an unhashable callable: read each time
        at = _reads_group_at(fn)
    return args[at] if at is not None and len(args) > at else None


def check_micro_step(micro_step: Any) -> int | None:
    """A micro-step (gradient-accumulation index) as an int, or None (no micro-steps): a whole number as
    check_step takes, else ValueError; the loader reads hooks and regions by it."""
    return None if micro_step is None else _whole_number(micro_step, "a micro-step must be None or")


# The fields of a step record (docs/run_format.md): `st.extra` adds keys to that record, never these.
STEP_FIELDS = frozenset(("kind", "rank", "step", "loss", "loss_nonfinite", "tokens", "start_ns", "end_ns"))


def _check_extra_key(key: Any) -> None:
    if not isinstance(key, str):
        raise ValueError(f"st.extra keys are strings (JSON object keys), got {key!r}")
    if key in STEP_FIELDS:
        raise ValueError(f"st.extra[{key!r}] would overwrite the step record's own field {key!r}; "
                         f"use another key (the record's fields: {', '.join(sorted(STEP_FIELDS))})")


_EXTRA_DEPTH = 8  # nesting an `st.extra` value may have (a JSON record's, not a data structure's)


def _check_extra_value(key: str, value: Any, depth: int = 0) -> None:
    """ValueError unless `value` is what JSON writes as it is: None, a bool, a number (a one-element tensor
    or a numpy scalar too, read as a number at the step end), a string, or a list, tuple or dict of these.
    Anything else (a set, a many-element tensor, an object) would be written as its str(): refused here, at
    the line that set it, rather than recorded as text."""
    if value is None or isinstance(value, (bool, str)) or _is_bool_scalar(value):
        return
    if _is_number(value):
        if isinstance(value, numbers.Integral) and not -2 ** 63 <= value < 2 ** 63:
            raise ValueError(f"st.extra[{key!r}]: {value} is past what the record's JSON writes (a 64-bit integer); "
                             "give it as a float or a string")
        return
    if depth < _EXTRA_DEPTH and isinstance(value, (list, tuple)):
        for v in value:
            _check_extra_value(key, v, depth + 1)
        return
    if depth < _EXTRA_DEPTH and isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"st.extra[{key!r}]: keys of a nested dict are strings (JSON object keys), got {k!r}")
            _check_extra_value(key, v, depth + 1)
        return
    what = (f"a tensor of {value.numel()} elements (.tolist() gives a list)" if isinstance(value, torch.Tensor)
            else repr(value) if depth >= _EXTRA_DEPTH or not isinstance(value, (list, tuple, dict))
            else f"values nested deeper than {_EXTRA_DEPTH}")
    raise ValueError(f"st.extra[{key!r}] takes what JSON writes: None, a bool, a number (or a one-element tensor), "
                     f"a string, or a list or dict of these; got {what}")


def _is_bool_scalar(value: Any) -> bool:
    """A numpy bool (np.bool_), which is no numbers.Number: written as true or false."""
    return getattr(value, "shape", None) == () and getattr(getattr(value, "dtype", None), "kind", None) == "b"


def plain_extra(value: Any) -> Any:
    """An `st.extra` value as the step record writes it: one-element tensors and numpy scalars as numbers."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if _is_bool_scalar(value):
        return bool(value)
    if isinstance(value, (list, tuple)):
        return [plain_extra(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_extra(v) for k, v in value.items()}
    value = value.item() if isinstance(value, torch.Tensor) else value
    if isinstance(value, bool):  # a one-element bool tensor
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


class StepExtra(dict):
    """`st.extra`: a dict that refuses, at assignment, keys that are fields of the step record and values
    JSON would write as text, so the error points at the line that set it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()
        self.update(*args, **kwargs)

    def __setitem__(self, key: str, value: Any) -> None:
        _check_extra_key(key)
        _check_extra_value(key, value)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = dict(*args, **kwargs)
        for key, value in new.items():  # all or nothing
            _check_extra_key(key)
            _check_extra_value(key, value)
        super().update(new)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other: Any) -> "StepExtra":
        self.update(other)
        return self


def _is_number(value: Any) -> bool:
    # bool is an int to Python but no loss or token count; a one-element tensor is read at the step end
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex()


class StepInfo:
    """Filled in by the training loop inside `with rec.step(s) as st:`: `loss` (a number or a one-element
    tensor), `tokens` (a number), `extra` (more keys for the step record). Each is checked where it is
    assigned (ValueError); once the step has ended (`end()`, called as its `with` block exits) its record
    is written, and setting one is a RuntimeError rather than a value silently never recorded."""

    __slots__ = ("step", "loss", "tokens", "extra", "_ended")

    def __init__(self, step: int, loss: Any = None, tokens: Any = None, extra: dict[str, Any] | None = None):
        self.step = step
        self.loss = loss
        self.tokens = tokens
        self.extra = {} if extra is None else extra

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_ended", False):
            raise RuntimeError(f"st.{name} set after step {self.step} ended: its record is written as the "
                               "`with rec.step(...) as st:` block exits, so set it inside the block")
        if name in ("loss", "tokens"):
            if value is not None and not _is_number(value):
                raise ValueError(f"st.{name} must be a number, got {value!r}")
            if name == "tokens" and isinstance(value, numbers.Real) and not (
                    math.isfinite(value) and 0 <= value < 2 ** 63 and value == int(value)):
                # a count; a one-element tensor is read at the step end, where raising would lose the step
                raise ValueError(f"st.tokens is a count of tokens, a whole number from 0 to 2**63 - 1; got {value!r}")
        elif name == "extra":
            if not isinstance(value, dict):
                raise ValueError(f"st.extra must be a dict, got {value!r}")
            value = StepExtra(value)
        object.__setattr__(self, name, value)

    def end(self) -> None:
        """The step's record is taken: later assignments raise."""
        object.__setattr__(self, "_ended", True)

    def __repr__(self) -> str:
        return f"StepInfo(step={self.step}, loss={self.loss!r}, tokens={self.tokens!r}, extra={dict(self.extra)!r})"


# Whether a torch.profiler is recording (a private torch API: without it, records are not named inside a
# profiler window, and a profile window never finds another profiler running; nothing else changes).
profiler_active = getattr(torch.autograd, "_profiler_enabled", None) or (lambda: False)


# What a name keeps in torch.profiler's trace: printable ASCII but '"' (written unescaped, it ends the
# trace's JSON string early and leaves the file unreadable) and '\\' (written as '/'). The profiler writes
# a name with any other character as "unknown" or drops the character, so the trace would not carry the
# label the run directory does.
_TRACEABLE = re.compile(r'[ !#-\[\]-~]*')
_traceable: set[str] = set()  # names already checked, a set lookup on the hot path; at most _REMEMBERED
TRACEABLE_RULE = "printable ASCII without '\"' or '\\'"


def check_name(name: Any, what: str, empty: bool = False) -> None:
    """ValueError unless `name` is a string that torch.profiler's trace keeps as it is (_TRACEABLE), and not
    empty unless `empty`."""
    if type(name) is str and name in _traceable:
        return
    if not isinstance(name, str) or not (name or empty):
        raise ValueError(f"{what} must be a {'' if empty else 'non-empty '}string; got {name!r}")
    if not _TRACEABLE.fullmatch(name):
        raise ValueError(f"{what} must be {TRACEABLE_RULE}, as torch.profiler writes it into its trace "
                         f"(it writes other characters as 'unknown' or drops them; a '\"' leaves the trace "
                         f"unreadable); got {name!r}")
    if name and len(_traceable) < _REMEMBERED:  # "" is not remembered: where it is allowed is the caller's
        _traceable.add(name)                      # call; a new name per call is checked each time, bounded


STEP_MAX = 2 ** 53 - 1  # the loader keeps step numbers exact as float64 (a column with missing values)


def check_step(step: Any) -> int:
    """A step number as an int: a whole number (an int, a numpy integer, a one-element integer tensor; not a
    bool, float or string) in 0..STEP_MAX, else ValueError. Readers key a rank's records by step, and -1
    means outside any step."""
    return _whole_number(step, "a step number must be")


def _whole_number(value: Any, must: str) -> int:
    """check_step's test, its error beginning with `must` ("a step number must be")."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not (
            value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= STEP_MAX:
        raise ValueError(f"{must} a whole number in 0..2**53-1; got {value!r}")
    return int(value)


def check_label(label: Any) -> None:
    """A collective's label: a non-empty string (check_name) other than NO_LABEL, the name readers show the
    unlabelled ones under, or None for an unlabelled collective."""
    if label is None:
        return
    if not isinstance(label, str) or not label:
        raise ValueError(f"label must be a non-empty string, or None for an unlabelled collective; got {label!r}")
    check_name(label, "label")
    check_not_reserved(label, "label", " pass label=None for that, or another name")


def check_not_reserved(name: str, what: str, instead: str = " choose another name") -> None:
    """ValueError for NO_LABEL given as a label (a collective's, a watch() label, commscope.label's): it is
    what readers call the collectives recorded without one, so a label of that name would merge with them."""
    if name == NO_LABEL:
        raise ValueError(f"{what} {NO_LABEL!r} is what readers call a collective recorded without a label:"
                         f"{instead}")


def check_phase(phase: Any) -> None:
    """A collective's phase: a string (check_name; may be empty) without ':'. The profiler scope around a
    launch is `commscope:<label>:<phase>`, read back by splitting at its last ':', so a label may hold ':'
    and a phase may not."""
    check_name(phase, "phase", empty=True)
    if ":" in phase:
        raise ValueError(f"phase must not contain ':' (the trace names a collective's scope "
                         f"commscope:<label>:<phase>, split at its last ':'); got {phase!r}")


def check_compute(compute: Any) -> None:
    if compute is not None and not isinstance(compute, bool):
        raise ValueError(f"compute must be True, False or None (count by the region's name); got {compute!r}")


def end_status(exc: BaseException | None) -> tuple[str, str | None]:
    """(status, error) for a rank whose recording ends with `exc` (None: no exception)."""
    # sys.exit(0) is a normal end of the script, not a failure of the rank.
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return "completed", None
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "KeyboardInterrupt"
    return "failed", f"{type(exc).__name__}: {exc}"


class CollectiveHandle:
    """Wraps the `Work` of an async collective; `wait()` blocks like `Work.wait()`. `is_completed()` and
    `get_future()` are the Work's, so code written for torch's Work runs on a handle (a wait through the
    future is not the recorded wait: docs/recording.md)."""

    def __init__(self, work: Any):
        self.work = work

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()

    def is_completed(self) -> bool:
        return self.work is None or bool(self.work.is_completed())

    def get_future(self) -> Any:
        if self.work is None:  # torch ran nothing (this rank is outside the group): a future already done
            fut = torch.futures.Future()
            fut.set_result(None)
            return fut
        return self.work.get_future()


class NullRecorder:
    """Records nothing. Same interface as `commscope.recording.Recorder`."""

    enabled = False

    def align_clocks(self, group: Any = None) -> None:
        pass

    def write_config(self, config: dict) -> None:
        from commscope.rundir.io import check_config

        check_config(config)  # as the Recorder does: a script that records nothing fails as one that records

    def watch(self, named_params: dict) -> None:
        """Register post-accumulate-grad hooks on every labelled parameter (label → Parameter)."""

    def handle_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGHUP), grace_s: float = 2.0) -> None:
        """Turn the signals a launcher ends ranks with into a status (the Recorder's); records nothing here."""

    def unwatch(self) -> None:
        """Remove the hooks `watch` registered."""

    def set_micro_step(self, micro_step: int | None) -> None:
        """Set the micro-step (gradient-accumulation index) that hooks and regions are attributed to."""
        check_micro_step(micro_step)  # the same values as a recording's: a script runs with either

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[StepInfo]:
        info = StepInfo(check_step(step))
        try:
            yield info
        finally:
            info.end()  # as a recording's: a script runs the same with either

    @contextlib.contextmanager
    def region(self, name: str, compute: bool | None = None) -> Iterator[None]:
        check_name(name, "a region's name")  # the same names as a recording's: a script runs with either
        yield

    def collective(self, fn: Callable, *args: Any, label: str | None, phase: str, **kwargs: Any) -> CollectiveHandle:
        """Launch `fn(*args, async_op=True, **kwargs)` (a torch.distributed collective)."""
        check_collective_fn(fn, kwargs)
        check_label(label)
        check_phase(phase)
        return CollectiveHandle(fn(*args, async_op=True, **kwargs))

    def inflight_snapshot(self) -> list[dict]:
        """Collectives launched but not known to be finished (for the hang watchdog)."""
        return []

    def blocked_where(self) -> str:
        """Where the main thread is blocked when a signal's handler cannot run (nothing recorded to say)."""
        return "in C++ (e.g. a collective's wait)"

    def close(self, status: str = "completed", error: str | None = None) -> None:
        pass

    def __enter__(self) -> "NullRecorder":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.close(*end_status(exc))
