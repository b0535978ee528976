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


def _epilogue_words():
    from torch_loom._inductor.epilogue import _words

    w = _words()
    return w["relu"], w["threshold_backward"] | 1 << w["shift"]


def _tensor_ops(fn):
    """The aten ops `fn` runs (the profiler's CPU events), in order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, [e.name for e in prof.events() if e.name.startswith("aten::")]


def test_mm_epilogue_takes_bias_and_operands_without_tensor_ops():
    """The compiled graphs' fused linear layers call loom::mm_epilogue on
    every run: a bias that broadcasts to the product and operands of the
    result's shape are described to the kernel as they are (no expand,
    reshape or view per call, only the result's and the GEMM workspace's
    allocations); values are those of the unfused ops."""
    relu, relu_bwd = _epilogue_words()
    op = torch.ops.loom.mm_epilogue.default
    torch.manual_seed(0)
    m, k, n = 24, 16, 20
    x, w = torch.randn(m, k, device="loom"), torch.randn(k, n, device="loom")
    for bias in (torch.randn(n), torch.randn(1, n), torch.randn(m, 1), torch.randn(m, n)):
        bias = bias.to("loom")
        (got,), ops = _tensor_ops(lambda: op(x, w, bias, [relu], [], torch.float32, False, [m, n]))
        assert ops == ["aten::empty", "aten::empty"], (bias.shape, ops)
        torch.testing.assert_close(got.cpu(), torch.relu(torch.addmm(bias, x, w)).cpu())
    saved = torch.relu(torch.randn(m, n, device="loom"))
    (got,), ops = _tensor_ops(lambda: op(x, w, None, [relu_bwd], [saved], torch.float32, False,
                                         [m, n]))
    assert ops == ["aten::empty", "aten::empty"], ops
    torch.testing.assert_close(got.cpu(), torch.ops.aten.threshold_backward(x @ w, saved, 0).cpu())
    # Rows split into leading dims: the operand as it is, the result a view.
    (got,), ops = _tensor_ops(lambda: op(x, w, None, [relu_bwd], [saved.view(4, 6, n)],
                                         torch.float32, False, [4, 6, n]))
    assert "aten::expand" not in ops and "aten::reshape" not in ops, ops
    torch.testing.assert_close(got.cpu(),
                               torch.ops.aten.threshold_backward(x @ w, saved, 0).view(4, 6, n).cpu())


def test_mm_epilogue_copies_operands_it_cannot_describe():
    """Operands that are not the result's shape in row-major order (a
    transposed one, one broadcast along the rows) and a bias that does not
    broadcast still behave as their expand/reshape does."""
    relu, relu_bwd = _epilogue_words()
    op = torch.ops.loom.mm_epilogue.default
    torch.manual_seed(1)
    m, k, n = 16, 8, 16
    x, w = torch.randn(m, k, device="loom"), torch.randn(k, n, device="loom")
    prod = (x @ w).cpu()
    saved_t = torch.relu(torch.randn(n, m, device="loom")).t()  # not contiguous
    (got,) = op(x, w, None, [relu_bwd], [saved_t], torch.float32, False, [m, n])
    torch.testing.assert_close(got.cpu(), torch.ops.aten.threshold_backward(prod, saved_t.cpu(), 0))
    row = torch.relu(torch.randn(n, device="loom"))  # broadcast over the rows
    (got,) = op(x, w, None, [relu_bwd], [row], torch.float32, False, [m, n])
    torch.testing.assert_close(got.cpu(), torch.ops.aten.threshold_backward(
        prod, row.cpu().expand(m, n), 0))
    with pytest.raises(RuntimeError, match="expand"):
        op(x, w, torch.randn(3, device="loom"), [relu], [], torch.float32, False, [m, n])
