"""Print the `commscope plan` strategy summary for the speedrun preset at several world sizes.

The numbers are model predictions, not measurements: loads come from the cost model (numel or Polar
Express flops) and milliseconds from the flops time model at the assumed DEFAULT_TFLOPS throughput
(commscope/plan/evaluate.py). They do not depend on the machine running this script.
Run: python bench/plan_table.py  (used for the table in docs/plan.md)
"""
from __future__ import annotations

from instrumented_model.config import make_config

from commscope.plan import DEFAULT_TFLOPS, STRATEGIES, make_plan, matrices_for_config


def main() -> None:
    print(f"speedrun preset, flops time model at an assumed {DEFAULT_TFLOPS:.0f} TFLOP/s")
    print("| world size | cost | " + " | ".join(STRATEGIES) + " |")
    print("|---|---|" + "---|" * len(STRATEGIES))
    for ws in (2, 4, 8):
        for cost in ("numel", "flops"):
            plan = make_plan(matrices_for_config(make_config("speedrun", ws)), ws, cost=cost)
            cells = [f"{plan['strategies'][s]['max_over_mean']:.3f} / {plan['strategies'][s]['predicted_makespan_ms']:.3f}"
                     for s in STRATEGIES]
            print(f"| {ws} | {cost} | " + " | ".join(cells) + " |")
    print("cells: max/mean of the balanced cost / predicted makespan ms")


if __name__ == "__main__":
    main()
