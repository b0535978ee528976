"""igamma / igammac (torch.special.gammainc / gammaincc) on loom: against the
CPU over the ranges where the CPU's float32/float64 values are accurate,
against high-precision references where the CPU's own asymptotic branch is
not (large a near x), special values, the gradient with respect to x, and
nothing on the CPU fallback."""
import math

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7)}


def operands(dtype):
    g = torch.Generator().manual_seed(5)
    r = lambda n, s: torch.rand(n, generator=g, dtype=dtype) * s
    a = torch.cat([r(3000, 1), r(3000, 5), r(3000, 60), r(1000, 2000)])
    # x near a as often as far from it: every branch (series, fraction,
    # small-x series, the CPU's asymptotic region) is reached
    x = torch.cat([r(3000, 3), r(3000, 10), r(1500, 120), r(1500, 1) * 0.6 + 0.7,
                   a[9000:] * (1 + 0.05 * torch.randn(1000, generator=g, dtype=dtype)).abs()])
    a[::97] = a[::97] * 1e-6  # tiny a, where Q needs DLMF 8.7.3
    return a, x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac, torch.special.gammainc,
                                torch.special.gammaincc])
def test_against_cpu(fn, dtype, no_fallback):
    a, x = operands(dtype)
    got = fn(a.to("loom"), x.to("loom"))
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), fn(a, x), **TOL[dtype])


def test_special_values_as_on_cpu(no_fallback):
    inf, nan = math.inf, math.nan
    a = torch.tensor([0.0, 0.0, 1.0, -1.0, 1.0, inf, inf, 2.0, nan, 1.0, 3.0, 1e-300])
    x = torch.tensor([0.0, 1.0, 0.0, 1.0, -1.0, 1.0, inf, inf, 1.0, nan, 1e-310, 1.0])
    for dtype in (torch.float32, torch.float64):
        for fn in (torch.igamma, torch.igammac):
            ad, xd = a.to(dtype), x.to(dtype)
            torch.testing.assert_close(fn(ad.to("loom"), xd.to("loom")).cpu(), fn(ad, xd),
                                       equal_nan=True, **TOL[dtype])


def test_large_a_against_references(no_fallback):
    # P(a, x) from the power series summed in high precision (mpmath), where
    # the CPU's float asymptotic branch is off by about 1e-4
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    cases = [(200.0, 210.0), (5000.0, 4900.0), (2.0e6, 2.0e6 + 1500.0), (2.0e8, 2.0001e8)]
    a = torch.tensor([c[0] for c in cases], dtype=torch.float64)
    x = torch.tensor([c[1] for c in cases], dtype=torch.float64)
    ref = []
    for av, xv in cases:
        am, xm = mpmath.mpf(av), mpmath.mpf(xv)
        logfac = float(am * mpmath.log(xm) - xm - mpmath.loggamma(am + 1))
        s = t = 1.0
        r = av
        while True:
            r += 1.0
            t *= xv / r
            s += t
            if t < 1e-18 * s:
                break
        ref.append(math.exp(logfac) * s)
    ref = torch.tensor(ref, dtype=torch.float64)
    p = torch.igamma(a.to("loom"), x.to("loom")).cpu()
    q = torch.igammac(a.to("loom"), x.to("loom")).cpu()
    torch.testing.assert_close(p, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(q, 1 - ref, rtol=1e-8, atol=1e-12)
    p32 = torch.igamma(a.float().to("loom"), x.float().to("loom")).cpu()
    torch.testing.assert_close(p32, ref.float(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_in_x(dtype, no_fallback):
    g = torch.Generator().manual_seed(2)
    a = torch.rand(50, generator=g, dtype=dtype) * 4 + 0.2
    x = torch.rand(50, generator=g, dtype=dtype) * 5 + 0.1
    grads = []
    for dev in ("cpu", "loom"):
        xx = x.to(dev).detach().clone().requires_grad_()
        (torch.igamma(a.to(dev), xx) * torch.arange(50, dtype=dtype, device=dev)).sum().backward()
        grads.append(xx.grad.cpu())
        xx = x.to(dev).detach().clone().requires_grad_()
        torch.igammac(a.to(dev), xx).sum().backward()
        grads.append(xx.grad.cpu())
    torch.testing.assert_close(grads[2], grads[0], **TOL[dtype])
    torch.testing.assert_close(grads[3], grads[1], **TOL[dtype])


def test_out_inplace_and_broadcast(no_fallback):
    a, x = operands(torch.float32)
    a, x = a[:12].reshape(3, 4), x[:4]
    out = torch.empty(0, device="loom")
    torch.igamma(a.to("loom"), x.to("loom"), out=out)
    torch.testing.assert_close(out.cpu(), torch.igamma(a, x), **TOL[torch.float32])
    la = a.to("loom")
    la.igammac_(x.to("loom"))
    torch.testing.assert_close(la.cpu(), torch.igammac(a, x), **TOL[torch.float32])


def test_integer_inputs_refused_as_on_cpu():
    t = torch.tensor([1, 2])
    with pytest.raises(NotImplementedError, match="igamma"):
        torch.igamma(t, t)
    torch.loom.set_fallback_mode("silent")
    with pytest.raises(NotImplementedError, match="igamma"):
        torch.igamma(t.to("loom"), t.to("loom"))
