"""Loom tensors through torch.multiprocessing (python/torch_loom/distributed/
sharing.py, runtime/ccl/shared.c).

One spawned consumer process receives loom tensors through a
torch.multiprocessing Queue and, step by step:

- sees a non-contiguous view's values and modifies it in place on a side
  stream (record_stream accepted): the producer sees the change (same
  memory, no copy);
- receives the same tensor again (the producer's storage is not moved or
  copied a second time) and a Parameter (stays a Parameter, keeps
  requires_grad); a CPU tensor in the same queue still goes PyTorch's way;
- reads a tensor whose producer dropped it before the read (the memory
  stays valid while the consumer holds it).

Then the regions are private (0600 memfds, no path, unique names), and none
remains in the producer once both sides released them. (Refusal where the
host cannot address device memory: tests/c/test_ccl.c.)
"""

import os

import pytest
import torch
import torch.multiprocessing as mp

from torch_loom import _C


def _consumer(inbox, outbox):
    import torch

    x = inbox.get()
    outbox.put(("view", str(x.device), x.cpu().tolist(), x.is_contiguous()))
    s = torch.loom.Stream()
    with torch.loom.stream(s):
        x.mul_(10)
    x.record_stream(s)  # as on CUDA: nothing to record for memory not from the allocator
    torch.loom.synchronize()
    outbox.put("modified")

    again, param, cpu = inbox.get(), inbox.get(), inbox.get()
    outbox.put(("again", again.cpu().tolist(), type(param).__name__, param.requires_grad,
                param.detach().cpu().tolist(), cpu.device.type, cpu.tolist()))

    late = inbox.get()
    assert inbox.get() == "dropped"  # the producer no longer holds it
    outbox.put(("late", late.sum().item()))
    del x, again, param, late
    outbox.put("released")


def _shared_maps():
    with open("/proc/self/maps") as f:
        return [l.split()[-2] if l.endswith("(deleted)\n") else l.split()[-1]
                for l in f if "loom-shared-" in l]


def _shared_fds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "loom-shared-" in os.readlink(f"/proc/self/fd/{fd}"):
                out.append(int(fd))
        except OSError:
            pass
    return out


def test_queue_passes_loom_tensors_without_copying():
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_consumer, args=(inbox, outbox))
    proc.start()
    try:
        base = torch.arange(12, dtype=torch.float32, device="loom").view(3, 4)
        x = base[:, 1:3]
        inbox.put(x)
        assert outbox.get(timeout=120) == ("view", "loom:0", [[1, 2], [5, 6], [9, 10]], False)
        assert outbox.get(timeout=60) == "modified"
        # The producer's base sees the consumer's in-place change.
        assert base.cpu().tolist() == [[0, 10, 20, 3], [4, 50, 60, 7], [8, 90, 100, 11]]
        assert _C._distributed.is_shared_storage(base)

        # The region is private and named for this process; a second send
        # of the same storage moves nothing.
        fds = _shared_fds()
        assert fds
        for fd in fds:
            assert os.stat(f"/proc/self/fd/{fd}").st_mode & 0o777 == 0o600
        ptr = base.data_ptr()
        inbox.put(x)
        assert base.data_ptr() == ptr
        param = torch.nn.Parameter(torch.full((2,), 3.0, device="loom"))
        inbox.put(param)
        inbox.put(torch.tensor([1.5, 2.5]))
        got = outbox.get(timeout=60)
        assert got == ("again", [[10, 20], [50, 60], [90, 100]], "Parameter", True, [3.0, 3.0],
                       "cpu", [1.5, 2.5])
        names = _shared_maps()
        assert len(names) == len(set(names)) == 2
        assert all(n.startswith(f"/memfd:loom-shared-{os.getpid()}-") for n in names), names

        # Dropped by the producer before the consumer reads it.
        late = torch.ones(1000, device="loom")
        inbox.put(late)
        del late
        inbox.put("dropped")
        assert outbox.get(timeout=60) == ("late", 1000.0)
        assert outbox.get(timeout=60) == "released"
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    del base, x, param
    import gc

    gc.collect()
    assert not _shared_maps() and not _shared_fds()


def test_sharing_rejects_bad_input():
    t = torch.ones(3, device="loom", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="requires grad and is not a leaf"):
        from multiprocessing.reduction import ForkingPickler

        ForkingPickler.dumps(t)
    with pytest.raises(RuntimeError, match="share_storage: expected a loom tensor"):
        _C._distributed.share_storage(torch.ones(2))
    # A descriptor that is not a sealed private memfd is refused.
    with open(__file__, "rb") as f:
        with pytest.raises(RuntimeError, match="open_shared_storage.*not a sealed, private memfd"):
            _C._distributed.open_shared_storage(f.fileno(), os.fstat(f.fileno()).st_size, 0)


def test_storages_views_and_empty_tensors_round_trip():
    import pickle

    from multiprocessing.reduction import ForkingPickler

    def trip(obj):
        return pickle.loads(ForkingPickler.dumps(obj))

    x = torch.arange(8.0, device="loom")
    storage = trip(x.untyped_storage())
    assert isinstance(storage, torch.UntypedStorage) and storage.device == x.device
    view = torch.empty(0, device="loom").set_(storage, 0, (8,), (1,))
    view.add_(100)
    assert x.cpu().tolist() == [100.0 + i for i in range(8)]  # the same memory
    part = trip(x[2:5])
    assert part.storage_offset() == 2 and part.cpu().tolist() == [102.0, 103.0, 104.0]
    empty = trip(torch.empty(0, 3, device="loom"))
    assert empty.device.type == "loom" and empty.shape == (0, 3)
    assert trip(torch.UntypedStorage(0, device="loom")).nbytes() == 0
    assert trip(torch.ones(2)).device.type == "cpu"  # PyTorch's own reducer


def test_release_leaves_a_pending_stream_error(loom):
    # Releasing a shared region waits for the device's work; an asynchronous
    # failure queued before it still surfaces at its stream's next
    # synchronization.
    import torch_loom

    x = torch.ones(8, device="loom")
    _C._distributed.share_storage(x)
    assert _C._distributed.is_shared_storage(x)
    s = loom.Stream()
    with loom.stream(s):
        torch_loom._C._enqueue_failing_kernel(torch.ones(8, device="loom"))
    del x  # the region's release waits for the device
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        s.synchronize()
    s.synchronize()


def _zero_copy_consumer(inbox, outbox):
    import torch

    y = inbox.get()
    outbox.put(("got", y.untyped_storage().nbytes(), y[:3].cpu().tolist()))
    y.mul_(2)
    torch.loom.synchronize()
    outbox.put("doubled")
    assert inbox.get() == "done"


def _zero_copy_producer():
    # Run as one of several processes of a job (LOCAL_WORLD_SIZE=2, as
    # torchrun sets it; LOOM_SHAREABLE_MEMORY unset): device memory comes
    # from memfds by default, and a 16 MiB tensor fills a segment of its
    # own, so its first send shares that memory as it lies.
    x = torch.arange(4 << 20, dtype=torch.float32, device="loom")
    torch.loom.synchronize()
    ptr, allocated = x.data_ptr(), torch.loom.memory_allocated()
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_zero_copy_consumer, args=(inbox, outbox))
    proc.start()
    try:
        inbox.put(x[1::2])  # pickled by the queue's feeder thread
        assert outbox.get(timeout=120) == ("got", 16 << 20, [1.0, 3.0, 5.0])
        # Not moved: the storage's own memory is the shared region, and the
        # allocator no longer counts it.
        assert x.data_ptr() == ptr and _C._distributed.is_shared_storage(x)
        assert torch.loom.memory_allocated() == allocated - (16 << 20)
        assert _C._distributed.sharing_counts() == (1, 0, 0)  # in place, nothing copied
        assert outbox.get(timeout=60) == "doubled"
        want = torch.arange(4 << 20, dtype=torch.float32)
        want[1::2] *= 2
        assert torch.equal(x.cpu(), want)
        inbox.put("done")
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    # A tensor that shares its segment with another one moves (one copy).
    neighbour = torch.zeros(10, device="loom")
    small = torch.ones(10, device="loom")
    small_ptr = small.data_ptr()
    _C._distributed.share_storage(small)
    assert small.data_ptr() != small_ptr and small.sum().item() == 10
    assert _C._distributed.sharing_counts() == (1, 1, 40)
    del x, small, neighbour
    import gc

    gc.collect()
    assert not _shared_fds()
    print("ZERO COPY OK")


def test_first_send_in_a_job_shares_the_segment_without_copying():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(LOCAL_WORLD_SIZE="2",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "python"), env.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "zero_copy"], env=env,
                         capture_output=True, text=True, timeout=240, cwd=root)
    assert out.returncode == 0 and "ZERO COPY OK" in out.stdout, out.stdout + out.stderr



_FD_LIMIT_CODE = """
import os, resource, torch
from torch_loom import _C
# A few descriptors to spare: each shareable segment keeps its memfd open,
# and the segments past the limit are anonymous memory instead of failing.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
ts = []
for i in range(24):
    ts.append(torch.empty(4 << 20, device="loom"))  # 16 MiB: a segment each
    ts[-1][:2].fill_(float(i))
print(sum(t[1].item() for t in ts))
first, last = ts[0].data_ptr(), ts[-1].data_ptr()
del ts[1:4]  # their segments' descriptors close: room for the region below
torch.loom.empty_cache()
_C._distributed.share_storage(ts[0])   # a memfd segment: in place
_C._distributed.share_storage(ts[-1])  # anonymous: moved once, into a fresh region
print(ts[0].data_ptr() == first, ts[-1].data_ptr() != last, _C._distributed.sharing_counts()[:2])
"""


def test_segments_past_the_descriptor_limit_are_anonymous():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(LOOM_SHAREABLE_MEMORY="1",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "python"), env.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _FD_LIMIT_CODE], env=env, capture_output=True,
                         text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == [str(float(sum(range(24)))), "True True (1, 1)"], out.stdout


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["zero_copy"]:
        _zero_copy_producer()
