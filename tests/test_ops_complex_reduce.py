"""Reductions, scans and fills of complex tensors on loom against the CPU:
prod, all/any, cumsum/cumprod (native kernels), var/std and their means,
the vector norms, logsumexp and masked_fill (composed of native ops), with
the CPU fallback refused; complex where, matrix products (real products of
the parts), the hyperbolic and inverse trigonometric functions and rsqrt;
complex32 (chalf) copies and views; the complex least squares' out dtypes. Complex64 cumsum is the CPU's bits (both
accumulate in complex double); results never depend on the thread count."""
import pytest
import torch

from conftest import digest_with_threads

C = (torch.complex64, torch.complex128)


def rand(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def close(a, b, **kw):
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            close(x, y, **kw)
        return
    assert a.device.type == "loom"
    torch.testing.assert_close(a.cpu(), b, **kw)


@pytest.mark.parametrize("dtype", C)
def test_prod_all_any(no_fallback, dtype):
    x = rand(3, 5, 4, dtype=dtype) * 0.9
    x[1, 2, 3] = 0
    x[2, :, 1] = 0
    x[0, :, 2] = 1j  # nonzero through the imaginary part alone
    d = x.to("loom")
    for dims in [None, 0, 1, 2, -1]:
        if dims is None:
            close(d.prod(), x.prod())
            close(d.all(), x.all())
            close(d.any(), x.any())
        else:
            close(d.prod(dims), x.prod(dims))
            close(d.prod(dims, keepdim=True), x.prod(dims, keepdim=True))
            close(d.all(dims), x.all(dims))
            close(d.any(dims, keepdim=True), x.any(dims, keepdim=True))
    close(d.all(dim=(0, 2)), x.all(dim=(0, 2)))
    close(d.transpose(0, 2).prod(1), x.transpose(0, 2).prod(1))  # strided
    close(d.conj().prod(0), x.conj().prod(0))
    assert bool(torch.zeros(2, 0, dtype=dtype, device="loom").all())
    close(torch.zeros(2, 0, dtype=dtype, device="loom").prod(1),
          torch.ones(2, dtype=dtype))
    # a real result: the product of the real parts, as the CPU
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    close(d.prod(1, dtype=real), x.prod(1, dtype=real))
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.prod(d, 2, out=out)
    close(out, x.prod(2))


@pytest.mark.parametrize("dtype", C)
def test_cumsum_cumprod(no_fallback, dtype):
    x = rand(4, 37, dtype=dtype)
    d = x.to("loom")
    for dim in (0, 1, -1):
        a, b = d.cumsum(dim), x.cumsum(dim)
        # the CPU accumulates complex64 and complex128 in complex double too
        assert torch.equal(a.cpu(), b)
        close(d.cumprod(dim), x.cumprod(dim), rtol=1e-6, atol=1e-6)
    close(d.t().cumsum(1), x.t().cumsum(1), rtol=0, atol=0)
    y = d.clone()
    y.cumsum_(1)
    close(y, x.cumsum(1), rtol=0, atol=0)
    r = x.real.contiguous()
    close(r.to("loom").cumsum(1, dtype=dtype), r.cumsum(1, dtype=dtype), rtol=0, atol=0)
    close(d.cumsum(0, dtype=torch.float64), x.cumsum(0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", C)
def test_var_std_norm_logsumexp(no_fallback, dtype):
    x = rand(4, 6, 5, dtype=dtype)
    d = x.to("loom")
    for dim in [None, 1, (0, 2)]:
        for c in (0, 1):
            close(d.var(dim, correction=c), x.var(dim, correction=c))
            close(d.std(dim, correction=c, keepdim=True), x.std(dim, correction=c, keepdim=True))
            close(torch.var_mean(d, dim, correction=c), torch.var_mean(x, dim, correction=c))
            close(torch.std_mean(d, dim, correction=c), torch.std_mean(x, dim, correction=c))
        for ord in (2, 1, 0, 3.5, float("inf"), -float("inf")):
            close(torch.linalg.vector_norm(d, ord, dim), torch.linalg.vector_norm(x, ord, dim))
    assert torch.var(d, 1).dtype == x.real.dtype
    close(d.norm(), x.norm())
    close(torch.norm(d, p=2, dim=1, dtype=torch.complex128),
          torch.norm(x, p=2, dim=1, dtype=torch.complex128))
    close(torch.dist(d, d.flip(0)), torch.dist(x, x.flip(0)))
    close(torch.logsumexp(d, 1), torch.logsumexp(x, 1))
    close(torch.logsumexp(d, (0, 2), keepdim=True), torch.logsumexp(x, (0, 2), keepdim=True))
    with pytest.raises(RuntimeError, match="dtype should be complex"):
        torch.linalg.vector_norm(d, dtype=torch.float32)


@pytest.mark.parametrize("dtype", C)
def test_masked_fill(no_fallback, dtype):
    x = rand(3, 7, dtype=dtype)
    m = x.real > 0
    d = x.to("loom")
    close(d.masked_fill(m.to("loom"), 2 - 3j), x.masked_fill(m, 2 - 3j), rtol=0, atol=0)
    close(d.masked_fill(m[0].to("loom"), 1.5), x.masked_fill(m[0], 1.5), rtol=0, atol=0)
    v = torch.tensor(0.25 + 1j, dtype=dtype)
    close(d.masked_fill(m.to("loom"), v.to("loom")), x.masked_fill(m, v), rtol=0, atol=0)
    c = d.clone().conj()
    c.masked_fill_(m.to("loom"), 1 + 2j)
    close(c.resolve_conj(), x.conj().masked_fill(m, 1 + 2j).resolve_conj(), rtol=0, atol=0)


def test_chalf_copies_and_views():
    x = rand(4, 6, dtype=torch.complex64)
    for src in (x, x.real, x.to(torch.float16).real, x.real.to(torch.int64), x.real > 0):
        h = src.to("loom").chalf()
        assert h.dtype == torch.complex32
        torch.testing.assert_close(h.cpu(), src.chalf(), rtol=0, atol=0)
    h = x.to("loom").chalf()
    torch.testing.assert_close(h.t().contiguous().cpu(), x.chalf().t().contiguous(),
                               rtol=0, atol=0)
    torch.testing.assert_close(torch.view_as_real(h).cpu(), torch.view_as_real(x.chalf()),
                               rtol=0, atol=0)
    for t in (torch.complex64, torch.complex128, torch.float32, torch.bool):
        torch.testing.assert_close(h[:, 1:].to(t).cpu(), x.chalf()[:, 1:].to(t), rtol=0, atol=0)
    torch.testing.assert_close(x.chalf().to("loom").cpu(), x.chalf(), rtol=0, atol=0)
    # arithmetic of complex32 has no kernels here: the CPU's, counted
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    torch.testing.assert_close((h + h).cpu(), x.chalf() + x.chalf(), rtol=0, atol=0)
    torch.testing.assert_close(h.abs().cpu(), x.chalf().abs(), rtol=0, atol=0)
    assert {"aten::add.Tensor", "aten::abs"} <= set(torch.loom.fallback_ops())


def test_complex_lstsq_out_dtypes():
    a, b = rand(5, 3, seed=1), rand(5, 2, seed=2)
    res = torch.linalg.lstsq(a.to("loom"), b.to("loom"), driver="gelsd")
    ref = torch.linalg.lstsq(a, b, driver="gelsd")
    assert res.solution.dtype == torch.complex64 and res.singular_values.dtype == torch.float32
    close(res.solution, ref.solution, rtol=1e-4, atol=1e-4)
    close(res.singular_values, ref.singular_values, rtol=1e-4, atol=1e-4)


def test_thread_count_independent():
    code = """
    import torch, torch_loom
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 600, dtype=torch.complex64, generator=g).to("loom") * 0.05 + 1
    add(x.prod(1), x.prod(0), x.cumsum(1), x.cumprod(0), x.all(1), x.any(0),
        x.var(1), torch.linalg.vector_norm(x, 3, 0), torch.logsumexp(x, 1))
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 4)


@pytest.mark.parametrize("dtype", C)
def test_where(no_fallback, dtype):
    x, y = rand(3, 4, dtype=dtype), rand(4, dtype=dtype, seed=1)
    m = x.real > 0
    dx, dy, dm = x.to("loom"), y.to("loom"), m.to("loom")
    close(torch.where(dm, dx, dy), torch.where(m, x, y), rtol=0, atol=0)
    close(torch.where(dm, dx, 2 + 1j), torch.where(m, x, 2 + 1j), rtol=0, atol=0)
    close(torch.where(dm, dx.real.contiguous(), dy), torch.where(m, x.real, y), rtol=0, atol=0)
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.where(dm, dy, dx, out=out)
    close(out, torch.where(m, y, x), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", C)
def test_matrix_products(no_fallback, dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.complex64 else {}
    a, b, c = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype, seed=1), rand(5, 3, dtype=dtype, seed=2)
    v, w = rand(7, dtype=dtype, seed=3), rand(5, dtype=dtype, seed=4)
    ba, bb = rand(2, 5, 7, dtype=dtype, seed=5), rand(2, 7, 3, dtype=dtype, seed=6)
    L = lambda t: t.to("loom")
    close(L(a) @ L(b), a @ b, **tol)
    close(L(a).t().conj() @ L(c), a.t().conj() @ c, **tol)  # strided, conjugate view
    close(torch.addmm(L(c), L(a), L(b), beta=0.5 - 1j, alpha=2j),
          torch.addmm(c, a, b, beta=0.5 - 1j, alpha=2j), **tol)
    nan = torch.full_like(c, float("nan"))
    close(torch.addmm(L(nan), L(a), L(b), beta=0), torch.addmm(nan, a, b, beta=0), **tol)
    close(torch.bmm(L(ba), L(bb)), torch.bmm(ba, bb), **tol)
    close(torch.baddbmm(L(c), L(ba), L(bb), alpha=1 + 1j), torch.baddbmm(c, ba, bb, alpha=1 + 1j), **tol)
    close(torch.mv(L(a), L(v)), torch.mv(a, v), **tol)
    close(torch.addmv(L(w), L(a), L(v), beta=2), torch.addmv(w, a, v, beta=2), **tol)
    close(torch.dot(L(v), L(v).flip(0)), torch.dot(v, v.flip(0)), **tol)
    close(torch.vdot(L(v), L(v).flip(0)), torch.vdot(v, v.flip(0)), **tol)
    close(torch.addr(L(c[:, :1]), L(w), L(v[:3])), torch.addr(c[:, :1], w, v[:3]), **tol)
    close(L(ba) @ L(b), ba @ b, **tol)  # matmul's broadcast through mm


@pytest.mark.parametrize("dtype", C)
@pytest.mark.parametrize("name", ["sinh", "cosh", "tan", "asin", "acos", "atan", "asinh",
                                  "acosh", "atanh", "rsqrt"])
def test_unary_functions(no_fallback, dtype, name):
    x = rand(4, 9, dtype=dtype) * 2
    x[0, :4] = torch.tensor([0, 1, -1j, 2 + 0j])
    fn = getattr(torch, name)
    # C99's functions, which std::complex calls on the CPU (its vectorized
    # loops may differ in the last bits); rsqrt(0) is inf + nan i there too
    tol = dict(rtol=1e-5 if dtype == torch.complex64 else 1e-12, atol=1e-6, equal_nan=True)
    close(fn(x.to("loom")), fn(x), **tol)
    close(fn(x.to("loom").t()), fn(x.t()), **tol)
    y = x.to("loom")
    getattr(y, name + "_")()
    close(y, fn(x), **tol)


@pytest.mark.parametrize("dtype", C)
def test_pow_number_exponent(no_fallback, dtype):
    x = rand(3, 8, dtype=dtype)
    x[0, 0] = 0
    d = x.to("loom")
    # the CPU's special cases (products, sqrt, rsqrt, reciprocal) and cpow
    for e in (0, 1, 2, 3, -2, 0.5, -0.5, -1, 1.7, -0.3 + 2j, 2j):
        tol = dict(rtol=1e-5 if dtype == torch.complex64 else 1e-12, atol=1e-6, equal_nan=True)
        close(d ** e, x ** e, **tol)
        y = d.clone()
        y.pow_(e)
        close(y, x ** e, **tol)
    close(d.real.contiguous() ** (1 + 1j), x.real ** (1 + 1j), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", C)
def test_tanh_sigmoid_backward(no_fallback, dtype):
    x = rand(4, 6, dtype=dtype) * 0.5
    for fn in (torch.tanh, torch.sigmoid):
        grads = []
        for dev in ("cpu", "loom"):
            a = x.to(dev).requires_grad_()
            (g,) = torch.autograd.grad(fn(a), a, torch.ones_like(a) * (0.5 - 2j))
            grads.append(g.cpu())
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)
