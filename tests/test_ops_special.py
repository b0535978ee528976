"""The special functions on loom against the CPU (the pointwise.special
kernel): the modified Bessel functions (i0, special.i0e/i1/i1e, the
modified_bessel_* and scaled K), Bessel J/Y, Airy Ai, spherical j0, ndtri
and the orthogonal polynomials; float32 and float64 over random and edge
values, the hardshrink / softshrink / glu / prelu / rrelu activations, renorm and their gradients, out=
and in-place forms, strided and broadcast operands, gradients,
and bytes that do not depend on how the launch is split. Nothing may fall
back to the CPU."""
import os

import pytest
import torch
import torch.nn.functional as F

from torch_loom import _C

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

S = torch.special
UNARY = [torch.i0, S.i0e, S.i1, S.i1e, S.ndtri, S.spherical_bessel_j0, S.airy_ai,
         S.bessel_j0, S.bessel_j1, S.bessel_y0, S.bessel_y1, S.modified_bessel_i0,
         S.modified_bessel_i1, S.modified_bessel_k0, S.modified_bessel_k1,
         S.scaled_modified_bessel_k0, S.scaled_modified_bessel_k1]
POLY = [S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v,
        S.chebyshev_polynomial_w, S.shifted_chebyshev_polynomial_t,
        S.shifted_chebyshev_polynomial_u, S.shifted_chebyshev_polynomial_v,
        S.shifted_chebyshev_polynomial_w, S.hermite_polynomial_h, S.hermite_polynomial_he,
        S.laguerre_polynomial_l, S.legendre_polynomial_p]
INF, NAN = float("inf"), float("nan")
EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, -3.0, 8.0, 8.5, -20.0, 100.0, 1e4, INF, -INF, NAN,
        0.999, 1e-3, 2.0, 0.25, 4.0]


def close(got, want, what, **tol):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, msg=lambda m: f"{what}: {m}", **tol)


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randn(300, generator=g, dtype=dtype) * 10,
                      torch.rand(100, generator=g, dtype=dtype), torch.tensor(EDGE, dtype=dtype)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_against_cpu(dtype):
    x = inputs(dtype)
    xd = x.to("loom")
    for f in UNARY:
        close(f(xd), f(x), f"{f.__name__} {dtype}")


def test_unary_forms_strides_and_promotion():
    x = inputs(torch.float32).reshape(21, 20)
    xd = x.to("loom")
    for f in UNARY:
        close(f(xd.t()), f(x.t()), f"{f.__name__} transposed")
        out = torch.empty(20, 21, device="loom")
        assert f(xd.t(), out=out) is out
        close(out, f(x.t()), f"{f.__name__} out=")
    y = xd.clone()
    torch.i0_(y)
    close(y, torch.i0(x), "i0_")
    n = torch.arange(-5, 6)  # integers promote to the default float dtype
    close(S.i1(n.to("loom")), S.i1(n), "i1 of int64")
    assert S.i1(n.to("loom")).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polynomials_against_cpu(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.rand(300, generator=g, dtype=dtype) * 2 - 1,
                   torch.randn(100, generator=g, dtype=dtype) * 3,
                   torch.tensor([v for v in EDGE if v == v], dtype=dtype)])
    n = torch.randint(-2, 14, x.shape, generator=g).to(dtype)
    n[:3] = NAN
    n[3] = INF
    n[4] = 200.0
    n[5] = 1e30
    xd, nd = x.to("loom"), n.to("loom")
    # The CPU's vectorized recurrences fuse multiply-adds, as loom's FMA build
    # does; the generic C path (LOOM_CPU_FEATURES=generic) rounds each step,
    # which a float32 recurrence of high degree amplifies, most near its roots.
    tol = {}
    if dtype == torch.float32 and os.environ.get("LOOM_CPU_FEATURES") == "generic":
        tol = {"rtol": 1e-3, "atol": 1e-4}
    for f in POLY:
        close(f(xd, nd), f(x, n), f"{f.__name__} {dtype}", **tol)
        # broadcasting, a Python number for either argument, out=
        close(f(xd[:, None], nd[None, :40]), f(x[:, None], n[None, :40]), f"{f.__name__} bcast",
              **tol)
        close(f(xd, 5), f(x, 5), f"{f.__name__} scalar n", **tol)
        close(f(0.3, nd), f(0.3, n), f"{f.__name__} scalar x", **tol)
        out = torch.empty_like(xd)
        assert f(xd, nd, out=out) is out
        close(out, f(x, n), f"{f.__name__} out=", **tol)
    # NaN x: NaN for degrees 0 and 1 as on the CPU (degree 0: 1)
    xn = torch.tensor([NAN, NAN], dtype=dtype)
    nn = torch.tensor([0.0, 1.0], dtype=dtype)
    for f in POLY:
        close(f(xn.to("loom"), nn.to("loom")), f(xn, nn), f"{f.__name__} NaN x")


@pytest.mark.parametrize("f", [torch.i0, S.i0e, S.i1, S.i1e])
def test_gradients_against_cpu(f):
    x = inputs(torch.float64)[:400].reshape(20, 20)
    x = x[x.abs() > 1e-3][:300]  # away from i1's x = 0 formula switch
    xc = x.clone().requires_grad_()
    xd = x.to("loom").requires_grad_()
    g = torch.randn(x.shape, dtype=torch.float64)
    f(xc).backward(g)
    f(xd).backward(g.to("loom"))
    close(xd.grad, xc.grad, f"{f.__name__} grad")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_shrinks_against_cpu(dtype):
    x = inputs(torch.float32, seed=3).to(dtype)
    x[:5] = torch.tensor([0.5, -0.5, 0.49, -0.51, -0.3])
    for f in [F.hardshrink, F.softshrink]:
        for lambd in [0.5, 0.0, 2.0]:
            xc = x.clone().requires_grad_()
            xd = x.to("loom").requires_grad_()
            want, got = f(xc, lambd), f(xd, lambd)
            close(got, want, f"{f.__name__} {lambd} {dtype}")
            g = torch.randn(x.shape).to(dtype)
            want.backward(g)
            got.backward(g.to("loom"))
            close(xd.grad, xc.grad, f"{f.__name__} {lambd} {dtype} grad")
    xd = x.to("loom")
    out = torch.empty_like(xd)
    assert torch._C._nn.softshrink(xd, 0.5, out=out) is out
    close(out, F.softshrink(x, 0.5), "softshrink out=")
    assert torch.equal(F.softshrink(xd[:5], 0.5).cpu().signbit(), F.softshrink(x[:5], 0.5).signbit())
    with pytest.raises(RuntimeError, match="lambda"):
        F.softshrink(xd, -1.0)
    with pytest.raises(NotImplementedError, match="hardshrink"):
        F.hardshrink(torch.arange(4, device="loom"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_glu_against_cpu(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 8, 4, generator=g, dtype=dtype)
    for dim in [0, 1, -1]:
        xc = x.clone().requires_grad_()
        xd = x.to("loom").requires_grad_()
        want, got = F.glu(xc, dim), F.glu(xd, dim)
        close(got, want, f"glu dim {dim}")
        gr = torch.randn(want.shape, generator=g, dtype=dtype)
        want.backward(gr)
        got.backward(gr.to("loom"))
        close(xd.grad, xc.grad, f"glu grad dim {dim}")
    xd = x.to("loom")
    out = torch.empty(6, 8, 2, device="loom", dtype=dtype)
    assert torch._C._nn.glu(xd, -1, out=out) is out
    close(out, F.glu(x, -1), "glu out=")
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(torch.randn(3, 5, device="loom"), 1)


@pytest.mark.parametrize("wshape", [(1,), (5,)])
def test_prelu_against_cpu(wshape):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 5, 3, generator=g)
    x[0, 0, :2] = torch.tensor([0.0, NAN])
    w = torch.rand(wshape, generator=g)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    xd, wd = x.to("loom").requires_grad_(), w.to("loom").requires_grad_()
    want, got = F.prelu(xc, wc), F.prelu(xd, wd)
    close(got, want, "prelu")
    gr = torch.randn(want.shape, generator=g)
    want.backward(gr)
    got.backward(gr.to("loom"))
    close(xd.grad, xc.grad, "prelu input grad")
    close(wd.grad, wc.grad, "prelu weight grad")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_renorm_against_cpu(dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, 6, 4, generator=g) * 3).to(dtype)
    x[1] = 0.01  # a slice under maxnorm is kept as is
    for p, dim, maxnorm in [(2, 0, 1.0), (1, 1, 5.0), (3.5, -1, 0.5), (float("inf"), 0, 2.0)]:
        xc = x.clone().requires_grad_()
        xd = x.to("loom").requires_grad_()
        want, got = torch.renorm(xc, p, dim, maxnorm), torch.renorm(xd, p, dim, maxnorm)
        close(got, want, f"renorm {p} {dim}")
        if dtype != torch.bfloat16:
            want.sum().backward()
            got.sum().backward()
            close(xd.grad, xc.grad, f"renorm grad {p} {dim}")
    y = x.to("loom")
    y.renorm_(2, 0, 1.0)
    close(y, torch.renorm(x, 2, 0, 1.0), "renorm_")
    with pytest.raises(RuntimeError, match="non-positive-norm"):
        torch.renorm(x.to("loom"), 0, 0, 1.0)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.renorm(torch.ones(3, device="loom"), 2, 0, 1.0)


def test_rrelu_eval_and_training():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 30, generator=g)
    x[0, :3] = torch.tensor([0.0, -0.0, NAN])
    xd = x.to("loom")
    close(F.rrelu(xd, 0.1, 0.3, training=False), F.rrelu(x, 0.1, 0.3, training=False), "eval")
    y = xd.clone()
    F.rrelu(y, 0.1, 0.3, training=False, inplace=True)
    close(y, F.rrelu(x, 0.1, 0.3, training=False), "eval in place")
    # training: a slope in [lower, upper] for each non-positive element, and
    # the gradient is that slope
    xr = xd.clone().requires_grad_()
    out = F.rrelu(xr, 0.1, 0.3, training=True)
    slope = (out / xd).cpu()
    neg, pos = x < 0, x > 0
    assert slope[neg].min() >= 0.1 and slope[neg].max() <= 0.3
    assert slope[neg].std() > 0.03  # drawn, not the mean
    close(out.cpu()[pos], x[pos], "positive part")
    out.backward(torch.ones_like(out))
    close(xr.grad.cpu()[neg], slope[neg], "slopes as gradient")
    close(xr.grad.cpu()[pos], torch.ones(int(pos.sum())), "gradient 1 where positive")


def test_bytes_do_not_depend_on_the_grain():
    # the LOOM_KERNEL_ELEMENTWISE contract: chunk k touches exactly its elements
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(70, 73, generator=g) * 5).to("loom")
    n = torch.randint(0, 12, (70, 1), generator=g).float().to("loom")
    i0, cheb_t = 0, 21  # loom_special_op values (loom/kernels/special.h)
    cases = [([torch.empty_like(x), x.t().contiguous().t()], [i0, 0, 0, 0, 0, 0, 0.0]),
             ([torch.empty(70, 73, device="loom", dtype=torch.bfloat16), x, n.expand(70, 73)],
              [cheb_t, 0, 0, 0, 0, 0, 0.0, 0.0])]
    wants = [torch.i0(x.cpu()), S.chebyshev_polynomial_t(x.cpu(), n.cpu()).bfloat16()]
    for (tensors, scalars), want in zip(cases, wants):
        out = tensors[0]
        results = []
        for grain in [out.numel(), 1, 3, 64, 1000, 4093]:
            out.zero_()
            _C._launch_kernel("pointwise.special", tensors, scalars, out.numel(), grain)
            results.append(out.cpu().clone())
        close(results[0], want, "pointwise.special")
        bits = [r.view(torch.int16) if r.dtype == torch.bfloat16 else r.view(torch.int32)
                for r in results]
        assert all(torch.equal(bits[0], b) for b in bits[1:])
