"""`commscope run --no-hook-order`: the trainer records everything but the gradient hooks (the hooks are
most of light recording's cost on a compiled GPU step), and `commscope hooks` on such a run says why it has
no hook order."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def commscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commscope", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def _kinds(run) -> dict[str, int]:
    kinds: dict[str, int] = {}
    with open(run / "rank0" / "events.jsonl") as f:
        for line in f:
            k = json.loads(line)["kind"]
            kinds[k] = kinds.get(k, 0) + 1
    return kinds


def test_no_hook_order_records_no_hooks_and_everything_else(tmp_path):
    plain, bare = tmp_path / "with", tmp_path / "without"
    for out, extra in ((plain, []), (bare, ["--no-hook-order"])):
        p = commscope("run", "--nproc", "1", "--steps", "3", "--out", str(out), *extra)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    with_hooks, without = _kinds(plain), _kinds(bare)
    assert with_hooks["hook"] == 3 * 13  # 13 labels a step
    assert "hook" not in without
    assert {k: v for k, v in with_hooks.items() if k != "hook"} == without  # same regions, collectives, steps
    assert json.loads((bare / "config.json").read_text())["args"]["no_hook_order"] is True
    p = commscope("hooks", str(bare))
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "has no hook records" in p.stderr and "--no-hook-order" in p.stderr
