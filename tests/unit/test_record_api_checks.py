"""The recording API refuses what would write a wrong or mixed-up run: reserved st.extra keys, repeated step
numbers, a rank folder that already holds a recording, bad arguments (before any folder exists), use after
close, duplicate watches, non-numeric losses, empty labels and names the profiler's trace would not keep
as given; and it writes what it is told: region compute
flags, interrupted status, a one-step profile window, notes on windows that did not run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import orjson
import pytest
import torch

import commscope
from commscope.recording import NullRecorder, Recorder, StepInfo
from paths import ROOT


def read(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def status(run, rank=0):
    """status.json without `ended_ns`, which every status the recorder writes holds (an int, ns)."""
    doc = orjson.loads((run / f"rank{rank}" / "status.json").read_bytes())
    assert type(doc.pop("ended_ns")) is int
    return doc


@pytest.mark.parametrize("key", ["kind", "rank", "step", "loss", "loss_nonfinite", "tokens", "start_ns", "end_ns"])
def test_extra_keys_that_are_step_fields_are_refused_where_they_are_set(tmp_path, key):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0) as st:
        st.extra["lr"] = 0.1
        with pytest.raises(ValueError, match=f"st.extra\\['{key}'\\] would overwrite the step record's own field"):
            st.extra[key] = "oops"
        with pytest.raises(ValueError, match=f"'{key}'"):
            st.extra.update({"ok": 1, key: 99})
        with pytest.raises(ValueError, match=f"'{key}'"):
            st.extra = {key: 7}
        st.loss = 2.5
    rec.close()
    (step,) = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert step["kind"] == "step" and step["rank"] == 0 and step["step"] == 0 and step["loss"] == 2.5
    assert isinstance(step["end_ns"], int) and step["lr"] == 0.1 and "ok" not in step


def test_extra_values_are_what_json_writes_and_tensors_are_read_as_numbers(tmp_path):
    """A grad norm (a one-element tensor) is recorded as its number, not as the text "tensor(0.5)"; values
    JSON would write as their str() are refused where they are set."""
    import numpy as np

    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0) as st:
        st.extra["grad_norm"] = torch.tensor(0.5)
        st.extra["lr"] = np.float32(0.25)
        st.extra["count"] = np.int64(3)
        st.extra["flag"], st.extra["on"] = np.bool_(True), torch.tensor(False)
        st.extra.update({"phase": "warmup", "flags": [True, None, {"n": torch.tensor([7])}]})
        for bad, said in ((torch.ones(3), "a tensor of 3 elements"), ({1, 2}, "{1, 2}"), (object, "<class 'object'>"),
                          ([1, {2}], "{2}"), ({"a": {3: 1}}, "keys of a nested dict are strings"),
                          (2 ** 70, "past what the record's JSON writes")):
            with pytest.raises(ValueError, match=re.escape(said)):
                st.extra["bad"] = bad
            with pytest.raises(ValueError, match=re.escape(said)):
                st.extra.update({"fine": 1, "bad": bad})
        assert "bad" not in st.extra and "fine" not in st.extra
    rec.close()
    (step,) = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert (step["grad_norm"], step["lr"], step["count"], step["phase"]) == (0.5, 0.25, 3, "warmup")
    assert step["flags"] == [True, None, {"n": 7}] and type(step["count"]) is int
    assert step["flag"] is True and step["on"] is False


def test_loss_and_tokens_must_be_numbers(tmp_path):
    null_step = NullRecorder().step(0)  # held open: leaving it ends the step, and then no field may be set
    for info in (StepInfo(0), null_step.__enter__()):
        for bad in (-5, 1.5, float("inf"), float("nan"), 2 ** 70):
            with pytest.raises(ValueError, match="st.tokens is a count of tokens, a whole number from 0 to 2"):
                info.tokens = bad
        info.tokens = 64.0  # a whole number, as a float
        with pytest.raises(ValueError, match="a tensor of 2 elements"):
            info.extra["x"] = torch.ones(2)
        with pytest.raises(ValueError, match="st.loss must be a number, got 'abc'"):
            info.loss = "abc"
        with pytest.raises(ValueError, match="st.tokens must be a number, got \\[1, 2\\]"):
            info.tokens = [1, 2]
        with pytest.raises(ValueError, match="st.loss must be a number, got True"):
            info.loss = True
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0) as st:
        st.loss = torch.tensor(1.5)
        st.tokens = torch.tensor(4096)
    rec.close()
    (step,) = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert step["loss"] == 1.5 and step["tokens"] == 4096 and isinstance(step["tokens"], int)


@pytest.mark.parametrize("bad", [1.5, "3", None, True, -1, 2 ** 53, torch.tensor(2.0), torch.tensor([1, 2])])
def test_a_step_number_is_a_whole_number_the_loader_keeps_exact(tmp_path, bad):
    """1.5 would be recorded as step 1, "3" as 3, 2**60 dropped by the loader as past 2**53, and -1 is
    the loader's "outside any step": each is refused where it is given, recording or not."""
    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        with pytest.raises(ValueError, match=r"a step number must be a whole number in 0..2\*\*53-1; got "):
            with r.step(bad):
                pass
    import numpy as np
    with rec.step(np.int64(7)) as st, NullRecorder().step(2 ** 53 - 1), NullRecorder().step(torch.tensor(3)) as t:
        st.loss = 1.0
        assert t.step == 3 and type(t.step) is int
    rec.close()
    (step,) = read(tmp_path / "rank0" / "events.jsonl")
    assert step["step"] == 7 and type(step["step"]) is int


def test_a_step_field_set_after_its_step_ended_is_refused_not_lost(tmp_path):
    """The step record is written as the `with` block exits: a loss set after it would never be recorded,
    so it raises (recorder and NullRecorder alike) and the record holds what was set inside."""
    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        with r.step(0) as st:
            st.loss = 1.5
        for name, value in (("loss", 2.0), ("tokens", 8), ("extra", {"lr": 0.1})):
            with pytest.raises(RuntimeError, match=f"st.{name} set after step 0 ended: its record is written"):
                setattr(st, name, value)
    rec.close()
    (step,) = read(tmp_path / "rank0" / "events.jsonl")
    assert step["loss"] == 1.5 and step["tokens"] is None


def test_a_step_number_recorded_twice_is_refused_at_entry(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    for epoch in range(2):
        for i in range(2):
            if epoch == 0:
                with rec.step(i):
                    pass
            else:
                with pytest.raises(RuntimeError, match="^step 0 was already recorded by this rank; step numbers "
                                                       "must be unique across the run \\(count steps across "
                                                       "epochs\\)$"):
                    with rec.step(i):
                        pass
                break
    rec.close()
    assert [e["step"] for e in read(tmp_path / "rank0" / "events.jsonl")] == [0, 1]


@pytest.mark.parametrize("leftover", ["events.jsonl", "status.json", "meta.json", "watchdog.json", "inflight.json",
                                      "trace.json.gz"])
def test_a_rank_folder_holding_a_recording_is_refused_before_anything_is_written(tmp_path, leftover):
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / leftover).write_bytes(b"{}")
    with pytest.raises(RuntimeError, match="rank0' already holds a recording .*record into a new run directory"):
        Recorder(tmp_path, rank=0, world_size=1)
    assert os.listdir(tmp_path / "rank0") == [leftover]
    Recorder(tmp_path, rank=1, world_size=2, align=False).close()  # another rank's folder is free
    (tmp_path / "empty" / "rank0").mkdir(parents=True)  # what the reference trainer creates first
    Recorder(tmp_path / "empty", rank=0, world_size=1).close()


def test_a_second_recording_into_the_same_run_directory_is_refused(tmp_path):
    with commscope.record(tmp_path) as rec:
        with rec.step(0):
            pass
    with pytest.raises(RuntimeError, match="already holds a recording"):
        commscope.record(tmp_path)
    assert status(tmp_path)["status"] == "completed"


def test_bad_arguments_raise_valueerror_and_leave_no_rank_folder(tmp_path):
    bad = [
        ({"device": "cuda"} if not torch.cuda.is_available() else {"device": "nonsense"}, "device"),
        ({"device": "nonsense"}, "device 'nonsense' is not a torch device"),
        ({"profile_steps": "8:5"}, "profile_steps"),
        ({"profile_steps": 2.5}, "profile_steps must be a step N"),
        ({"profile_steps": -1}, "profile_steps"),
        ({"mode": "loud"}, "mode must be one of"),
        ({"flush": "never"}, "flush must be one of"),
        ({"rank": -1}, r"rank must be a whole number from 0 to world_size - 1 \(0\); got -1"),
        ({"rank": 1}, r"rank must be .* got 1"),
        ({"rank": 0.5}, r"rank must be .* got 0.5"),
        ({"world_size": 0}, "world_size must be a whole number >= 1; got 0"),
        ({"world_size": True}, "world_size must be a whole number >= 1; got True"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            Recorder(tmp_path / "run", **{"rank": 0, "world_size": 1, **kwargs})
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_refused_at_construction(tmp_path):
    with pytest.raises(ValueError, match="device 'cuda': CUDA is not available"):
        commscope.record(tmp_path, device="cuda")
    assert not tmp_path.joinpath("rank0").exists()


def test_an_int_profile_steps_is_that_one_step(tmp_path, gloo1):
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1, profile_steps=1)
    assert (rec._window.first, rec._window.stop) == (1, 2)
    for s in range(3):
        with rec.step(s):
            rec.collective(dist.all_reduce, torch.ones(4), label="g", phase="p").wait()
    rec.close()
    assert (tmp_path / "rank0" / "trace.json.gz").exists()
    # meta.json says the window as "START:STOP", however it was asked for (compare's work key)
    assert json.loads((tmp_path / "rank0" / "meta.json").read_text())["profile_steps"] == "1:2"
    plain = Recorder(tmp_path / "plain", rank=0, world_size=1)
    plain.close()
    assert json.loads((tmp_path / "plain" / "rank0" / "meta.json").read_text())["profile_steps"] is None


def notes(capfd):
    return [line for line in capfd.readouterr().err.splitlines() if line.startswith("commscope:")]  # not Kineto's


def test_a_window_that_never_ran_or_ended_early_says_so_once_at_close(tmp_path, capfd):
    rec = Recorder(tmp_path / "never", rank=0, world_size=1, profile_steps="5:8")
    for s in range(3):
        with rec.step(s):
            pass
    capfd.readouterr()
    rec.close()
    rec.close()
    assert notes(capfd) == ["commscope: profile_steps 5:8 never ran: the last step was 2; no trace.json.gz was written"]
    assert not (tmp_path / "never" / "rank0" / "trace.json.gz").exists()

    rec = Recorder(tmp_path / "early", rank=0, world_size=1, profile_steps="1:8")
    for s in range(3):
        with rec.step(s):
            pass
    rec.close()
    assert notes(capfd) == ["commscope: profile_steps 1:8 ended early: the last step was 2; trace.json.gz holds steps 1:3"]

    rec = Recorder(tmp_path / "whole", rank=0, world_size=1, profile_steps="1:2")
    for s in range(3):
        with rec.step(s):
            pass
    rec.close()
    assert notes(capfd) == []


def test_a_closed_recorder_refuses_use_and_close_stays_idempotent(tmp_path, gloo1):
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.close()
    rec.close("failed", "late")
    p = torch.nn.Parameter(torch.ones(2))
    t = torch.ones(4)
    for use in (lambda: rec.step(0).__enter__(), lambda: rec.region("forward"),
                lambda: rec.collective(dist.all_reduce, t, label="g", phase="p"), lambda: rec.watch({"p": p}),
                lambda: rec.set_micro_step(1), lambda: rec.write_config({"args": {}})):
        with pytest.raises(RuntimeError, match="^the recorder is closed$"):
            use()
    assert status(tmp_path) == {"status": "completed", "error": None, "last_step": -1}
    assert torch.equal(t, torch.ones(4))


def test_watching_a_label_twice_is_refused_and_registers_nothing(tmp_path):
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.watch({"a": a})
    with pytest.raises(ValueError, match="watch\\(\\): 'a' is already watched"):
        rec.watch([("b", b), ("a", a)])
    with pytest.raises(ValueError, match="'c' is already watched"):
        rec.watch([("c", b), ("c", b)])
    with rec.step(0):
        ((a + b).sum()).backward()
    rec.unwatch()
    rec.watch({"a": a})  # unwatched labels may be watched again
    rec.close()
    hooks = [e["label"] for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "hook"]
    assert hooks == ["a"]


def test_empty_labels_are_refused_and_none_is_an_unlabelled_collective(tmp_path, gloo1):
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    t = torch.ones(4)
    for r in (rec, NullRecorder()):
        with pytest.raises(ValueError, match="label must be a non-empty string, or None for an unlabelled "
                                             "collective; got ''"):
            r.collective(dist.all_reduce, t, label="", phase="p")
        with pytest.raises(ValueError, match="got 3"):
            r.collective(dist.all_reduce, t, label=3, phase="p")
    with rec.step(0):
        rec.collective(dist.all_reduce, t, label=None, phase="p").wait()
    rec.close()
    (coll,) = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "collective"]
    assert coll["label"] is None
    for name in (None, ""):
        with pytest.raises(ValueError, match="a label must be a non-empty string"):
            commscope.label(name)


BAD_NAMES = ['a"b', "a\\b", "caf\u00e9", "a\tb", "a\nb"]


def test_names_the_profiler_would_not_keep_are_refused_everywhere_the_recorder_takes_one(tmp_path, gloo1):
    """torch.profiler writes a '"' into its JSON trace unescaped (the trace cannot be read), a '\\' as '/',
    and a name with any character beyond printable ASCII as "unknown": a label, phase or region name the
    trace would not carry as the run directory does is refused where it is given, recorded or not."""
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    t = torch.ones(4, requires_grad=True)
    for bad in BAD_NAMES:
        for r in (rec, NullRecorder()):
            with pytest.raises(ValueError, match="label must be printable ASCII without"):
                r.collective(dist.all_reduce, torch.ones(2), label=bad, phase="p")
            with pytest.raises(ValueError, match="phase must be printable ASCII without"):
                r.collective(dist.all_reduce, torch.ones(2), label="x", phase=bad)
            with pytest.raises(ValueError, match="a region's name must be printable ASCII without"):
                with r.region(bad):
                    pass
        with pytest.raises(ValueError, match="watch\\(\\): a label must be printable ASCII without"):
            rec.watch({bad: t})
        with pytest.raises(ValueError, match="a label must be printable ASCII without"):
            commscope.label(bad)
    rec.close()
    assert [e["kind"] for e in read(tmp_path / "rank0" / "events.jsonl")] == []  # nothing recorded meanwhile


def test_an_empty_phase_leaves_empty_region_names_refused():
    """A phase may be "" and a region name may not: the remembered names never let "" through."""
    from commscope.recording.api import check_name

    check_name("", "phase", empty=True)
    with pytest.raises(ValueError, match="a region's name must be a non-empty string; got ''"):
        check_name("", "a region's name")


def test_every_accepted_name_reaches_the_profiler_trace_as_given(tmp_path, gloo1):
    """The other side of the rule: printable ASCII, spaces, ':' and quotes but '"' included, is what the
    Kineto trace holds and the loader reads back as the label."""
    import torch.distributed as dist
    from commscope.load import load_path

    odd = "blocks.*.attn: q/k/v 'x' <1>"
    rec = Recorder(tmp_path, rank=0, world_size=1, profile_steps="0:1")
    with rec.step(0), rec.region(f"update:{odd}"):
        rec.collective(dist.all_reduce, torch.ones(8), label=odd, phase="reduce").wait()
    rec.close()
    tr = load_path(str(tmp_path))
    assert list(tr.collectives["label"]) == [odd] and set(tr.regions["name"]) == {f"update:{odd}"}
    import gzip
    doc = orjson.loads(gzip.decompress((tmp_path / "rank0" / "trace.json.gz").read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert f"commscope:{odd}:reduce" in names and f"update:{odd}" in names


def test_region_compute_is_written_only_when_given(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0):
        with rec.region("forward"):
            pass
        with rec.region("overlap_matmul", compute=True):
            pass
        with rec.region("compute:io", compute=False):
            pass
        with pytest.raises(ValueError, match="compute must be True, False or None"):
            rec.region("x", compute="yes")
    with NullRecorder().region("x", compute=True):
        pass
    rec.close()
    regions = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "region"]
    assert [(r["name"], r.get("compute", "absent")) for r in regions] == [
        ("forward", "absent"), ("overlap_matmul", True), ("compute:io", False)]


def test_keyboard_interrupt_leaving_the_block_is_interrupted(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with commscope.record(tmp_path) as rec:
            with rec.step(0):
                pass
            raise KeyboardInterrupt
    assert status(tmp_path) == {"status": "interrupted", "error": "KeyboardInterrupt", "last_step": 0}


TWO_PROFILERS = textwrap.dedent("""
    import sys, torch, commscope
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with commscope.record(sys.argv[1], trace="full") as rec:
            for s in range(4):
                with rec.step(s):
                    with rec.region("forward"):
                        torch.ones(8).sum()
    prof.export_chrome_trace(sys.argv[1] + "-user.json")
    print("done")
""")


def test_a_running_user_profiler_skips_the_window_with_one_warning(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", TWO_PROFILERS, str(out)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("commscope:")]
    assert warnings == ["commscope: warning: a torch.profiler is already running at step 1; profile_steps 1:3 is "
                        "skipped (torch runs one profiler at a time): read that profiler's own trace "
                        "(`commscope report` reads a folder of Kineto traces)"]
    assert not (out / "rank0" / "trace.json.gz").exists()
    assert status(out)["status"] == "completed"
    assert (tmp_path / "run-user.json").stat().st_size > 0


def test_a_phase_with_a_colon_and_the_reserved_label_are_refused(tmp_path, gloo1):
    """The trace names a collective's scope `commscope:<label>:<phase>` and the loader splits it at the last
    ':', so a label may hold ':' and a phase may not; "(no label)" is what readers call the unlabelled
    collectives, so a label of that name would merge with them."""
    import torch.distributed as dist
    from commscope.rundir.schema import NO_LABEL

    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        with pytest.raises(ValueError, match="phase must not contain ':'.*got 'ph:ase'"):
            r.collective(dist.all_reduce, torch.ones(2), label="a:b", phase="ph:ase")
        with pytest.raises(ValueError, match=r"label '\(no label\)' is what readers call"):
            r.collective(dist.all_reduce, torch.ones(2), label=NO_LABEL, phase="p")
    with pytest.raises(ValueError, match=r"watch\(\): '\(no label\)'"):
        rec.watch({NO_LABEL: torch.ones(2, requires_grad=True)})
    with pytest.raises(ValueError, match=r"'\(no label\)' is what readers call"):
        commscope.label(NO_LABEL)
    with rec.step(0):
        rec.collective(dist.all_reduce, torch.ones(2), label="a:b", phase="p").wait()  # ':' in a label is kept
    rec.close()
    assert [(e["label"], e["phase"]) for e in read(tmp_path / "rank0" / "events.jsonl")
            if e["kind"] == "collective"] == [("a:b", "p")]


def test_point_to_point_calls_are_refused_with_what_to_use(tmp_path, gloo1):
    """Readers pair a collective's calls across ranks by (group, seq); a send and its peer's recv would take
    one number as two ops (a false desync), so rec.collective takes collectives only."""
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        for fn in (dist.send, dist.recv, dist.isend, dist.irecv, dist.batch_isend_irecv):
            with pytest.raises(ValueError, match=f"dist.{fn.__name__} is point-to-point .* rec.region"):
                r.collective(fn, torch.ones(2), 0, label="p2p", phase="x")
    rec.close()
    assert read(tmp_path / "rank0" / "events.jsonl") == []  # nothing launched, nothing recorded


def test_a_collective_on_a_group_the_rank_is_not_in_records_nothing(tmp_path, gloo1):
    """torch runs nothing on a rank outside the group (dist.new_group([0, 1]) on rank 2 hands it
    GroupMember.NON_GROUP_MEMBER, of size -1): the recorder records nothing there either, and numbers
    nothing, rather than a record of group size -1 the loader would drop, which would make the rank's
    records look incomplete to the hang rule."""
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0):
        rec.collective(dist.all_reduce, torch.ones(2), label="other", phase="p",
                       group=dist.GroupMember.NON_GROUP_MEMBER).wait()
        rec.collective(dist.all_reduce, torch.ones(2), label="mine", phase="p").wait()
    rec.close()
    assert [(e["label"], e["group_size"], e["seq"]) for e in read(tmp_path / "rank0" / "events.jsonl")
            if e["kind"] == "collective"] == [("mine", 1, 0)]


def test_async_op_is_the_recorders_to_pass(tmp_path, gloo1):
    """rec.collective launches with async_op=True: a caller's own async_op, or a function without one (the
    object collectives block), is one clear ValueError before anything is launched or numbered."""
    import torch.distributed as dist

    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        with pytest.raises(ValueError, match="launches the collective with async_op=True itself .* leave async_op out"):
            r.collective(dist.all_reduce, torch.ones(2), label="a", phase="p", async_op=True)
        with pytest.raises(ValueError, match="dist.all_gather_object takes no async_op .* rec.region"):
            r.collective(dist.all_gather_object, [None], {"x": 1}, label="o", phase="p")
    with rec.step(0):
        rec.collective(dist.all_reduce, torch.ones(2), label="a", phase="p").wait()
    rec.close()
    assert [(e["label"], e["seq"]) for e in read(tmp_path / "rank0" / "events.jsonl")
            if e["kind"] == "collective"] == [("a", 0)]  # the refused calls took no sequence number


@pytest.mark.parametrize("bad", [-1, "a", 1.5, [1], 2 ** 60, True])
def test_set_micro_step_takes_whole_numbers_or_none(tmp_path, bad):
    """A micro-step the loader would drop (below 0, not a whole number, beyond 2**53) is refused at the call,
    as a step number is, by a recording and by NullRecorder alike."""
    rec = Recorder(tmp_path, rank=0, world_size=1)
    for r in (rec, NullRecorder()):
        with pytest.raises(ValueError, match="a micro-step must be None or a whole number in 0..2\\*\\*53-1"):
            r.set_micro_step(bad)
        r.set_micro_step(3)
        r.set_micro_step(None)
    rec.close()


def test_a_micro_step_takes_what_a_step_number_takes():
    """One whole-number test for steps and micro-steps: a one-element integer tensor or numpy integer is a
    micro-step as it is a step; a float tensor is neither."""
    import numpy as np

    from commscope.recording.api import check_micro_step, check_step

    for ok in (torch.tensor(2), np.int64(2), 2):
        assert check_step(ok) == check_micro_step(ok) == 2
    for bad in (torch.tensor(2.0), torch.tensor(True), torch.tensor([1, 2])):
        with pytest.raises(ValueError, match="a step number must be a whole number"):
            check_step(bad)
        with pytest.raises(ValueError, match="a micro-step must be None or a whole number"):
            check_micro_step(bad)
    assert check_micro_step(None) is None


def test_whether_a_function_takes_async_op_is_read_for_unhashable_callables_too():
    """The signature is remembered per function; a callable that cannot be a key is read each time."""
    from commscope.recording.api import _takes_async_op

    class Unhashable:
        __hash__ = None

        def __init__(self, takes: bool):
            self.takes = takes

        def __call__(self, tensor, async_op=False):
            return None

    class Blocking(Unhashable):
        def __call__(self, tensor):
            return None

    assert _takes_async_op(Unhashable(True)) is True
    assert _takes_async_op(Blocking(False)) is False
    assert _takes_async_op(lambda t, **kw: None) is True
    assert _takes_async_op(lambda t: None) is False


def test_a_recorder_whose_clock_alignment_fails_leaves_no_rank_folder(tmp_path, gloo1, monkeypatch):
    """The alignment is a collective: it fails where a peer refused (its folder holds an earlier run's
    recording) or never started. It runs before the rank folder exists, so a 3-rank job started into a
    2-rank run's directory leaves no rank2/ in it, which would make that run unreadable ("rank folder(s)
    [2] outside world_size 2")."""
    import commscope.recording.recorder as recorder_module

    def peer_gone(*args, **kwargs):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(recorder_module, "align_clocks", peer_gone)
    with pytest.raises(RuntimeError, match="Connection closed by peer") as err:
        Recorder(tmp_path / "run", rank=0, world_size=1)
    # the backend's words alone do not say what usually went wrong: a rank that made no Recorder
    assert str(err.value).startswith("commscope: rank 0: measuring the clock offset failed (Connection closed")
    assert "every rank creates its Recorder" in str(err.value)
    assert str(err.value.__cause__) == "Connection closed by peer"
    assert not (tmp_path / "run" / "rank0").exists()
    monkeypatch.undo()
    rec = Recorder(tmp_path / "run", rank=0, world_size=1)  # aligned: the folder, with meta.json
    rec.close()
    assert sorted(p.name for p in (tmp_path / "run" / "rank0").iterdir()) == [
        "events.jsonl", "meta.json", "status.json"]
