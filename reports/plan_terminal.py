"""`commscope plan`'s terminal output: it renders a plan made by commscope.plan (the JSON-shaped dict
`commscope plan --json` prints) and computes nothing but its layout."""
from __future__ import annotations

from rich.bar import Bar
from rich.console import Console
from rich.table import Table

from commscope.util.text import counted


# Above this many ranks a strategy's chart shows the BARS_EACH_END slowest and fastest ranks, not every rank
BARS_ALL_RANKS = 64
BARS_EACH_END = 8


def _mb(b: float) -> str:
    return f"{b / 2 ** 20:,.1f} MiB"


def _ms(v: float) -> str:
    """Milliseconds to 3 significant digits (0.211, 1.04, 12.5), whole from 100."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _fine_ms(v: float) -> str:
    """Milliseconds to 4 decimals, or to 4 significant digits below 0.001 ms: the tiny preset's makespans
    (0.000156 against 0.000170) would all read 0.0002."""
    return f"{v:.4f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.4g}"


def time_model_text(tm: dict) -> str:
    """The plan's `time_model` in words: "FLOPs at 300 TFLOP/s", or the measured time of each matrix shape
    ("measured per matrix: 64x64 0.211 ms, 256x64 2 ms")."""
    if tm.get("kind") == "measured":
        shapes = ", ".join(f"{shape} {_ms(ms)} ms" for shape, ms in (tm.get("ms_per_matrix") or {}).items())
        return f"measured per matrix: {shapes}" if shapes else "measured per matrix"
    if tm.get("kind") == "flops":
        return f"FLOPs at {tm['tflops']:,.4g} TFLOP/s"
    return str(tm)


def print_plan(plan: dict, console: Console) -> None:
    """The strategies table, a per-rank bar chart per strategy, and the measured / TP notes when present."""
    n_pad = sum(m["padding"] for m in plan["matrices"])
    console.print(f"{len(plan['matrices'])} matrices ({n_pad} padding) over {counted(plan['world_size'], 'rank')}; "
                  f"balancing cost: {plan['cost']}; alpha {plan['alpha']}; "
                  f"time model: {time_model_text(plan['time_model'])}")
    t = Table(title="Strategies (makespan: slowest rank's predicted optimizer time)")
    for h in ("strategy", "max/mean", "padding waste", "makespan ms", "max recv", "max send", "collective"):
        t.add_column(h, justify="left" if h == "strategy" else "right")
    for name, s in plan["strategies"].items():
        t.add_row(name, f"{s['max_over_mean']:.4f}", f"{s['padding_waste']:.1%}",
                  _fine_ms(s['predicted_makespan_ms']), _mb(max(s["recv_bytes"])), _mb(max(s["send_bytes"])),
                  _mb(s["collective_bytes"]))
    console.print(t)
    top = max(max(s["per_rank_ms"]) for s in plan["strategies"].values()) or 1.0
    world = plan["world_size"]
    for name, s in plan["strategies"].items():
        ms_of = s["per_rank_ms"]
        if world > BARS_ALL_RANKS:  # a bar per rank of 16,384 is 16,384 lines: the ends of the range say it
            by_time = sorted(range(world), key=lambda r: (-ms_of[r], r))
            shown = by_time[:BARS_EACH_END] + by_time[-BARS_EACH_END:]
            title = (f"{name}: optimizer time (ms) of the {BARS_EACH_END} slowest and {BARS_EACH_END} fastest of "
                     f"{world:,} ranks (--json has every rank's)")
        else:
            shown, title = list(range(world)), f"{name}: per-rank optimizer time (ms)"
        bars = Table(title=title, show_header=False, box=None)
        bars.add_column("rank", justify="right")
        bars.add_column("bar", width=50)
        bars.add_column("ms", justify="right")
        bars.add_column("matrices", justify="right")
        owned = [0] * plan["world_size"]
        for r in s["assignment"].values():
            owned[r] += 1
        for i, r in enumerate(shown):
            if i == BARS_EACH_END and len(shown) < world:
                bars.add_row("…", "", f"{world - len(shown):,} more", "")
            ms, pad = ms_of[r], s["padding_per_rank"][r]
            bars.add_row(f"rank {r}", Bar(top, 0, ms, width=50), _fine_ms(ms),
                         f"{owned[r]}" + (f" + {pad} pad" if pad else ""))
        console.print(bars)
    for name, why in plan["unavailable"].items():
        console.print(f"{name}: unavailable ({why})")
    if plan.get("trainer_refusal"):
        console.print(f"note: the reference trainer refuses this world size ({plan['trainer_refusal']}): the plan "
                      "is of the optimizer's partition alone")
    if "measured" in plan:
        m = plan["measured"]
        console.print(f"measured ({m['run']}, {m['steps']} steps, median): optimizer makespan "
                      f"{_fine_ms(m['measured_makespan_ms'])} ms; predicted for the run's "
                      f"{'recorded matrix owners' if m['run_partition'] == 'owners' else 'bank layout'} "
                      f"{_fine_ms(m['predicted_run_makespan_ms'])} ms")
        if m.get("run_status") is None:
            console.print("note: neither summary.json nor a status.json says how the run ended: its recorded "
                          "steps calibrate the plan")
        elif m["run_status"] != "completed":
            console.print(f"note: the run did not complete (status {m['run_status']}): its finished steps "
                          "calibrate the plan")
        if m.get("partial_steps"):
            console.print(f"note: step(s) {', '.join(map(str, m['partial_steps']))} not recorded by every rank "
                          "that updates matrices: left out of the measured makespan")
    if "tp" in plan:
        tp = plan["tp"]
        console.print(f"TP {tp['tp']}: {tp['group_count']} micro-groups (capacity {_mb(tp['capacity_bytes'])}), "
                      f"gather {_mb(tp['gather_bytes'])} + scatter {_mb(tp['scatter_bytes'])}, "
                      f"predicted makespan {_fine_ms(tp['predicted_makespan_ms'])} ms")
        g = Table(title="micro-groups")
        for h in ("group", "matrices", "hosts", "bytes", "gather", "scatter", "compute ms"):
            g.add_column(h, justify="right")
        for grp in tp["groups"]:
            g.add_row(str(grp["group"]), str(len(grp["matrices"])),
                      " ".join(str(h) for h in sorted(set(grp["hosts"]))), _mb(grp["bytes"]),
                      _mb(grp["gather_bytes"]), _mb(grp["scatter_bytes"]), _fine_ms(grp['compute_ms']))
        console.print(g)
        console.print("per-rank compute ms: " + ", ".join(_fine_ms(x) for x in tp["per_rank_ms"]))
        if tp.get("over_capacity"):
            n = len(tp["over_capacity"])
            said = "1 matrix larger than the capacity" if n == 1 else f"{n} matrices larger than the capacity"
            console.print(f"note: {said} ({_mb(tp['capacity_bytes'])}): {'each is' if n > 1 else 'it is'} a group of "
                          "its own, over the capacity (matrices are never split)")
