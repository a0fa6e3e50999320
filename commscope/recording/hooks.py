"""Gradient-hook order: when each watched parameter's gradient became ready, in which order, per
micro-step (`hook` records, docs/run_format.md; `commscope hooks` shows them).

`HookOrder` is one part of `Recorder` (commscope/recording/recorder.py assembles the parts). `watch()`
registers a post-accumulate-grad hook per label; each firing appends the tuple
(step, micro_step, label, position, local perf_counter_ns) to `_hook_buf`, which the step writer
(steps.py) turns into records on the common time axis when it writes the step. A tuple, not a record:
the hook runs on autograd's thread inside `backward()`, on the step's critical path.

The micro-step (`set_micro_step`, reset to 0 by each step's start) is also what regions are attributed to.

Sampling (`watch(..., every=N)`, N > 1): the hooks exist only during steps whose number is a multiple of N;
the step context (steps.py) registers them on entering such a step (`_arm_hooks`) and removes them on
leaving it (`_disarm_hooks`). An unregistered hook costs nothing at all, not even autograd's call into
Python, which is nearly all of light recording's overhead; the firing order is usually the same step to
step, so a sample of steps shows it. With N = 1 the hooks stay registered from `watch()` to `unwatch()`,
and no step registers or removes anything.

Invariants: a label is watched at most once (a second hook would record every firing twice); every
label is checked before any hook is registered, so a refused `watch()` registers nothing; positions
restart at 0 with every micro-step; the hooks' closures hold the one `_hook_buf` list, so it is only
ever emptied in place; one recorder samples on one schedule (`_hooks_every`), and with N > 1 no hook is
registered outside a sampled step.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

import torch

from commscope.recording.api import check_every
from commscope.recording.closing import CLOSED

_perf = time.perf_counter_ns


class HookOrder:
    """Hook firings of watched parameters. State: `_hook_buf`, `_hook_handles`, `_watched`, `_micro`, `_pos`,
    `_hooks_every` (None until `watch()`), `_sampled` ((label, param) registered per sampled step, N > 1)."""

    def _init_hooks(self) -> None:
        self._hook_buf: list[tuple] = []
        self._hook_handles: list[Any] = []
        self._watched: set[str] = set()
        self._micro: int | None = None
        self._pos = 0
        self._hooks_every: int | None = None
        self._sampled: list[tuple[str, Any]] = []

    def watch(self, named_params: Mapping[str, torch.nn.Parameter] | Iterable[tuple[str, Any]],
              every: int = 1) -> None:
        if self._closed:
            raise RuntimeError(CLOSED)
        every = check_every(every)
        if self._watched and self._hooks_every != every:
            # the readers name the sampled steps by one N (meta.json's hooks_every)
            raise ValueError(f"watch(): every={every} differs from the earlier watch()'s every="
                             f"{self._hooks_every}; one recorder samples hook order on one schedule "
                             "(unwatch() first to change it)")
        items = list(named_params.items() if isinstance(named_params, Mapping) else named_params)
        seen = set(self._watched)
        for label, param in items:  # all checked before any hook is registered
            if not (isinstance(param, torch.Tensor) and param.is_leaf and param.requires_grad):
                raise ValueError(f"watch(): {label!r} is not a leaf tensor that requires grad")
            if label in seen:  # a second hook would record every firing twice
                raise ValueError(f"watch(): {label!r} is already watched")
            seen.add(label)
        self._watched = seen
        written = self._hooks_every or 1  # what meta.json says now (no key: every step)
        self._hooks_every = every
        if every != written:
            self._write_meta()  # meta.json tells readers that hook records exist only on sampled steps
        if every == 1:
            self._register(items)
            return
        self._sampled += items
        if self._step is not None and self._step % every == 0:  # watch() inside a sampled step
            self._register(items)

    def _register(self, items: list[tuple[str, Any]]) -> None:
        for label, param in items:
            self._hook_handles.append(param.register_post_accumulate_grad_hook(self._hook_for(label)))

    def _arm_hooks(self, step: int) -> None:
        """Step entry (steps.py): register the sampled hooks when `step` is sampled (every > 1 only)."""
        if self._sampled and step % self._hooks_every == 0:
            self._register(self._sampled)

    def _disarm_hooks(self) -> None:
        """Step exit (steps.py): remove the sampled hooks, so the steps until the next sample pay nothing."""
        if self._sampled:
            for h in self._hook_handles:
                h.remove()
            self._hook_handles.clear()

    def unwatch(self) -> None:
        """Remove every hook `watch` registered (the parameters keep training, unrecorded)."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles.clear()
        self._watched.clear()
        self._sampled.clear()

    def _hook_for(self, label: str) -> Callable[[torch.Tensor], None]:
        buf = self._hook_buf

        def on_grad_ready(_param: torch.Tensor) -> None:
            # Runs on the autograd thread; backward() blocks the loop, so no concurrent flush.
            buf.append((self._step, self._micro, label, self._pos, _perf()))
            self._pos += 1

        return on_grad_ready

    def set_micro_step(self, micro_step: int | None) -> None:
        self._micro = micro_step
        self._pos = 0
