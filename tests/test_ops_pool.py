"""2-d and 3-d pooling on loom against the CPU: max_pool (indices,
dilation, ceil_mode, padding), avg_pool (count_include_pad,
divisor_override), adaptive average and max pooling; forward and
backward; batched and unbatched inputs, non-contiguous inputs, float
dtypes; bad parameters."""


import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.float64, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def compare(fn, x, dtype, noncontig=False):
    c = x.detach().clone().requires_grad_()
    d = x.detach().to("loom")
    if noncontig:
        d = d.transpose(-1, -2).contiguous().transpose(-1, -2)
    d.requires_grad_()
    y, ly = fn(c), fn(d)
    ys = y if isinstance(y, tuple) else (y,)
    lys = ly if isinstance(ly, tuple) else (ly,)
    for a, b in zip(lys, ys):
        assert a.device.type == "loom" and a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a.detach().cpu(), b.detach(), **TOL[dtype])
    g = rand(*ys[0].shape, dtype=dtype, seed=7)
    ys[0].backward(g)
    lys[0].backward(g.to("loom"))
    torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL[dtype])


MAX_POOL2D_WINDOWS = [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=1),
]
MAX_POOL2D_SHAPES = [(2, 3, 7, 9), (3, 13, 8), (1, 1, 1, 1), (2, 2, 5, 41)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw,shape", [
    (kw, shape) for kw in MAX_POOL2D_WINDOWS for shape in MAX_POOL2D_SHAPES
    # larger windows on a 1x1 plane: test_max_pool2d_window_larger_than_input
    if shape[-1] >= 3 or kw["kernel_size"] == 1])
def test_max_pool2d(dtype, kw, shape):
    compare(lambda x: F.max_pool2d(x, return_indices=True, **kw), rand(*shape, dtype=dtype), dtype)
    compare(lambda x: F.max_pool2d(x, **kw), rand(*shape, dtype=dtype, seed=1), dtype, noncontig=True)


@pytest.mark.parametrize("kw", [w for w in MAX_POOL2D_WINDOWS if w["kernel_size"] != 1])
def test_max_pool2d_window_larger_than_input(kw):
    """On a 1x1 plane a larger window is the CPU's error, or (padded) the
    CPU's result."""
    x = torch.ones(1, 1, 1, 1)
    try:
        want = F.max_pool2d(x, **kw)
    except RuntimeError as cpu:
        with pytest.raises(RuntimeError) as loom:
            F.max_pool2d(x.to("loom"), **kw)
        assert str(loom.value) == str(cpu)
    else:
        torch.testing.assert_close(F.max_pool2d(x.to("loom"), **kw).cpu(), want)


def test_max_pool2d_nan_and_ties():
    x = torch.tensor([[[[1.0, 1.0, float("nan"), 0.0], [1.0, 1.0, 2.0, float("nan")]]]])
    o, i = F.max_pool2d(x, 2, return_indices=True)
    lo, li = F.max_pool2d(x.to("loom"), 2, return_indices=True)
    torch.testing.assert_close(lo.cpu(), o, equal_nan=True)
    assert torch.equal(li.cpu(), i)
    # Rows of 16 output columns at a time and more: ties keep the first
    # tap, a NaN wins, an all-padding window gives index 0, as on the CPU.
    x = torch.randint(0, 3, (2, 3, 6, 40)).float()
    x[0, 0, 2, 5] = x[1, 2, 3, 33] = float("nan")
    for kw in (dict(kernel_size=3, stride=1, padding=1), dict(kernel_size=(2, 3), stride=2),
               dict(kernel_size=3, stride=1, padding=1, dilation=2)):
        o, i = F.max_pool2d(x, return_indices=True, **kw)
        lo, li = F.max_pool2d(x.to("loom"), return_indices=True, **kw)
        torch.testing.assert_close(lo.cpu(), o, equal_nan=True)
        assert torch.equal(li.cpu(), i)


def _pool_args(kw, stride):
    """max_pool2d_with_indices_backward's window arguments for F.max_pool2d's kw."""
    pair = lambda v: list(v) if isinstance(v, tuple) else [v, v]
    return (pair(kw["kernel_size"]), pair(stride), pair(kw.get("padding", 0)),
            pair(kw.get("dilation", 1)), False)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_pool2d_rows_of_every_width(stride):
    """Rows of 1 to 70 columns (the vector loops take 16 output columns at a
    time, reading up to 32 input columns per tap), windows over both edges:
    max values, indices and gradients equal the CPU's bit for bit (ties keep
    the first tap, a NaN wins), averages equal its sums."""
    g = torch.Generator().manual_seed(stride)
    windows = (dict(kernel_size=3, padding=1), dict(kernel_size=2),
               dict(kernel_size=3, padding=1, dilation=2), dict(kernel_size=(1, 5), padding=(0, 2)))
    for w in range(1, 71):
        x = torch.randint(0, 4, (2, 3, 5, w), generator=g).float()
        x[0, 1, 2, w // 2] = x[1, 2, 4, w - 1] = float("nan")
        r = torch.randn(2, 3, 5, w, generator=g)
        for kw in windows:
            k = kw["kernel_size"] if isinstance(kw["kernel_size"], int) else kw["kernel_size"][1]
            pad = kw.get("padding", 0)
            pad = pad if isinstance(pad, int) else pad[1]
            if w + 2 * pad < kw.get("dilation", 1) * (k - 1) + 1:
                continue
            o, i = F.max_pool2d(x, stride=stride, return_indices=True, **kw)
            lo, li = F.max_pool2d(x.to("loom"), stride=stride, return_indices=True, **kw)
            torch.testing.assert_close(lo.cpu(), o, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(li.cpu(), i), (w, kw)
            # the gradient: each output's share added where its index
            # points, in the outputs' order, as the CPU adds them
            go = torch.randn(o.shape, generator=g)
            gc = torch.ops.aten.max_pool2d_with_indices_backward(
                go, x, *_pool_args(kw, stride), i)
            gl = torch.ops.aten.max_pool2d_with_indices_backward(
                go.to("loom"), x.to("loom"), *_pool_args(kw, stride), li)
            assert torch.equal(gl.cpu(), gc), (w, kw)
            if "dilation" not in kw:
                a = F.avg_pool2d(r, stride=stride, **kw)
                torch.testing.assert_close(F.avg_pool2d(r.to("loom"), stride=stride, **kw).cpu(), a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True, padding=1),
    dict(kernel_size=(3, 2), divisor_override=5),
])
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (3, 13, 8), (2, 2, 5, 41)])
def test_avg_pool2d(dtype, kw, shape):
    compare(lambda x: F.avg_pool2d(x, **kw), rand(*shape, dtype=dtype), dtype)
    compare(lambda x: F.avg_pool2d(x, **kw), rand(*shape, dtype=dtype, seed=2), dtype, noncontig=True)


def test_avg_pool2d_zeros_and_nan():
    # Sums start at +0, as the CPU's: windows of -0 give +0; a NaN spreads
    # to its windows; rows wider than 16 columns.
    x = torch.randn(2, 3, 6, 40)
    x[0, 0] = -0.0
    x[1, 2, 3, 33] = float("nan")
    for kw in (dict(kernel_size=3, stride=1, padding=1),
               dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)):
        y, ly = F.avg_pool2d(x, **kw), F.avg_pool2d(x.to("loom"), **kw).cpu()
        torch.testing.assert_close(ly, y, equal_nan=True)
        assert torch.equal(torch.signbit(ly), torch.signbit(y))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out", [(1, 1), (3, 4), (7, 9), (5, 2), (10, 13)])
def test_adaptive_pools(dtype, out):
    x = rand(2, 3, 7, 9, dtype=dtype)
    compare(lambda x: F.adaptive_avg_pool2d(x, out), x, dtype)
    compare(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), x, dtype)
    compare(lambda x: F.adaptive_avg_pool2d(x, out), rand(3, 7, 9, dtype=dtype), dtype, noncontig=True)


# One output per plane (a global average), the planes summed several at a
# time: counts around the groups and a launch's items (505 planes of 35
# values split at 468), strided planes, windows short of the plane.
ONE_OUTPUT_POOLS = [
    lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [1, 1]),
    lambda x: F.avg_pool2d(x, (5, 7)),
    lambda x: F.avg_pool2d(x, (4, 6), padding=(1, 2), count_include_pad=False),
    lambda x: F.avg_pool2d(x, (4, 6), padding=(1, 2), divisor_override=5),
    lambda x: F.avg_pool3d(x.unsqueeze(2), (1, 5, 7)),
]


@pytest.mark.parametrize("pool", ONE_OUTPUT_POOLS)
@pytest.mark.parametrize("shape", [(1, 1, 5, 7), (1, 9, 5, 7), (3, 13, 5, 7), (5, 101, 5, 7)])
@pytest.mark.parametrize("noncontig", [False, True])
def test_avg_pool_one_output_per_plane(pool, shape, noncontig):
    x = rand(*shape)
    x[0, -1, 2, 3] = float("nan")
    c = x.double().requires_grad_()
    d = x.to("loom")
    if noncontig:
        d = d.transpose(-1, -2).contiguous().transpose(-1, -2)
    d.requires_grad_()
    y, ly = pool(c), pool(d)
    assert ly.shape == y.shape and ly.dtype == torch.float32
    torch.testing.assert_close(ly.detach().cpu(), y.detach().float(), rtol=1e-6, atol=1e-6,
                               equal_nan=True)
    g = rand(*y.shape, seed=3)
    g.view(-1)[-1] = -0.0
    (gc,) = torch.autograd.grad(y, c, g.double())
    (gd,) = torch.autograd.grad(ly, d, g.to("loom"))
    torch.testing.assert_close(gd.cpu(), gc.float(), rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.signbit(gd.cpu()), torch.signbit(gc.float()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2, 1), stride=(1, 2, 1), padding=(1, 0, 0), dilation=(1, 2, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 6), (3, 6, 5, 8)])
def test_max_pool3d(dtype, kw, shape):
    compare(lambda x: F.max_pool3d(x, return_indices=True, **kw), rand(*shape, dtype=dtype), dtype)
    compare(lambda x: F.max_pool3d(x, **kw), rand(*shape, dtype=dtype, seed=1), dtype,
            noncontig=True)


def test_max_pool3d_nan_and_ties():
    # Indices count (d * H + h) * W + w through the volume: a tie keeps the
    # first tap, a NaN wins.
    x = torch.zeros(1, 1, 2, 2, 2)
    x[0, 0, 1, 0, 1] = float("nan")
    y = torch.ones(1, 1, 2, 2, 2)
    for t in (x, y):
        o, i = F.max_pool3d(t, 2, return_indices=True)
        lo, li = F.max_pool3d(t.to("loom"), 2, return_indices=True)
        torch.testing.assert_close(lo.cpu(), o, equal_nan=True)
        assert torch.equal(li.cpu(), i)
    assert F.max_pool3d(x.to("loom"), 2, return_indices=True)[1].item() == 5


AVG3D = [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 1, 2), stride=(2, 1, 1), ceil_mode=True, padding=(1, 0, 1)),
    dict(kernel_size=(2, 3, 2), divisor_override=5),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", AVG3D)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 6), (3, 6, 5, 8)])
def test_avg_pool3d(dtype, kw, shape):
    compare(lambda x: F.avg_pool3d(x, **kw), rand(*shape, dtype=dtype), dtype)
    compare(lambda x: F.avg_pool3d(x, **kw), rand(*shape, dtype=dtype, seed=2), dtype,
            noncontig=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kw", AVG3D)
def test_avg_pool3d_16_bit(dtype, kw):
    # The CPU has no 16-bit avg_pool3d; loom's sums run in higher precision
    # and round once: the float32 result and gradient, rounded.
    x = rand(2, 3, 5, 7, 6, dtype=dtype)
    x32 = x.float().requires_grad_()
    y32 = F.avg_pool3d(x32, **kw)
    g = rand(*y32.shape, dtype=dtype, seed=5)
    y32.backward(g.float())
    d = x.to("loom").requires_grad_()
    y = F.avg_pool3d(d, **kw)
    y.backward(g.to("loom"))
    ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
    assert y.dtype == dtype and d.grad.dtype == dtype
    torch.testing.assert_close(y.detach().cpu(), y32.detach().to(dtype), rtol=ulp, atol=1e-6)
    torch.testing.assert_close(d.grad.cpu(), x32.grad.to(dtype), rtol=ulp, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out", [(1, 1, 1), (2, 3, 4), (5, 7, 6), (3, 1, 9)])
def test_adaptive_pools_3d(dtype, out):
    x = rand(2, 3, 5, 7, 6, dtype=dtype)
    compare(lambda x: F.adaptive_avg_pool3d(x, out), x, dtype)
    compare(lambda x: F.adaptive_max_pool3d(x, out, return_indices=True), x, dtype)
    compare(lambda x: F.adaptive_avg_pool3d(x, out), rand(3, 5, 7, 6, dtype=dtype), dtype,
            noncontig=True)


def test_avg_pool3d_out():
    x = rand(2, 3, 5, 7, 6)
    out = torch.empty(0, device="loom")
    torch._C._nn.avg_pool3d(x.to("loom"), 2, out=out)
    torch.testing.assert_close(out.cpu(), F.avg_pool3d(x, 2), **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("pool", [
    lambda x: F.avg_pool2d(x, 5, stride=1, padding=2),
    lambda x: F.adaptive_avg_pool2d(x, (12, 12)),
    lambda x: F.max_pool2d(x, 3, stride=1),
    lambda x: F.avg_pool3d(x.unsqueeze(-1), (5, 5, 1), stride=1, padding=(2, 2, 0)),
])
def test_16_bit_pool_gradients_round_once(dtype, pool):
    # Up to 25 windows add into one input gradient: they accumulate in
    # float32, so the result is the float32 gradient rounded once (within
    # one unit in the last place), not a sum rounded after every addition.
    x = rand(2, 3, 13, 13, dtype=dtype)
    g = rand(*pool(x.float()).shape, dtype=dtype, seed=5)
    x32 = x.float().requires_grad_()
    pool(x32).backward(g.float())
    d = x.to("loom").requires_grad_()
    pool(d).backward(g.to("loom"))
    ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
    torch.testing.assert_close(d.grad.cpu(), x32.grad.to(dtype), rtol=ulp, atol=1e-6)


@pytest.mark.parametrize("pool", [
    lambda t: F.max_pool2d(t.expand(2, 3, 7, 9), 3, stride=1, padding=1),
    lambda t: F.avg_pool2d(t.expand(2, 3, 7, 9), 3, stride=1, padding=1),
    lambda t: F.max_pool3d(t.unsqueeze(2).expand(2, 3, 4, 7, 9), 3, stride=1, padding=1),
])
def test_pool_gradient_of_expanded_input(pool):
    # The expanded rows alias one another: each still gets its own gradient
    # before the expand's backward adds them up.
    x = rand(2, 3, 1, 9)
    compare(pool, x, torch.float32)


def test_avg_pool2d_out():
    x = rand(2, 3, 7, 9)
    out = torch.empty(0, device="loom")
    torch._C._nn.avg_pool2d(x.to("loom"), 2, out=out)
    torch.testing.assert_close(out.cpu(), F.avg_pool2d(x, 2), **TOL[torch.float32])


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_unpool2d(dtype):
    x = rand(2, 3, 8, 8, dtype=dtype)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    for size in [None, (8, 8), (9, 9)]:
        kw = {} if size is None else dict(output_size=size)
        compare(lambda t: F.max_unpool2d(t, idx.to(t.device), 2, **kw), y, dtype)
    compare(lambda t: F.max_unpool2d(t, idx[0].to(t.device), 2), y[0], dtype)   # 3-d
    for bad in [lambda d: F.max_unpool2d(y.to(d), idx.to(d).int(), 2),
                lambda d: F.max_unpool2d(y.to(d), idx[:, :2].to(d), 2),
                lambda d: F.max_unpool2d(y[0, 0].to(d), idx[0, 0].to(d), 2)]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_unpool3d(dtype):
    x = rand(2, 3, 4, 6, 6, dtype=dtype)
    y, idx = F.max_pool3d(x, 2, return_indices=True)
    for size in [None, (4, 6, 6), (5, 7, 7)]:
        kw = {} if size is None else dict(output_size=size)
        compare(lambda t: F.max_unpool3d(t, idx.to(t.device), 2, **kw), y, dtype)
    compare(lambda t: F.max_unpool3d(t, idx[0].to(t.device), 2), y[0], dtype)   # 4-d
    for bad in [lambda d: F.max_unpool3d(y.to(d), idx.to(d).int(), 2),
                lambda d: F.max_unpool3d(y.to(d), idx[:, :2].to(d), 2),
                lambda d: F.max_unpool3d(y[0, 0].to(d), idx[0, 0].to(d), 2),
                lambda d: F.max_unpool3d(y.to(d), idx.to(d), 2, output_size=(4, 6)),
                lambda d: torch.ops.aten.max_unpool3d(y.to(d), idx.to(d), [4, 6, 6], [0, 2, 2],
                                                      [0, 0, 0])]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


@pytest.mark.parametrize("fn", [
    lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, device=d), 5),
    lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, device=d), 2, padding=2),
    lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, device=d), 2, stride=0),
    lambda d: F.max_pool2d(torch.ones(4, 4, device=d), 2),
    lambda d: F.avg_pool2d(torch.ones(1, 1, 4, 4, device=d), 2, padding=3),
    lambda d: F.adaptive_avg_pool2d(torch.ones(1, 1, 4, 4, device=d), (-1, 2)),
    lambda d: F.adaptive_max_pool2d(torch.ones(4, device=d), 2),
    lambda d: F.max_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), (2, 5, 2)),
    lambda d: F.max_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2, padding=(0, 2, 0)),
    lambda d: F.max_pool3d(torch.ones(4, 4, 4, device=d), 2),
    lambda d: F.avg_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2, stride=(1, 0, 1)),
    lambda d: F.avg_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2, divisor_override=0),
    lambda d: F.adaptive_avg_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), (2, -1, 2)),
    lambda d: F.adaptive_max_pool3d(torch.ones(4, 4, device=d), 2),
])
def test_bad_pool_params_match_cpu(fn):
    with pytest.raises(Exception) as cpu_err:
        fn("cpu")
    with pytest.raises(type(cpu_err.value)):
        fn("loom")
