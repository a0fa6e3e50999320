"""Parse modded-nanogpt speedrun training logs into one result per run.

A log starts with the training script's source, then a line of 100 `=`, environment info, another such
line, then the training output. A run's result is the LAST line of the form
`step:N/N val_loss:L train_time:Tms ...` where the step equals the total: the final validation.

Invariants: only text after the first separator line is searched (the script source above it contains
format strings, not results); a log whose last step never reported a validation loss is *incomplete*
and carries no numbers, so it can never be averaged in by accident; a log without the speedrun format
at all is *garbled*, and so is a final line whose numbers do not parse as finite decimals
(`train_time:1.2.3ms`, `val_loss:1e5e5`, `val_loss:inf`, a 400-digit number) or whose time is not
positive or loss negative (a cross-entropy is never below 0): `parse_log` never raises for content and never returns a number that is not finite.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from commscope.load import limits
from commscope.load.files import describe

SEPARATOR = "=" * 100
_VAL_LINE = re.compile(
    r"^step:(?P<step>\d{1,18})/(?P<total>\d{1,18})\s+val_loss:(?P<loss>\S+)\s+train_time:(?P<ms>\S+?)ms\b"
)
_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")  # what the script's print writes
_MAX_DIGITS = 30  # a loss or a time in ms has a few digits; more is not a number the script printed
_ANY_STEP = re.compile(r"^step:(\d{1,18})/(\d{1,18})\b")  # longer is not a step count (nor int()-able)


@dataclass(frozen=True)
class LogResult:
    """One training log. `train_time_s` and `val_loss` are None unless `complete`."""

    path: Path
    complete: bool
    problem: str | None  # why it is incomplete or garbled, None when complete
    last_step: int | None
    total_steps: int | None
    val_loss: float | None = None
    train_time_s: float | None = None


def parse_log(path: Path) -> LogResult:
    """Read one modded-nanogpt log; never raises for bad content, only reports it in `problem`."""
    path = Path(path)
    what = describe(str(path))
    if what is not None:  # a FIFO would block the read forever
        return LogResult(path, False, f"unreadable: {what}, not a file", None, None)
    try:
        size = path.stat().st_size
        if size > limits.DOC_BYTES.value():
            return LogResult(path, False, f"unreadable: {size / 2 ** 20:,.1f} MiB is over the limit of "
                             f"{limits.DOC_BYTES.shown()} (set {limits.DOC_BYTES.env}=N to raise it)", None, None)
        text = path.read_text(errors="replace")
    except OSError as e:
        return LogResult(path, False, f"unreadable: {e.strerror}", None, None)
    # The script source precedes the first separator; results only come after it.
    _, sep, output = text.partition(SEPARATOR)
    if not sep:
        output = text
    last_step = total = None
    final = None
    for line in output.splitlines():
        m = _ANY_STEP.match(line)
        if not m:
            continue
        last_step, total = int(m.group(1)), int(m.group(2))
        v = _VAL_LINE.match(line)
        if v and last_step == total:
            final = v
    if last_step is None or total is None:
        return LogResult(path, False, "garbled: no `step:N/M` lines (not a modded-nanogpt log?)", None, None)
    if final is None:
        return LogResult(path, False, f"incomplete: stopped at step {last_step}/{total} without a final val_loss",
                         last_step, total)
    if last_step != total:  # steps after the final validation: another run appended, which never finished
        return LogResult(path, False, f"incomplete: goes on after its final validation, to step "
                         f"{last_step}/{total} without a final val_loss (two runs in one file?)", last_step, total)
    if final.group("loss") == "nan":  # diverged, not a usable result
        return LogResult(path, False, "incomplete: final val_loss is nan", last_step, total)
    loss, ms = _number(final.group("loss")), _number(final.group("ms"))
    if loss is None or loss < 0 or ms is None or ms <= 0:  # a cross-entropy loss is never negative
        bad_loss = loss is None or loss < 0
        bad = f"val_loss:{final.group('loss')}" if bad_loss else f"train_time:{final.group('ms')}ms"
        return LogResult(path, False, f"garbled: final line has {_clip(bad)}, not a finite "
                         f"{'loss >= 0' if bad_loss else 'positive time'}", last_step, total)
    return LogResult(path, True, None, int(final.group("step")), int(final.group("total")),
                     val_loss=loss, train_time_s=ms / 1000.0)


def _number(text: str) -> float | None:
    """A finite decimal as the training script prints it, or None (`1.2.3`, `1e5e5`, `inf`, 400 digits)."""
    if len(text) > _MAX_DIGITS or not _DECIMAL.fullmatch(text):
        return None
    v = float(text)
    return v if math.isfinite(v) else None


def _clip(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
