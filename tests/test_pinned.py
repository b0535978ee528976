"""Pinned host memory and non_blocking copies."""

import torch

N = 16 * 1024 * 1024


def test_pin_memory_and_is_pinned(loom):
    x = torch.arange(1000, dtype=torch.float32)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert torch.equal(p, x)
    e = torch.empty(10, pin_memory=True)
    assert e.is_pinned()


def test_non_blocking_from_pinned_is_async(loom):
    src = torch.full((N,), 2.0).pin_memory()
    dst = torch.empty(N, device="loom")
    s = loom.current_stream()
    seen_pending = False
    for _ in range(20):
        dst.copy_(src, non_blocking=True)
        if not s.query():
            seen_pending = True
            break
        s.synchronize()
    s.synchronize()
    assert seen_pending, "copy from pinned memory never ran asynchronously"
    assert dst[-3:].cpu().tolist() == [2.0] * 3


def test_non_blocking_to_pinned(loom):
    src = torch.arange(N, dtype=torch.float32, device="loom")
    dst = torch.empty(N).pin_memory()
    dst.copy_(src, non_blocking=True)
    loom.current_stream().synchronize()
    assert dst[:3].tolist() == [0.0, 1.0, 2.0]
    assert dst[-1].item() == float(N - 1)


def test_pageable_source_is_reusable_at_return(loom):
    src = torch.full((N,), 5.0)
    dst = torch.empty(N, device="loom")
    dst.copy_(src, non_blocking=True)
    src.fill_(-1.0)  # the copy must already have taken its bytes
    loom.synchronize()
    assert dst[:2].cpu().tolist() == [5.0, 5.0]
    assert dst[-2:].cpu().tolist() == [5.0, 5.0]


def test_freed_pinned_block_not_reused_while_copy_pending(loom):
    for _ in range(3):
        src = torch.full((N,), 7.0).pin_memory()
        dst = torch.empty(N, device="loom")
        dst.copy_(src, non_blocking=True)
        del src
        junk = torch.zeros(N).pin_memory()  # would overwrite a reused block
        loom.synchronize()
        assert dst[-2:].cpu().tolist() == [7.0, 7.0]
        del junk


def test_to_with_pin_and_non_blocking(loom):
    x = torch.randn(1000).pin_memory()
    y = x.to("loom", non_blocking=True)
    loom.synchronize()
    torch.testing.assert_close(y.cpu(), x)


def test_reused_pinned_staging_buffer(loom):
    """One pinned buffer serving many asynchronous uploads stays correct."""
    staging = torch.empty(4096).pin_memory()
    outs = []
    for i in range(200):
        staging.fill_(float(i))
        out = torch.empty(4096, device="loom")
        out.copy_(staging, non_blocking=True)
        loom.current_stream().synchronize()  # before the next refill
        outs.append(out)
    assert [o[0].item() for o in outs[::50]] == [0.0, 50.0, 100.0, 150.0]
