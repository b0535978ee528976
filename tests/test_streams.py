"""Streams and events: real asynchrony, cross-stream ordering, timing and
record_stream semantics."""

import torch

BIG = 32 * 1024 * 1024  # elements: 128 MiB of float32


def _enqueue_until_busy(stream, tensor, attempts=20):
    """Enqueues fills on `stream` until a query right after enqueueing
    reports pending work. Returns True once seen (it must be: one fill of
    128 MiB takes milliseconds while an enqueue returns at once)."""
    with torch.loom.stream(stream):
        for _ in range(attempts):
            for _ in range(4):
                tensor.fill_(1.5)
            if not stream.query():
                return True
            stream.synchronize()
    return False


def test_work_is_asynchronous(loom):
    s = loom.Stream()
    x = torch.empty(BIG, device="loom")
    assert _enqueue_until_busy(s, x), "stream.query() never saw pending work"
    s.synchronize()
    assert s.query()
    assert x[:4].cpu().tolist() == [1.5] * 4


def test_current_stream_and_context(loom):
    default = loom.current_stream()
    assert default == loom.default_stream() and default.stream_id == 0
    s = loom.Stream()
    assert isinstance(s, torch.Stream) and s != default
    with loom.stream(s):
        assert loom.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert loom.current_stream() == default
    hi = loom.Stream(priority=-1)
    assert hi.device_index == 0


def test_wait_stream_orders_work(loom):
    producer, consumer = loom.Stream(), loom.Stream()
    x = torch.empty(BIG, device="loom")
    with loom.stream(producer):
        for _ in range(3):
            x.fill_(2.0)
    consumer.wait_stream(producer)
    with loom.stream(consumer):
        y = x[-8:] * 1  # must see the producer's last fill
        x.record_stream(consumer)
    consumer.synchronize()
    assert y.cpu().tolist() == [2.0] * 8


def test_wait_event_and_elapsed_time(loom):
    s1, s2 = loom.Stream(), loom.Stream()
    start = loom.Event(enable_timing=True)
    end = loom.Event(enable_timing=True)
    x = torch.empty(BIG, device="loom")
    with loom.stream(s1):
        start.record()
        for _ in range(2):
            x.fill_(3.0)
        end.record()
    end.wait(s2)
    with loom.stream(s2):
        y = x[:4] + 0
    end.synchronize()
    assert end.query()
    s2.synchronize()
    assert y.cpu().tolist() == [3.0] * 4
    ms = start.elapsed_time(end)
    assert ms > 0.0
    ev = s1.record_event()
    assert isinstance(ev, loom.Event)
    ev.synchronize()


def test_event_from_torch_event(loom):
    e = torch.Event(device="loom", enable_timing=True)
    f = torch.Event(device="loom", enable_timing=True)
    e.record()
    torch.ones(1000, device="loom").fill_(2)
    f.record()
    f.synchronize()
    assert e.elapsed_time(f) >= 0.0
    assert torch.Event(device="loom").query()  # never recorded: done


def test_record_stream_defers_reuse(loom):
    """A block freed while another stream still uses it is not handed out
    again on the allocating stream until that stream's work is done."""
    side = loom.Stream()
    a = torch.empty(BIG, device="loom")
    ptr = a.data_ptr()
    side.wait_stream(loom.current_stream())
    with loom.stream(side):
        for _ in range(3):
            a.fill_(4.0)  # long work on `side` using a's block
    a.record_stream(side)
    del a
    b = torch.empty(BIG, device="loom")
    if not side.query():
        assert b.data_ptr() != ptr, "block reused while its stream still used it"
    side.synchronize()
    del b
    c = torch.empty(BIG, device="loom")
    torch.loom.synchronize()
    del c


def test_without_record_stream_same_stream_reuses(loom):
    x = torch.empty(1 << 20, device="loom")
    ptr = x.data_ptr()
    del x
    y = torch.empty(1 << 20, device="loom")
    assert y.data_ptr() == ptr
