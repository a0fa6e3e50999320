"""`commscope.label(...)` scopes in a stock torch.profiler trace, mapped back to the collectives."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from commscope.analyze.placement import placement
from commscope.load import load_path

SCRIPT = textwrap.dedent('''
    import sys, torch, torch.distributed as dist, commscope
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    out = sys.argv[1]
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=0, world_size=1)
    model = DDP(torch.nn.Linear(64, 64))

    def hook(state, bucket):  # a DDP comm hook: the bucket's all_reduce, labelled
        with commscope.label("ddp_grads"):
            fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    model.register_comm_hook(None, hook)
    x = torch.ones(1000)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank0.json")) as p:
        for step in range(3):
            loss = model(torch.ones(8, 64)).sum()
            with record_function("backward"):
                loss.backward()
            with commscope.label("grads"):
                with commscope.label("attn"):
                    dist.all_reduce(x)
                dist.all_reduce(x * 2, async_op=True).wait()
            dist.all_reduce(x)
            p.step()
    dist.destroy_process_group()
''')


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("labelled")
    (d / "record.py").write_text(SCRIPT)
    subprocess.run([sys.executable, str(d / "record.py"), str(d)], check=True, capture_output=True, timeout=300)
    (d / "record.py").unlink()
    (d / "store").unlink(missing_ok=True)
    return load_path(str(d))


def test_labels_from_a_stock_profiler_trace(trace):
    c = trace.collectives.sort_values("call_ns")
    got = c["label"]
    ar = c["op"] == "all_reduce"
    # per profiled step: the DDP bucket (in the hook), attn (innermost of two scopes), grads, unlabelled
    # (the collective's own name)
    assert list(got[ar]) == ["ddp_grads", "attn", "grads", "allreduce"] * 2
    assert c.loc[ar, "phase"].isna().all()
    assert not got[~ar].isin(["ddp_grads", "attn", "grads"]).any()  # DDP's own broadcasts: no scope
    assert set(c.loc[ar, "step"]) == {1, 2}


def test_a_recorded_backward_scope_ends_backward(trace):
    c = trace.collectives
    p = placement(trace).set_index(["rank", "group_seq"])
    p["scope"] = c["label"].set_axis(pd.MultiIndex.from_arrays([c["rank"], c["seq"]])).reindex(p.index)
    assert set(p["backward_end_source"]) == {"backward region"}
    inside = p["scope"] == "ddp_grads"
    assert inside.sum() == 2 and (p.loc[inside, "start_vs_backward_end_ms"] < 0).all()  # from the hook
    after = p["scope"].isin(["attn", "grads"]) | ((p["scope"] == "allreduce") & (p["op"] == "all_reduce"))
    assert after.sum() == 6 and (p.loc[after, "start_vs_backward_end_ms"] > 0).all()


def test_label_is_a_record_function_scope_and_import_is_lazy():
    code = ("import sys, commscope; assert 'torch' not in sys.modules; "
            "cm = commscope.label('attn'); import torch; "
            "assert isinstance(cm, torch.profiler.record_function) and cm.name == 'commscope:attn:'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    import commscope

    with pytest.raises(ValueError, match="non-empty string"):
        commscope.label("")
