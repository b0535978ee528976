"""Resampling (F.interpolate) on loom against the CPU: nearest,
nearest-exact, linear and bilinear in 1-d and 2-d; sizes and scale
factors, align_corners, channels-last and 16-bit inputs; forward and
backward; out= variants; bad arguments. Index arithmetic and gradients
match the CPU bit for bit; bilinear outputs too, except that float32/64
images of at most 128 output rows + columns may differ in the last bit
(the CPU's kernel for them fuses other products)."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def run(fn, x, dtype, exact):
    g = torch.Generator().manual_seed(1)
    xc = x.detach().clone().requires_grad_()
    xl = x.detach().to("loom").requires_grad_()
    yc, yl = fn(xc), fn(xl)
    assert yl.device.type == "loom" and yl.shape == yc.shape and yl.dtype == yc.dtype
    tol = {} if not exact else dict(rtol=0, atol=0)
    if not exact:
        tol = dict(rtol=4e-7, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(yl.detach().cpu(), yc.detach(), **tol)
    go = torch.randn(yc.shape, generator=g).to(dtype)
    yc.backward(go)
    yl.backward(go.to("loom"))
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=0, atol=0)


CASES_2D = [dict(scale_factor=2), dict(size=(13, 5)), dict(scale_factor=(1.7, 0.6)),
            dict(size=(7, 9)), dict(size=(90, 60))]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear"])
@pytest.mark.parametrize("kw", CASES_2D, ids=str)
def test_2d(dtype, mode, kw):
    x = torch.randn(2, 3, 7, 9, generator=torch.Generator().manual_seed(0)).to(dtype)
    small_float = dtype in (torch.float32, torch.float64) and kw != dict(size=(90, 60))
    for align in ([None, True] if mode == "bilinear" else [None]):
        extra = {} if align is None else dict(align_corners=align)
        exact = mode != "bilinear" or not small_float or kw == dict(size=(7, 9))
        run(lambda t: F.interpolate(t, mode=mode, **kw, **extra), x, dtype, exact)
    xl = x.to(memory_format=torch.channels_last)
    run(lambda t: F.interpolate(t, mode=mode, **kw), xl, dtype, mode != "bilinear" or not small_float)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
def test_1d(dtype, mode):
    x = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)).to(dtype)
    for kw in [dict(scale_factor=2), dict(size=7), dict(scale_factor=1.3), dict(size=40)]:
        run(lambda t: F.interpolate(t, mode=mode, **kw), x, dtype, True)
    if mode == "linear":
        run(lambda t: F.interpolate(t, size=20, mode=mode, align_corners=True), x, dtype, True)


def test_uint8_out_variants_and_errors():
    img = torch.randint(0, 255, (1, 3, 5, 6), dtype=torch.uint8)
    out = F.interpolate(img.to("loom"), scale_factor=2, mode="nearest")
    assert torch.equal(out.cpu(), F.interpolate(img, scale_factor=2, mode="nearest"))
    x = torch.randn(1, 2, 4, 4)
    o = torch.empty(0, device="loom")
    torch._C._nn.upsample_bilinear2d(x.to("loom"), [8, 6], False, None, None, out=o)
    torch.testing.assert_close(o.cpu(), torch._C._nn.upsample_bilinear2d(x, [8, 6], False, None, None))
    for bad in [lambda d: F.interpolate(torch.ones(1, 1, 4, device=d), size=0),
                lambda d: F.interpolate(torch.ones(1, 1, 4, 4, device=d), size=(2, 0), mode="bilinear"),
                lambda d: torch._C._nn.upsample_nearest2d(torch.ones(1, 1, 4, device=d), [2, 2])]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample(dtype, mode, padding):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 7, generator=g).to(dtype)
    grid = (torch.rand(2, 4, 6, 2, generator=g) * 2.6 - 1.3).to(dtype)  # some points outside
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
           torch.bfloat16: dict(rtol=2e-2, atol=3e-2)}[dtype]
    # bfloat16 coordinates are computed in float, not rounded to bfloat16 at
    # every step as the CPU does: compare with the float64 result there
    # (bicubic sampling runs on the CPU).
    ref = torch.float64 if dtype == torch.bfloat16 and mode != "bicubic" else dtype
    for align in [False, True]:
        xc, gc = x.to(ref).clone().requires_grad_(), grid.to(ref).clone().requires_grad_()
        xl, gl = x.to("loom").requires_grad_(), grid.to("loom").requires_grad_()
        yc = F.grid_sample(xc, gc, mode=mode, padding_mode=padding, align_corners=align)
        yl = F.grid_sample(xl, gl, mode=mode, padding_mode=padding, align_corners=align)
        torch.testing.assert_close(yl.detach().cpu(), yc.detach().to(dtype), **tol)
        go = torch.randn(yc.shape, generator=g).to(dtype)
        yc.backward(go.to(ref))
        yl.backward(go.to("loom"))
        torch.testing.assert_close(xl.grad.cpu(), xc.grad.to(dtype), **tol)
        torch.testing.assert_close(gl.grad.cpu(), gc.grad.to(dtype), **tol)
    for bad in [lambda d: F.grid_sample(x.to(d), grid[..., :1].to(d), align_corners=False),
                lambda d: F.grid_sample(x[0].to(d), grid.to(d), align_corners=False)]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")
