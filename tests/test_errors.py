"""Errors: an asynchronous kernel failure surfaces at the next
synchronization naming the op, and the device stays usable."""

import pytest
import torch
import torch_loom


def test_async_error_raised_at_sync(loom):
    x = torch.ones(8, device="loom")
    torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        loom.synchronize()
    # the error was reported once and cleared; the device works
    loom.synchronize()
    assert (x * 2).sum().item() == 16.0


def test_async_error_raised_at_stream_sync(loom):
    s = loom.Stream()
    x = torch.ones(8, device="loom")
    with loom.stream(s):
        torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        s.synchronize()
    s.synchronize()
    assert x.sum().item() == 8.0


def test_async_error_raised_at_item(loom):
    x = torch.ones(8, device="loom")
    torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        x.sum().item()
        loom.synchronize()
    loom.synchronize()
    assert x.sum().item() == 8.0


def test_bad_dtype_is_a_type_error(loom):
    with pytest.raises((TypeError, RuntimeError)):
        torch.ones(2, dtype=torch.float8_e4m3fn).to("loom").fill_(1)


def test_random_bad_arguments(loom):
    x = torch.empty(4, device="loom")
    with pytest.raises(RuntimeError, match="from"):
        x.uniform_(2.0, 1.0)
    with pytest.raises(RuntimeError, match="std"):
        x.normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="p"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="from"):
        x.random_(5, 3)
