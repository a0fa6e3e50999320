"""Multi-rank (gloo, CPU) tests of NorMuonAndAdam: an N-rank sharded run equals the 1-rank run
(world 2 and 4), the hooks schedule equals the explicit one, the tied embedding survives sharding and
the untie reshards lm_head's Adam moments into embed's row slices exactly as a 1-rank run holds them,
and the collectives are launched in the scheduled order.

Each world size is spawned once (torch.multiprocessing, free port) and runs every configuration;
ranks save what they saw and the assertions run in the parent.
"""
from __future__ import annotations

import pytest
import torch

from instrumented_model.optimizer import NorMuonAndAdam
from instrumented_model.param_table import PARAM_TABLE, SCATTER_ORDER, WORK_ORDER
from optim_fakes import ListRecorder, backward_step, make_params, run_gloo_ranks

STEPS, SPLIT = 4, 2
# (schedule, layout[, reduce]): "in-place" reduce-scatters into the rank's own gradient rows, as on NCCL
CONFIGS = [("explicit", "transposed"), ("hooks", "transposed"), ("explicit", "standard"), ("hooks", "standard"),
           ("explicit", "transposed", "in-place"), ("hooks", "standard", "in-place")]


def run_config(schedule: str, layout: str, *rest) -> dict:
    """Train the fake model for STEPS steps; return per-step params, this rank's shard states, the log."""
    *reduce, rank, world_size = rest
    params = make_params(layout)
    rec = ListRecorder()
    opt = NorMuonAndAdam(params, rank=rank, world_size=world_size, recorder=rec, comm_schedule=schedule,
                         head_layout=layout, split_step=SPLIT, wd=0.05, in_place_reduce=reduce == ["in-place"])
    assert all(s.reduce_buf is None for s in opt.slots.values()) == (reduce == ["in-place"] or world_size == 1)
    if schedule == "hooks":
        opt.install_hooks()
    out = {"params": [], "states": [], "log": rec.log}
    for s in range(STEPS):
        rec.log.append(("step", s))
        backward_step(opt, params, s, rank, world_size, layout)
        opt.step(s)
        opt.zero_grad()
        out["params"].append({k: p.detach().clone() for k, p in params.items()})
        out["states"].append({k: {n: (v.clone() if torch.is_tensor(v) else v) for n, v in slot.state.items()}
                              for k, slot in opt.slots.items()})
    return out


def _all_configs(rank: int, world_size: int) -> dict:
    return {cfg: run_config(*cfg, rank, world_size) for cfg in CONFIGS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{world_size: [per-rank result dicts]}; world 1 runs in-process (no communication at all)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results = {1: [_all_configs(0, 1)]}
        for ws in (2, 4):
            results[ws] = run_gloo_ranks(_all_configs, ws, tmp_path_factory.mktemp(f"ws{ws}"))
    finally:
        torch.set_num_threads(n)
    return results


def _gather_state(per_rank: list[dict], cfg, step: int, label: str, key: str) -> torch.Tensor:
    """Reassemble a sharded state tensor from the ranks' dim-0 shards (replicated: rank 0's)."""
    shards = [r[cfg]["states"][step][label][key] for r in per_rank]
    if PARAM_TABLE[label].comms == "replicated":
        return shards[0]
    return torch.cat(shards, 0)


@pytest.mark.parametrize("ws", [2, 4])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_sharded_equals_one_rank(runs, ws, cfg):
    ref = runs[1][0][cfg]
    for r, res in enumerate(runs[ws]):
        for s in range(STEPS):
            for label, p in res[cfg]["params"][s].items():
                torch.testing.assert_close(p, ref["params"][s][label], atol=2e-5, rtol=1e-4,
                                           msg=lambda m: f"ws={ws} rank={r} step={s} {label}: {m}")
    # optimizer state too (sharded moments concatenated back along dim 0)
    for s in range(STEPS):
        for label in ("attn", "mlp", "ve0", "lm_head", "embed", "scalars"):
            for key in ref["states"][s][label]:
                if key == "step":
                    continue
                torch.testing.assert_close(_gather_state(runs[ws], cfg, s, label, key),
                                           ref["states"][s][label][key], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("ws", [1, 2, 4])
@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_hooks_equal_explicit(runs, ws, layout):
    for res in runs[ws]:
        a, b = res[("explicit", layout)], res[("hooks", layout)]
        for s in range(STEPS):
            for label in a["params"][s]:
                torch.testing.assert_close(b["params"][s][label], a["params"][s][label], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("ws", [1, 2, 4])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_tied_until_split_then_resharded_moments(runs, ws, cfg):
    layout = cfg[1]
    tr = (lambda t: t.T) if layout == "transposed" else (lambda t: t)
    for res in runs[ws]:
        for s in range(STEPS):
            p = res[cfg]["params"][s]
            if s < SPLIT:  # tied: embed is an exact copy of lm_head after every step
                assert torch.equal(p["embed"], tr(p["lm_head"]))
            else:  # untied: they drift apart (both updated, from different gradients)
                assert not torch.allclose(p["embed"], tr(p["lm_head"]), atol=1e-4)
    # Right after step SPLIT-1 embed holds lm_head's moments in its own sharding, step count kept.
    s = SPLIT - 1
    for key in ("exp_avg", "exp_avg_sq"):
        emb = _gather_state(runs[ws], cfg, s, "embed", key)
        head = _gather_state(runs[ws], cfg, s, "lm_head", key)
        assert torch.equal(emb, tr(head))
        torch.testing.assert_close(emb, runs[1][0][cfg]["states"][s]["embed"][key], atol=2e-5, rtol=1e-4)
        assert emb.abs().sum() > 0
    for r in runs[ws]:
        assert r[cfg]["states"][s]["embed"]["step"] == SPLIT
        assert r[cfg]["states"][STEPS - 1]["embed"]["step"] == STEPS


def _collectives_of_step(log: list[tuple], step: int) -> list[tuple]:
    i = log.index(("step", step))
    j = log.index(("step", step + 1)) if ("step", step + 1) in log else len(log)
    return log[i:j]


@pytest.mark.parametrize("layout", ["transposed", "standard"])
def test_explicit_schedule_order(runs, layout):
    log = runs[2][0][("explicit", layout)]["log"]
    sharded = {label for label, spec in PARAM_TABLE.items() if spec.comms == "sharded"}
    for s in range(STEPS):
        tied = s < SPLIT
        labels = [label for label in SCATTER_ORDER if not (tied and label == "embed")]
        ev = _collectives_of_step(log, s)
        colls = [e[1:] for e in ev if e[0] == "collective" and e[2] != "untie"]
        reduces = [c for c in colls if c[1] in ("reduce", "allreduce")]
        gathers = [c for c in colls if c[1] == "gather"]
        assert [c[0] for c in reduces] == labels
        for label, phase, fn in reduces:
            want = ("reduce", "reduce_scatter_tensor") if label in sharded else ("allreduce", "all_reduce")
            assert (phase, fn) == want
        assert [c[0] for c in gathers] == [lb for lb in WORK_ORDER if lb in sharded and lb in labels]
        assert all(c[2] == "all_gather_into_tensor" for c in gathers)
        # all reduces inside phase 1, every update inside phase 2, in work order
        p1_end = ev.index(("exit", "opt.phase1"))
        assert all(ev.index(("collective", *c)) < p1_end for c in reduces)
        updates = [e[1] for e in ev if e[0] == "enter" and e[1].startswith("update:")]
        assert updates == [f"update:{lb}" for lb in WORK_ORDER if lb in labels]
        p2 = (ev.index(("enter", "opt.phase2")), ev.index(("exit", "opt.phase2")))
        assert all(p2[0] < ev.index(("enter", u)) < p2[1] for u in updates)
        # the untie all-gather of lm_head's moments happens once, at the end of step SPLIT-1 (transposed)
        untie = [e for e in ev if e[0] == "collective" and e[2] == "untie"]
        want_untie = 2 if (layout == "transposed" and s == SPLIT - 1) else 0
        assert len(untie) == want_untie


def test_hooks_schedule_launches_adam_reduces_during_backward(runs):
    log = runs[2][0][("hooks", "transposed")]["log"]
    for s in range(STEPS):
        ev = _collectives_of_step(log, s)
        p1 = ev.index(("enter", "opt.phase1"))
        before = {e[1] for e in ev[:p1] if e[0] == "collective"}
        inside = [e[1] for e in ev[p1:ev.index(("exit", "opt.phase1"))] if e[0] == "collective"]
        adam = {lb for lb, spec in PARAM_TABLE.items() if spec.optim == "adam"}
        assert before == adam - ({"embed"} if s < SPLIT else set())
        assert inside == ["attn", "mlp"]  # NorMuon banks still launched by the optimizer, in scatter order
