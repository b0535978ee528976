"""The per-call host path of graphs Inductor compiles for loom: what the
generated wrapper calls on every run instead of Python's general entry
points, and that it behaves as those do (values, devices, ordering)."""

import pytest
import torch

from torch_loom._inductor.runtime import empty_strided_loom


@pytest.fixture(autouse=True)
def _no_cpu_fallback(no_fallback):
    yield


def _buffers(x, w):
    # Several intermediate buffers of different dtypes and layouts, between
    # extern (matmul) and generated kernels.
    h = torch.relu(x @ w)
    t = (h.t() * 2).contiguous()
    half = (h + 1).to(torch.bfloat16)
    return t.sum(0), half, (h @ w).sum(1), h.amax(1)


def test_empty_strided_loom_allocates_as_empty_strided_does():
    for size, stride, dtype in [((4, 6), (6, 1), torch.float32), ((4, 6), (1, 4), torch.bfloat16),
                                ((3, 1, 5), (5, 5, 1), torch.int64), ((), (), torch.float64),
                                ((0, 7), (7, 1), torch.float32), ([2, 3], [1, 2], torch.bool)]:
        got = empty_strided_loom(size, stride, dtype)
        ref = torch.empty_strided(size, stride, device="loom", dtype=dtype)
        assert (got.device, got.dtype, got.shape, got.stride()) == \
            (ref.device, ref.dtype, ref.shape, ref.stride())
        got.copy_(torch.arange(got.numel()).reshape(got.shape).to(dtype))
        torch.testing.assert_close(got.cpu(), torch.arange(got.numel()).reshape(got.shape).to(dtype))


def test_empty_strided_loom_uses_the_current_device():
    if torch.loom.device_count() < 2:
        assert empty_strided_loom((2,), (1,), torch.float32).device == torch.device("loom", 0)
        return
    with torch.loom.device(1):
        assert empty_strided_loom((2,), (1,), torch.float32).device == \
            torch.empty_strided((2,), (1,), device="loom").device == torch.device("loom", 1)


@pytest.mark.parametrize("args, message", [
    (((2,), (1, 1), torch.float32), "1 sizes but 2 strides"),
    (((2.0,), (1,), torch.float32), "size must be a tuple of ints"),
    ((2, (1,), torch.float32), "size must be a tuple of ints"),
    (((2,), "1", torch.float32), "stride must be a tuple of ints"),
    (((2,), (1,), "float32"), "dtype must be a torch.dtype"),
])
def test_empty_strided_loom_refuses_bad_arguments(args, message):
    with pytest.raises((TypeError, RuntimeError), match=f"empty_strided_loom: {message}"):
        empty_strided_loom(*args)


def test_generated_wrappers_allocate_loom_buffers_with_the_fast_path():
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    x, w = torch.randn(32, 24), torch.randn(24, 24) / 4
    compiled = torch.compile(_buffers)
    got, codes = run_and_get_code(compiled, x.to("loom"), w.to("loom"))
    code = "\n".join(codes)
    assert "empty_strided_loom(" in code
    assert "empty_strided((" not in code  # no general empty_strided left for loom buffers
    want = _buffers(x.to("loom"), w.to("loom"))
    for g, e in zip(got, want):
        assert g.device.type == "loom"
        torch.testing.assert_close(g.cpu(), e.cpu(), rtol=1e-2 if g.dtype == torch.bfloat16 else 1e-5,
                                   atol=1e-4)
    # CPU graphs keep Inductor's own allocator.
    _, cpu_codes = run_and_get_code(torch.compile(_buffers), x, w)
    assert "empty_strided_loom" not in "\n".join(cpu_codes)


def test_buffers_reused_across_calls_stay_ordered_with_pending_work():
    """Calls queued back to back without a sync: each call's buffers come
    from memory the previous call freed while its kernels may still be
    pending; every result must equal eager's."""
    compiled = torch.compile(_buffers)
    w = torch.randn(24, 24, device="loom") / 4
    big = torch.randn(768, 768, device="loom")
    compiled(torch.randn(32, 24, device="loom"), w)  # compile first
    torch.loom.synchronize()
    results, inputs = [], []
    for trial in range(4):
        x = (big @ big)[:32, :24] * 1e-3 + trial  # ready only after the matmul
        inputs.append(x)
        results.append(compiled(x, w))
    for x, got in zip(inputs, results):
        for g, e in zip(got, _buffers(x, w)):
            torch.testing.assert_close(g.cpu(), e.cpu(), rtol=1e-2 if g.dtype == torch.bfloat16 else 1e-5,
                                       atol=1e-4)
