"""Bicubic, trilinear and anti-aliased resampling (F.interpolate's
bicubic/trilinear modes and antialias=True) on loom against the CPU:
sizes and scale factors, align_corners both ways, channels-last inputs
(results laid out as the CPU lays them out), float32 and float64, forward
and backward, out= variants, bad arguments, and bitwise thread-count
independence. Gradients and trilinear outputs are the CPU's bits;
bicubic and anti-aliased outputs may differ from the CPU's in the last
bits (the CPU's compiled forward fuses other products into its sums)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.float64]


def check(fn, x, exact_forward):
    g = torch.Generator().manual_seed(1)
    xc = x.detach().clone().requires_grad_()
    xl = x.detach().to("loom").requires_grad_()
    yc, yl = fn(xc), fn(xl)
    assert yl.device.type == "loom" and yl.shape == yc.shape and yl.dtype == yc.dtype
    assert yl.stride() == yc.stride()
    if exact_forward:
        tol = dict(rtol=0, atol=0)
    else:
        tol = dict(rtol=2e-6, atol=2e-6) if x.dtype == torch.float32 else dict(rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(yl.detach().cpu(), yc.detach(), **tol)
    go = torch.randn(yc.shape, generator=g, dtype=x.dtype)
    yc.backward(go)
    yl.backward(go.to("loom"))
    assert xl.grad.stride() == xc.grad.stride()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=0, atol=0)


CASES_2D = [dict(scale_factor=2), dict(size=(13, 5)), dict(scale_factor=(1.7, 0.45)),
            dict(size=(3, 20))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode,antialias", [("bicubic", False), ("bicubic", True),
                                            ("bilinear", True)])
@pytest.mark.parametrize("kw", CASES_2D, ids=str)
def test_2d(dtype, mode, antialias, kw):
    x = torch.randn(2, 5, 7, 9, generator=torch.Generator().manual_seed(0), dtype=dtype)
    for align in (False, True):
        fn = lambda t: F.interpolate(t, mode=mode, align_corners=align, antialias=antialias, **kw)
        check(fn, x, False)
        check(fn, x.to(memory_format=torch.channels_last), False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(3, 7, 4)),
                                dict(scale_factor=(1.5, 0.7, 1.2)), dict(size=(4, 5, 6))],
                         ids=str)
def test_trilinear(dtype, kw):
    x = torch.randn(2, 3, 4, 5, 6, generator=torch.Generator().manual_seed(0), dtype=dtype)
    for align in (False, True):
        fn = lambda t: F.interpolate(t, mode="trilinear", align_corners=align, **kw)
        check(fn, x, True)
        check(fn, x.to(memory_format=torch.channels_last_3d), True)


def test_out_variants_and_errors():
    x = torch.randn(1, 2, 4, 5)
    o = torch.empty(0, device="loom")
    torch._C._nn.upsample_bicubic2d(x.to("loom"), [8, 6], False, None, None, out=o)
    torch.testing.assert_close(o.cpu(), torch._C._nn.upsample_bicubic2d(x, [8, 6], False, None, None),
                               rtol=2e-6, atol=2e-6)
    x5 = torch.randn(1, 2, 3, 4, 5)
    o = torch.empty(0, device="loom")
    torch._C._nn.upsample_trilinear3d(x5.to("loom"), [4, 3, 6], True, None, None, None, out=o)
    assert torch.equal(o.cpu(), torch._C._nn.upsample_trilinear3d(x5, [4, 3, 6], True, None, None, None))
    go = torch.randn(1, 2, 3, 2)
    gi = torch.empty(0, device="loom")
    torch.ops.aten._upsample_bilinear2d_aa_backward.grad_input(
        go.to("loom"), [3, 2], [1, 2, 4, 5], False, None, None, grad_input=gi)
    assert torch.equal(gi.cpu(), torch.ops.aten._upsample_bilinear2d_aa_backward(
        go, [3, 2], [1, 2, 4, 5], False, None, None))
    bad = [lambda d: F.interpolate(torch.ones(1, 1, 4, 4, device=d), size=(2, 0), mode="bicubic"),
           lambda d: torch._C._nn.upsample_trilinear3d(torch.ones(1, 1, 4, 4, device=d), [2, 2, 2],
                                                       False),
           lambda d: torch._C._nn._upsample_bicubic2d_aa(torch.ones(1, 1, 4, 4, device=d), [2], False)]
    for fn in bad:
        with pytest.raises(Exception) as cpu_err:
            fn("cpu")
        with pytest.raises(type(cpu_err.value)):
            fn("loom")


def test_uint8_runs_on_the_cpu_counted():
    img = torch.randint(0, 255, (1, 3, 5, 6), dtype=torch.uint8)
    torch.loom.set_fallback_mode("silent")
    out = F.interpolate(img.to("loom"), size=(3, 4), mode="bilinear", antialias=True)
    assert torch.equal(out.cpu(), F.interpolate(img, size=(3, 4), mode="bilinear", antialias=True))
    assert "aten::_upsample_bilinear2d_aa" in torch.loom.fallback_ops()
    torch.loom.clear_fallback_ops()


SCRIPT = r"""
import hashlib, torch, torch.nn.functional as F
torch.manual_seed(0)
h = hashlib.sha256()
for dtype in (torch.float32, torch.float64):
    x = torch.randn(4, 16, 12, 10, dtype=dtype).to("loom").requires_grad_()
    x5 = torch.randn(2, 16, 5, 6, 4, dtype=dtype).to("loom").requires_grad_()
    for fn, t in ((lambda t: F.interpolate(t, size=(17, 23), mode="bicubic"), x),
                  (lambda t: F.interpolate(t, size=(5, 7), mode="bicubic", antialias=True), x),
                  (lambda t: F.interpolate(t, size=(30, 4), mode="bilinear", antialias=True), x),
                  (lambda t: F.interpolate(t, size=(9, 11, 7), mode="trilinear"), x5)):
        y = fn(t)
        g, = torch.autograd.grad(y, t, torch.randn(y.shape, dtype=dtype).to("loom"))
        for r in (y, g):
            h.update(r.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", h.hexdigest())
"""


def test_thread_count_does_not_change_bits():
    assert digest_with_threads(SCRIPT, 2) == digest_with_threads(SCRIPT, 1)
