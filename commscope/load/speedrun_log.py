"""Parse modded-nanogpt speedrun training logs into one result per run.

A log starts with the training script's source, then a line of 100 `=`, environment info, another such
line, then the training output. A run's result is the LAST line of the form
`step:N/N val_loss:L train_time:Tms ...` where the step equals the total: the final validation.

Invariants: only text after the first separator line is searched (the script source above it contains
format strings, not results); a log whose last step never reported a validation loss is *incomplete*
and carries no numbers, so it can never be averaged in by accident; a log without the speedrun format
at all is *garbled*.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = "=" * 100
_VAL_LINE = re.compile(
    r"^step:(?P<step>\d+)/(?P<total>\d+)\s+val_loss:(?P<loss>[-+0-9.eE]+|nan|inf)\s+"
    r"train_time:(?P<ms>[0-9.]+)ms\b"
)
_ANY_STEP = re.compile(r"^step:(\d+)/(\d+)\b")


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
    try:
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
    if last_step is None:
        return LogResult(path, False, "garbled: no `step:N/M` lines (not a modded-nanogpt log?)", None, None)
    if final is None:
        return LogResult(path, False, f"incomplete: stopped at step {last_step}/{total} without a final val_loss",
                         last_step, total)
    loss = float(final.group("loss"))
    if loss != loss:  # NaN: diverged, not a usable result
        return LogResult(path, False, "incomplete: final val_loss is nan", last_step, total)
    return LogResult(path, True, None, int(final.group("step")), int(final.group("total")),
                     val_loss=loss, train_time_s=float(final.group("ms")) / 1000.0)
