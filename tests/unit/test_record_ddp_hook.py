"""commscope.recording.ddp_comm_hook without a process group: fake buckets and a fake recorder, inside
real autograd backward passes, so the wait's placement (end of backward, bucket order, before a callback
queued after the last bucket, as DDP's finalize is) is checked without DDP."""
import pytest
import torch

from commscope.recording import ddp_comm_hook


class FakeBucket:
    def __init__(self, index, n=4):
        self._index = index
        self._buf = torch.full((n,), 6.0)

    def index(self):
        return self._index

    def buffer(self):
        return self._buf


class FakeGroup:
    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n


class FakeWork:
    def __init__(self, tensor, log, name):
        self.tensor, self.log, self.name, self.waits = tensor, log, name, 0

    def wait(self):
        self.waits += 1
        self.log.append(("wait", self.name))

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result([self.tensor])
        return fut


class FakeHandle:
    def __init__(self, work):
        self.work = work

    def wait(self):
        self.work.wait()


class FakeRecorder:
    """Duck-types `Recorder.collective`: logs the launch, returns a handle whose wait is logged."""

    def __init__(self):
        self.log, self.calls, self.works = [], [], []

    def collective(self, fn, tensor, *, label, phase, group=None):
        self.calls.append({"label": label, "phase": phase, "group": group, "tensor": tensor})
        self.log.append(("launch", label))
        work = FakeWork(tensor, self.log, label)
        self.works.append(work)
        return FakeHandle(work)


def backward_with_buckets(hook, group, buckets, after_last=None, fail=False):
    """Run a backward pass whose gradient hook calls `hook` for each bucket in order, then (like DDP's
    reducer after the last bucket) queues `after_last`; `fail` raises after the buckets."""
    x = torch.ones(2, requires_grad=True)
    y = x * 3

    def on_grad(grad):
        futs = [hook(group, b) for b in buckets]
        if after_last is not None:
            torch.autograd.Variable._execution_engine.queue_callback(after_last)
        if fail:
            raise RuntimeError("boom")
        on_grad.futs = futs
        return grad

    y.register_hook(on_grad)
    y.sum().backward()
    return on_grad.futs


def test_labels_default_prefix_and_callable():
    for label, want in ((None, ["ddp_bucket0", "ddp_bucket1"]), ("enc.", ["enc.0", "enc.1"]),
                        (lambda b: f"b{b.index() * 10}", ["b0", "b10"])):
        rec = FakeRecorder()
        hook = ddp_comm_hook(rec) if label is None else ddp_comm_hook(rec, label=label)
        backward_with_buckets(hook, FakeGroup(1), [FakeBucket(0), FakeBucket(1)])
        assert [c["label"] for c in rec.calls] == want
        assert {c["phase"] for c in rec.calls} == {"allreduce"}


def test_phase_and_group_are_passed_through():
    rec, group = FakeRecorder(), FakeGroup(2)
    backward_with_buckets(ddp_comm_hook(rec, phase="grads"), group, [FakeBucket(0)])
    assert rec.calls[0]["phase"] == "grads" and rec.calls[0]["group"] is group


@pytest.mark.parametrize("label", ["", 3, None])
def test_bad_label_raises(label):
    with pytest.raises(ValueError, match="label"):
        ddp_comm_hook(FakeRecorder(), label=label)


def test_bucket_is_averaged_in_place_and_returned():
    rec = FakeRecorder()
    bucket = FakeBucket(0)
    futs = backward_with_buckets(ddp_comm_hook(rec), FakeGroup(3), [bucket])
    assert torch.equal(bucket.buffer(), torch.full((4,), 2.0))
    assert rec.calls[0]["tensor"] is bucket.buffer()  # the all_reduce runs on DDP's own bucket buffer
    assert futs[0].wait() is bucket.buffer()


def test_waits_at_end_of_backward_in_bucket_order_before_finalize():
    rec = FakeRecorder()
    hook = ddp_comm_hook(rec)
    buckets = [FakeBucket(i) for i in range(3)]
    backward_with_buckets(hook, FakeGroup(2), buckets, after_last=lambda: rec.log.append(("finalize", None)))
    assert rec.log == [("launch", "ddp_bucket0"), ("launch", "ddp_bucket1"), ("launch", "ddp_bucket2"),
                       ("wait", "ddp_bucket0"), ("wait", "ddp_bucket1"), ("wait", "ddp_bucket2"),
                       ("finalize", None)]
    assert [w.waits for w in rec.works] == [1, 1, 1]


def test_each_backward_waits_only_its_own_buckets():
    rec = FakeRecorder()
    hook = ddp_comm_hook(rec)
    for _ in range(2):
        backward_with_buckets(hook, FakeGroup(2), [FakeBucket(0), FakeBucket(1)])
    assert [w.waits for w in rec.works] == [1, 1, 1, 1]


def test_backward_that_raised_leaves_no_stale_wait():
    rec = FakeRecorder()
    hook = ddp_comm_hook(rec)
    with pytest.raises(RuntimeError, match="boom"):
        backward_with_buckets(hook, FakeGroup(2), [FakeBucket(0)], fail=True)
    backward_with_buckets(hook, FakeGroup(2), [FakeBucket(0), FakeBucket(1)])
    # The failed pass's bucket is never waited on by the next pass (its callbacks were discarded).
    assert [w.waits for w in rec.works] == [0, 1, 1]


def test_outside_backward_records_without_a_wait():
    # DDP's join() runs the hook from forward to shadow a finished rank's buckets and waits itself.
    rec = FakeRecorder()
    hook = ddp_comm_hook(rec)
    bucket = FakeBucket(0)
    fut = hook(FakeGroup(2), bucket)
    hook(FakeGroup(2), FakeBucket(1))
    assert fut.wait() is bucket.buffer()
    assert [c["label"] for c in rec.calls] == ["ddp_bucket0", "ddp_bucket1"]
    backward_with_buckets(hook, FakeGroup(2), [FakeBucket(0)])
    assert [w.waits for w in rec.works] == [0, 0, 1]
