"""Gradient-hook order: when each watched parameter's gradient became ready, in which order, per
micro-step (`hook` records, docs/run_format.md; `commscope hooks` shows them).

`HookOrder` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts). `watch()`
registers a post-accumulate-grad hook per label; each firing appends the tuple
(step, micro_step, label, position, local perf_counter_ns) to `_hook_buf`, which the step writer
(steps.py) turns into records on the common time axis when it writes the step. A tuple, not a record:
the hook runs on autograd's thread inside `backward()`, on the step's critical path.

The micro-step (`set_micro_step`, reset to 0 by each step's start) is also what regions are attributed to.

Invariants: a label is watched at most once (a second hook would record every firing twice); every
label is checked before any hook is registered, so a refused `watch()` registers nothing; positions
restart at 0 with every micro-step; the hooks' closures hold the one `_hook_buf` list, so it is only
ever emptied in place.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

import torch

from commscope.recording.api import check_micro_step, check_name, check_not_reserved
from commscope.recording.closing import CLOSED

_perf = time.perf_counter_ns


class HookOrder:
    """Hook firings of watched parameters. State: `_hook_buf`, `_hook_handles`, `_watched`, `_micro`, `_pos`."""

    def _init_hooks(self) -> None:
        self._hook_buf: list[tuple] = []
        self._hook_handles: list[Any] = []
        self._watched: set[str] = set()
        self._micro: int | None = None
        self._pos = 0

    def watch(self, named_params: Mapping[str, torch.nn.Parameter] | Iterable[tuple[str, Any]]) -> None:
        if self._closed:
            raise RuntimeError(CLOSED)
        items = list(named_params.items() if isinstance(named_params, Mapping) else named_params)
        seen = set(self._watched)
        for label, param in items:  # all checked before any hook is registered
            check_name(label, "watch(): a label")
            check_not_reserved(label, "watch():")
            if not (isinstance(param, torch.Tensor) and param.is_leaf and param.requires_grad):
                raise ValueError(f"watch(): {label!r} is not a leaf tensor that requires grad")
            if label in seen:  # a second hook would record every firing twice
                raise ValueError(f"watch(): {label!r} is already watched")
            seen.add(label)
        for label, param in items:
            self._hook_handles.append(param.register_post_accumulate_grad_hook(self._hook_for(label)))
        self._watched = seen

    def unwatch(self) -> None:
        """Remove every hook `watch` registered (the parameters keep training, unrecorded)."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles.clear()
        self._watched.clear()

    def _hook_for(self, label: str) -> Callable[[torch.Tensor], None]:
        buf = self._hook_buf

        def on_grad_ready(_param: torch.Tensor) -> None:
            # Runs on the autograd thread; backward() blocks the loop, so no concurrent flush.
            buf.append((self._step, self._micro, label, self._pos, _perf()))
            self._pos += 1

        return on_grad_ready

    def set_micro_step(self, micro_step: int | None) -> None:
        if self._closed:  # as every other call of a closed recorder: no silent no-op
            raise RuntimeError(CLOSED)
        self._micro = check_micro_step(micro_step)
        self._pos = 0
