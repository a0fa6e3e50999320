"""`--optimizer-partition alpha-lpt`: the planner's owners per matrix, and an optimizer that updates each
NorMuon matrix on its owner only yet trains exactly like the bank's even split.

The multi-rank part trains the real tiny GPT on 2 and 4 gloo ranks (one fork per world size) three ways
— bank split, the planner's alpha-lpt owners, and hand-made owners that are non-contiguous and leave a
rank without any matrix — and the assertions run in the parent.
"""
from __future__ import annotations

import pytest
import torch

from commscope.errors import UserError
from commscope.plan import matrices_for_config
from instrumented_model.config import make_config
from instrumented_model.optimizer import NorMuonAndAdam
from instrumented_model.partition import matrix_owners
from optim_fakes import ListRecorder, run_gloo_ranks

STEPS, GLOBAL_BATCH = 3, 8
BANKS = ("attn", "mlp")


# ----- the owners -----

@pytest.mark.parametrize("preset, ws", [("tiny", 2), ("tiny", 4), ("tiny", 8), ("speedrun", 8)])
def test_alpha_lpt_owns_every_real_matrix_once_and_no_padding(preset, ws):
    cfg = make_config(preset, ws)
    owners = matrix_owners(cfg, ws, "alpha-lpt")
    for m in matrices_for_config(cfg):
        o = owners[m.label][m.bank_index]
        assert (o == -1) if m.padding else (0 <= o < ws), (m, o)
    assert sum(len(v) for v in owners.values()) == len(matrices_for_config(cfg))
    assert owners == matrix_owners(cfg, ws, "alpha-lpt")  # every rank computes the same


def test_alpha_lpt_is_uneven_on_tiny_4():
    """The case the trainer test exercises: unequal shares (else it would only re-test the bank)."""
    owners = matrix_owners(make_config("tiny", 4), 4, "alpha-lpt")
    counts = [owners["attn"].count(r) for r in range(4)]
    assert len(set(counts)) > 1 and sum(counts) == 24


def test_bank_and_world_1_need_no_owners_and_bad_name_is_refused():
    cfg = make_config("tiny", 4)
    assert matrix_owners(cfg, 4, "bank") is None
    assert matrix_owners(make_config("tiny", 1), 1, "alpha-lpt") is None
    with pytest.raises(UserError, match="optimizer-partition"):
        matrix_owners(cfg, 4, "lpt")


@pytest.mark.parametrize("owners, match", [
    ({"attn": (0,) * 23}, "need 24 owners"),
    ({"attn": (0,) * 23 + (4,)}, "need 24 owners"),
    ({"scalars": (0,)}, "not NorMuon banks"),
])
def test_bad_owners_are_refused(owners, match):
    from instrumented_model.model import GPT

    cfg = make_config("tiny", 4)
    with pytest.raises(UserError, match=match):
        NorMuonAndAdam(GPT(cfg).labelled_params(), rank=0, world_size=4, matrix_owners=owners)


# ----- training on 2 and 4 ranks -----

def _custom_owners(ws: int) -> dict[str, tuple[int, ...]]:
    """Non-contiguous, reversed and empty shares: rank 0 owns no attn matrix, padding left alone."""
    attn = tuple(ws - 1 - (k % (ws - 1)) for k in range(24))  # ranks ws-1 .. 1, never 0
    mlp = tuple(-1 if k >= 14 else (k * 3) % ws for k in range(16))
    return {"attn": attn, "mlp": mlp}


def _train(rank: int, ws: int, owners) -> dict:
    from instrumented_model.model import GPT

    cfg = make_config("tiny", ws)
    torch.manual_seed(0)
    # float64 gradients: gloo's 4-rank sums round differently when matrices move between chunks, and
    # fp32 last-bit noise is amplified by Adam on rare tokens' rows and by cautious-decay mask flips
    model = GPT(cfg).double()
    params = model.labelled_params()
    rec = ListRecorder()
    opt = NorMuonAndAdam(params, rank=rank, world_size=ws, recorder=rec, matrix_owners=owners, split_step=2)
    g = torch.Generator().manual_seed(1)
    per = GLOBAL_BATCH // ws
    for s in range(STEPS):
        tokens = torch.randint(0, cfg.vocab_size, (GLOBAL_BATCH, cfg.seq_len + 1), generator=g)
        x, y = tokens[rank * per:(rank + 1) * per, :-1], tokens[rank * per:(rank + 1) * per, 1:]
        model(x, y).backward()
        opt.step(s)
        opt.zero_grad()
    own = {b: opt.slots[b].own_idx.tolist() if opt.slots[b].own_idx is not None else None for b in BANKS}
    return {"params": {k: p.detach().clone() for k, p in params.items()}, "own": own,
            "collectives": [e[1:] for e in rec.log if e[0] == "collective"],
            "updates": [e[1] for e in rec.log if e[0] == "enter" and e[1].startswith("update:")],
            "unpacks": [e[1] for e in rec.log if e[0] == "enter" and e[1].startswith("unpack:")]}


def _three_ways(rank: int, ws: int) -> dict:
    cfg = make_config("tiny", ws)
    return {"bank": _train(rank, ws, None),
            "alpha-lpt": _train(rank, ws, matrix_owners(cfg, ws, "alpha-lpt")),
            "custom": _train(rank, ws, _custom_owners(ws))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {ws: run_gloo_ranks(_three_ways, ws, tmp_path_factory.mktemp(f"part{ws}")) for ws in (2, 4)}


def _owners_of(ws: int, variant: str) -> dict[str, tuple[int, ...]]:
    return _custom_owners(ws) if variant == "custom" else matrix_owners(make_config("tiny", ws), ws, variant)


@pytest.mark.parametrize("ws", [2, 4])
@pytest.mark.parametrize("variant", ["alpha-lpt", "custom"])
def test_partitioned_training_equals_bank(runs, ws, variant):
    bank0 = runs[ws][0]["bank"]["params"]
    for r, res in enumerate(runs[ws]):
        for label, p in res[variant]["params"].items():
            # float64 gradients make this exact in practice; a wrong owner/packing is off by ~1e-3
            torch.testing.assert_close(p, bank0[label], atol=1e-7, rtol=0,
                                       msg=lambda m: f"ws={ws} rank={r} {label}: {m}")
    # and the banks really moved (equality with an untrained model would be vacuous)
    from instrumented_model.model import GPT
    torch.manual_seed(0)
    init = GPT(make_config("tiny", ws)).labelled_params()
    for b in BANKS:
        moved = (bank0[b] - init[b]).flatten(2 if b == "mlp" else 1).abs().amax(-1)
        assert (moved[:7] > 0).all() if b == "mlp" else (moved > 0).all()


@pytest.mark.parametrize("ws", [2, 4])
@pytest.mark.parametrize("variant", ["alpha-lpt", "custom"])
def test_every_matrix_updated_exactly_once_by_its_owner(runs, ws, variant):
    owners = _owners_of(ws, variant)
    for b in BANKS:
        per_rank = [res[variant]["own"][b] for res in runs[ws]]
        flat = sorted(k for ks in per_rank for k in ks)
        assert flat == sorted(k for k, o in enumerate(owners[b]) if o >= 0)  # once each, none twice
        for r, ks in enumerate(per_rank):
            assert all(owners[b][k] == r for k in ks)


@pytest.mark.parametrize("ws", [2, 4])
@pytest.mark.parametrize("variant", ["alpha-lpt", "custom"])
def test_same_schedule_as_bank_with_all_to_all_for_the_banks(runs, ws, variant):
    """The same (label, phase) launches as the bank split — one reduce and one gather per bank per step —
    so the two partitions' runs compare label by label; the banks' go through all_to_all_single, the
    rest is untouched; every rank times update:attn and update:mlp each step."""
    for res in runs[ws]:
        bank, part = res["bank"]["collectives"], res[variant]["collectives"]
        assert [c[:2] for c in part] == [c[:2] for c in bank]
        for (label, phase, op), (_, _, bank_op) in zip(part, bank):
            if label in BANKS:
                assert op == "all_to_all_single"
                assert bank_op == {"reduce": "reduce_scatter_tensor", "gather": "all_gather_into_tensor"}[phase]
            else:
                assert op == bank_op
        assert res[variant]["updates"] == res["bank"]["updates"]
        assert res[variant]["updates"].count("update:attn") == STEPS


@pytest.mark.parametrize("ws", [2, 4])
def test_alpha_lpt_moves_in_place_other_owner_sets_unpack(runs, ws):
    """alpha-lpt's owners are rank-ordered contiguous slices: the all_to_all reads and writes the bank
    itself; hand-made scattered owners need the owner-ordered copy, once per step."""
    custom = _custom_owners(ws)
    # owner order (rank 0's matrices first, bank order within) is the bank's own order iff in place
    scattered = [b for b in BANKS
                 if sorted(range(len(custom[b])), key=lambda k: (custom[b][k] < 0, custom[b][k], k))
                 != list(range(len(custom[b])))]
    assert "mlp" in scattered  # the test must exercise the copy
    for res in runs[ws]:
        assert res["alpha-lpt"]["unpacks"] == []
        assert sorted(res["custom"]["unpacks"]) == sorted([f"unpack:{b}" for b in scattered] * STEPS)


def test_doctor_does_not_call_uneven_all_to_all_a_desync():
    """alpha-lpt's gather sends each owner's share: all_to_all bytes differ per rank by design, while
    any other op with different bytes is still a desync."""
    import pandas as pd

    from commscope.analyze.doctor import check_desync

    def job(op, sizes):
        return pd.DataFrame({"group": "0", "seq": 0, "rank": range(len(sizes)), "op": op, "bytes": sizes,
                             "dtype": "float32", "label": "gather", "call_ns": 1, "finished": True,
                             "source": "events.jsonl", "step": 1})
    assert check_desync(job("all_to_all", [327680, 262144, 262144]), "events.jsonl") is None
    d = check_desync(job("all_gather", [327680, 262144, 262144]), "events.jsonl")
    assert (d.verdict, d.culprit_ranks) == ("desync", [0])
    mixed = job("all_to_all", [1, 1, 1])
    mixed.loc[2, "op"] = "all_gather"
    d = check_desync(mixed, "events.jsonl")
    assert (d.verdict, d.culprit_ranks) == ("desync", [2])