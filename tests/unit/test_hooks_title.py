"""`commscope hooks`' header counts micro-steps per rank, not summed over ranks."""
from __future__ import annotations

import shutil

from bad_inputs import invoke
from commscope.analyze.hooks_order import HookOrders
from paths import TESTS
from reports.hooks_terminal import title


def _orders(per_rank: dict[int, int], world: int) -> HookOrders:
    return HookOrders(world, {r: [{"step": s, "micro_step": None, "order": ["a", "b"]} for s in range(n)]
                              for r, n in per_rank.items()}, [])


def test_title_counts_per_rank():
    assert title(_orders({r: 40 for r in range(8)}, 8)) == "Hook firing order: 40 micro-steps on each of 8 ranks"
    assert title(_orders({0: 40, 1: 40}, 8)) == "Hook firing order: 40 micro-steps on each of 2 of 8 ranks"
    assert title(_orders({0: 40, 1: 39, 2: 40}, 3)) == ("Hook firing order, 3 ranks; micro-steps per rank: "
                                                        "rank 0 40, rank 1 39, rank 2 40")
    assert title(_orders({3: 1}, 4)) == "Hook firing order: 1 micro-step on rank 3 (1 of 4 ranks)"
    assert title(_orders({0: 5}, 1)) == "Hook firing order: 5 micro-steps on rank 0"


def test_cli_header_on_a_recorded_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    code, out, err = invoke(["hooks", str(run)])
    assert code == 0, err
    # 2 ranks, 3 (step, micro-step) entries each: 3 per rank, not 6
    assert out.splitlines()[0] == "Hook firing order: 3 micro-steps on each of 2 ranks"
