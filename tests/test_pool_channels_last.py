"""Pooling over channels-last inputs on loom ("pool.forward_nhwc" and
"pool.backward_nhwc", kernels/nn/pool_nhwc.c): max_pool2d (values and
indices), avg_pool2d and adaptive_avg_pool2d (and adaptive max and 3-d
pooling through the same kernels), forward and backward, against the CPU
over odd channel counts and kernel/stride/padding/dilation/ceil_mode
variants with overlapping windows; outputs and gradients laid out as the
CPU lays them out; the bits of loom's NCHW kernels; no layout copies; the
same bits at any thread count and on the generic path."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last


def _input(shape, seed, ties=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randint(0, 4, shape, generator=g).float() if ties
         else torch.randn(shape, generator=g)).to(dtype)
    fmt = CL if len(shape) == 4 else torch.channels_last_3d
    return x.contiguous(memory_format=fmt)


def _run(fn, x, go_seed=5):
    """fn's outputs and the input gradient, on the CPU and on loom, for a
    channels-last x; the output gradient is laid out as the CPU's output."""
    res = []
    for dev in ("cpu", "loom"):
        xd = x.detach().to(dev).requires_grad_()
        out = fn(xd)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.Generator().manual_seed(go_seed)
        go = torch.randn(outs[0].shape, generator=g, dtype=x.dtype)
        go = torch.empty_like(outs[0], device="cpu").copy_(go).to(dev)
        if dev == "loom":  # the gradient's memory must be written whole: leave NaN there
            junk = [torch.full_like(xd, float("nan")) for _ in range(3)]
            assert all(j.isnan().all() for j in junk)
            del junk
        outs[0].backward(go)
        res.append(([o.detach() for o in outs], xd.grad))
    return res


def _check(fn, x, exact_forward, exact_grad):
    (oc, gc), (ol, gl) = _run(fn, x)
    for c, l in zip(oc, ol):
        assert l.device.type == "loom" and l.shape == c.shape and l.dtype == c.dtype
        assert l.stride() == c.stride(), (l.stride(), c.stride())
        if c.dtype == torch.int64 or exact_forward:
            assert torch.equal(l.cpu(), c) or (c.isnan().any() and torch.allclose(
                l.cpu(), c, equal_nan=True, rtol=0, atol=0))
        else:
            tol = 1e-6 if c.dtype != torch.bfloat16 else 1e-2
            torch.testing.assert_close(l.cpu(), c, rtol=tol, atol=tol)
    assert gl.stride() == gc.stride(), (gl.stride(), gc.stride())
    tol = 0 if exact_grad else (1e-6 if gc.dtype != torch.bfloat16 else 1e-2)
    torch.testing.assert_close(gl.cpu(), gc, rtol=tol, atol=tol, equal_nan=True)


MAX_CASES = [
    dict(kernel_size=3, stride=2, padding=1),                     # ResNet's
    dict(kernel_size=3, stride=1, padding=1),                     # heavy overlap
    dict(kernel_size=2),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=(2, 4), stride=(3, 2), padding=(1, 2), dilation=2, ceil_mode=True),
]
SHAPES = [(2, 19, 11, 13), (3, 3, 9, 8), (1, 67, 7, 10)]


@pytest.mark.parametrize("kw", MAX_CASES, ids=str)
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_max_pool2d(kw, ties):
    for i, shape in enumerate(SHAPES):
        x = _input(shape, seed=i, ties=ties)
        _check(lambda t: F.max_pool2d(t, return_indices=True, **kw), x, True, True)


def test_max_pool2d_nan_and_infinities():
    x = _input((2, 21, 8, 9), seed=3).contiguous()
    x[0, 3, 2, 2] = float("nan")
    x[1, :, 4, 4] = float("nan")
    x[0, 5] = -float("inf")
    x[1, 6, 0:3, 0:3] = float("inf")
    _check(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
           x.contiguous(memory_format=CL), True, True)


AVG_CASES = [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=(1, 2), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
]


@pytest.mark.parametrize("kw", AVG_CASES, ids=str)
def test_avg_pool2d(kw):
    for i, shape in enumerate(SHAPES):
        _check(lambda t: F.avg_pool2d(t, **kw), _input(shape, seed=10 + i), False, False)


@pytest.mark.parametrize("size", [1, (3, 5), (4, 4), (7, 2)], ids=str)
def test_adaptive_avg_pool2d(size):
    for i, shape in enumerate(SHAPES):
        _check(lambda t: F.adaptive_avg_pool2d(t, size), _input(shape, seed=20 + i), False, False)


def test_adaptive_max_pool2d_and_3d_pooling():
    x = _input((2, 19, 11, 13), seed=30, ties=True)
    _check(lambda t: F.adaptive_max_pool2d(t, (4, 5), return_indices=True), x, True, True)
    x3 = _input((2, 7, 5, 6, 7), seed=31)
    _check(lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True), x3, True, True)
    _check(lambda t: F.avg_pool3d(t, 2, 1), x3, False, False)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_other_dtypes(dtype):
    x = _input((2, 19, 9, 11), seed=40, dtype=dtype)
    _check(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x, True, dtype == torch.float64)
    _check(lambda t: F.avg_pool2d(t, 3, 2, 1), x, False, False)
    _check(lambda t: F.adaptive_avg_pool2d(t, 1), x, False, False)


# Each op with its channels-last kernels and its NCHW ones on the same
# values: they promise the same bits (forward and gradient).
_SAME_BITS = [
    lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
    lambda t: F.max_pool2d(t, 2, 1, ceil_mode=True, return_indices=True),
    lambda t: F.avg_pool2d(t, 3, 2, 1),
    lambda t: F.avg_pool2d(t, 3, 1, 1, count_include_pad=False),
    lambda t: F.adaptive_avg_pool2d(t, 1),
    lambda t: F.adaptive_avg_pool2d(t, (3, 5)),
]


@pytest.mark.parametrize("fn", _SAME_BITS)
def test_channels_last_gives_the_nchw_kernels_bits(fn):
    x = _input((3, 35, 12, 11), seed=50)
    got = []
    for fmt in (CL, torch.contiguous_format):
        xl = x.to("loom").contiguous(memory_format=fmt).requires_grad_()
        out = fn(xl)
        outs = out if isinstance(out, tuple) else (out,)
        go = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(1))
        outs[0].backward(go.to("loom").contiguous(memory_format=fmt))
        got.append([o.cpu().contiguous() for o in outs] + [xl.grad.cpu().contiguous()])
    for a, b in zip(*got):
        assert torch.equal(a, b)


def _device_kernels(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.loom.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


@pytest.mark.parametrize("op", ["max", "avg", "adaptive_avg"])
def test_channels_last_runs_natively_without_copies(op):
    fn = {"max": lambda t: F.max_pool2d(t, 3, 2, 1),
          "avg": lambda t: F.avg_pool2d(t, 3, 2, 1),
          "adaptive_avg": lambda t: F.adaptive_avg_pool2d(t, (3, 5))}[op]
    x = _input((4, 64, 28, 28), seed=60).to("loom").requires_grad_()
    go = torch.ones_like(fn(x))
    names = _device_kernels(lambda: fn(x).backward(go))
    assert "copy.strided" not in names, names
    assert "pool.forward_nhwc" in names and "pool.backward_nhwc" in names, names
    assert "pool.forward" not in names and "pool.backward" not in names, names
    # an NCHW input keeps the plane kernels
    xn = x.detach().contiguous()
    names = _device_kernels(lambda: fn(xn))
    assert "pool.forward" in names and "pool.forward_nhwc" not in names, names


_BATCH_MAX = {
    "max2d": lambda t: F.max_pool2d(t, 3, 2, 1),
    "max2d_overlap": lambda t: F.max_pool2d(t, (3, 2), 1, (1, 0), dilation=(2, 1)),
    "adaptive_max2d": lambda t: F.adaptive_max_pool2d(t, (4, 3)),
    "max3d": lambda t: F.max_pool3d(t, 2, (1, 2, 2), (1, 0, 1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", list(_BATCH_MAX))
def test_max_pool_gradient_of_a_batch_image_by_image(op, dtype):
    """A batch of 8 or more channels-last images: max pooling's gradient
    (pool.max_backward_nhwc, one image per item, each output's gradient
    added where its index points) has the CPU's values and strides, and
    the bits of one image at a time (the rows' kernel)."""
    fn = _BATCH_MAX[op]
    shape = (9, 21, 4, 9, 10) if op == "max3d" else (9, 21, 11, 10)
    x = _input(shape, seed=61, ties=True, dtype=dtype)
    (oc, gc), (ol, gl) = _run(fn, x)
    assert torch.equal(ol[0].cpu(), oc[0])
    assert gl.stride() == gc.stride(), (gl.stride(), gc.stride())
    torch.testing.assert_close(gl.cpu(), gc, rtol=0, atol=0)
    xl = x.to("loom").requires_grad_()
    go = torch.randn(oc[0].shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    go = torch.empty_like(ol[0]).copy_(go.to("loom"))
    names = _device_kernels(lambda: fn(xl).backward(go))
    assert "pool.max_backward_nhwc" in names and "pool.backward_nhwc" not in names, names
    for i in (0, 4, 8):
        xi = x[i:i + 1].to("loom").requires_grad_()
        fn(xi).backward(go[i:i + 1])
        assert torch.equal(xi.grad.cpu(), xl.grad[i:i + 1].cpu()), i


# Several items, odd channels, ties (indices), overlapping windows.
_DIGEST_CODE = """
import torch, torch.nn.functional as F
g = torch.Generator().manual_seed(7)
for shape in [(3, 69, 20, 21), (4, 3, 30, 31), (10, 5, 12, 9)]:
    x = torch.randint(0, 5, shape, generator=g).float().contiguous(memory_format=torch.channels_last)
    for fn in (lambda t: F.max_pool2d(t, 3, 1, 1, return_indices=True),
               lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
               lambda t: F.avg_pool2d(t, 3, 1, 1), lambda t: F.adaptive_avg_pool2d(t, (5, 3)),
               lambda t: F.adaptive_avg_pool2d(t, 1)):
        xl = x.to("loom").requires_grad_()
        out = fn(xl)
        outs = out if isinstance(out, tuple) else (out,)
        go = torch.randn(outs[0].shape, generator=g)
        outs[0].backward(torch.empty_like(outs[0]).copy_(go.to("loom")))
        add(*outs, xl.grad)
print("DIGEST", h.hexdigest())
"""


def test_bits_do_not_depend_on_the_thread_count():
    assert digest_with_threads(_DIGEST_CODE, 1) == digest_with_threads(_DIGEST_CODE, 3)


def test_generic_path_gives_the_same_bits():
    # Each channel's comparisons and sums are the same on every ISA path.
    def digest(env):
        proc = run_python(DIGEST_PREAMBLE + _DIGEST_CODE,
                          env=dict(env, LOOM_NUM_THREADS="2", LOOM_FALLBACK="error"))
        return [l for l in proc.stdout.splitlines() if l.startswith("DIGEST")]
    native, generic = digest({}), digest({"LOOM_CPU_FEATURES": "generic"})
    assert native and native == generic
