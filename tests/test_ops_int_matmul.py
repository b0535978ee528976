"""Integer (and, for addr, bool) matrix products on loom against the CPU:
mm, addmm, bmm, baddbmm, addbmm, mv, addmv, addr, dot, vdot and the
composites that reach them (matmul, einsum, linear, bilinear, tensordot,
inner, multi_dot), with wrap-around in the result dtype, alpha and beta
converted as the CPU converts them, and nothing on the CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def rand(dtype, *shape, g):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    info = torch.iinfo(dtype)
    # full range for the narrow types so that products and sums wrap
    lo, hi = (info.min, info.max) if info.bits <= 16 else (-(2**40), 2**40)
    if dtype == torch.int32:
        lo, hi = info.min, info.max
    return torch.randint(lo, hi, shape, dtype=torch.int64, generator=g).to(dtype)


def same(fn, *args, **kw):
    """fn on loom copies of args equals fn on the CPU, bit for bit."""
    expected = fn(*args, **kw)
    got = fn(*[a.to("loom") if isinstance(a, torch.Tensor) else a for a in args], **kw)
    assert got.device.type == "loom"
    assert got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected), (fn, got.cpu(), expected)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_products_wrap_as_on_cpu(dtype, no_fallback):
    g = torch.Generator().manual_seed(int(torch.iinfo(dtype).bits) + (dtype == torch.uint8))
    a, b = rand(dtype, 7, 600, g=g), rand(dtype, 600, 9, g=g)
    c = rand(dtype, 7, 9, g=g)
    same(torch.mm, a, b)
    same(torch.mm, b.t(), a.t())  # transposed (strided) operands
    same(torch.addmm, c, a, b, beta=3, alpha=-2 if dtype != torch.uint8 else 5)
    same(torch.addmm, c[0], a, b)  # broadcast self
    same(torch.addmm, c, a, b, beta=0)
    same(torch.addmm, c, a, b, alpha=2.7, beta=1.5)  # truncated, as on the CPU
    b1, b2, s3 = rand(dtype, 3, 5, 70, g=g), rand(dtype, 3, 70, 4, g=g), rand(dtype, 3, 5, 4, g=g)
    same(torch.bmm, b1, b2)
    same(torch.baddbmm, s3, b1, b2, beta=2, alpha=3)
    same(torch.addbmm, s3[0], b1, b2, beta=-1 if dtype != torch.uint8 else 7, alpha=2)
    v, w = rand(dtype, 600, g=g), rand(dtype, 7, g=g)
    same(torch.mv, a, v)
    same(torch.addmv, w, a, v, beta=2, alpha=3)
    same(torch.dot, v, b[:, 3])  # strided second operand
    same(torch.vdot, v, v.flip(0))
    same(torch.addr, c, w, rand(dtype, 9, g=g), beta=2, alpha=3)
    same(torch.outer, w, rand(dtype, 9, g=g))
    # the composites
    same(torch.matmul, rand(dtype, 2, 3, 4, 6, g=g), rand(dtype, 6, 5, g=g))
    same(torch.matmul, v, a.t())
    same(torch.einsum, "bij,bjk->bik", b1, b2)
    same(torch.inner, a, rand(dtype, 3, 600, g=g))
    same(torch.tensordot, rand(dtype, 3, 4, 5, g=g), rand(dtype, 4, 5, 2, g=g), dims=2)
    same(lambda x, y, z: torch.linalg.multi_dot([x, y, z]), a, b, rand(dtype, 9, 3, g=g))
    same(F.linear, rand(dtype, 4, 6, g=g), rand(dtype, 5, 6, g=g), rand(dtype, 5, g=g))
    same(F.bilinear, rand(dtype, 4, 3, g=g), rand(dtype, 4, 5, g=g), rand(dtype, 2, 3, 5, g=g))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_out_and_inplace_forms(dtype, no_fallback):
    g = torch.Generator().manual_seed(7)
    a, b, c = rand(dtype, 5, 33, g=g), rand(dtype, 33, 6, g=g), rand(dtype, 5, 6, g=g)
    expected = torch.addmm(c, a, b, beta=2, alpha=3)
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.addmm(c.to("loom"), a.to("loom"), b.to("loom"), beta=2, alpha=3, out=out)
    assert torch.equal(out.cpu(), expected)
    lc = c.to("loom")
    lc.addmm_(a.to("loom"), b.to("loom"), beta=2, alpha=3)
    assert torch.equal(lc.cpu(), expected)
    v = rand(dtype, 33, g=g)
    lw = c[:, 0].clone().to("loom")
    lw.addmv_(a.to("loom"), v.to("loom"), alpha=2)
    assert torch.equal(lw.cpu(), torch.addmv(c[:, 0], a, v, alpha=2))


def test_bool_addr_is_or_of_ands(no_fallback):
    g = torch.Generator().manual_seed(3)
    s, x, y = rand(torch.bool, 6, 9, g=g), rand(torch.bool, 6, g=g), rand(torch.bool, 9, g=g)
    for beta, alpha in ((1, 1), (0, 1), (False, True), (True, False), (2, 3)):
        same(torch.addr, s, x, y, beta=beta, alpha=alpha)
    same(torch.outer, x, y)


def test_empty_and_zero_k(no_fallback):
    for dtype in (torch.int32, torch.uint8):
        same(torch.mm, torch.ones(3, 0, dtype=dtype), torch.ones(0, 4, dtype=dtype))
        same(torch.addmm, torch.full((3, 4), 5, dtype=dtype), torch.ones(3, 0, dtype=dtype),
             torch.ones(0, 4, dtype=dtype), beta=3)
        same(torch.mm, torch.ones(0, 5, dtype=dtype), torch.ones(5, 4, dtype=dtype))
        same(torch.dot, torch.ones(0, dtype=dtype), torch.ones(0, dtype=dtype))


def test_int64_alpha_beta_exact(no_fallback):
    g = torch.Generator().manual_seed(11)
    a, b, c = rand(torch.int64, 4, 5, g=g), rand(torch.int64, 5, 3, g=g), rand(torch.int64, 4, 3, g=g)
    same(torch.addmm, c, a, b, beta=-(2**61) - 3, alpha=2**62 + 1)


def test_bad_scalars_raise_as_on_cpu():
    o = lambda *s: torch.ones(*s, dtype=torch.int8, device="loom")
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.addmm(o(2, 2), o(2, 3), o(3, 2), alpha=300)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.addmv(o(2), o(2, 3), o(3), beta=-129)
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.addr(o(2, 2), o(2), o(2), alpha=1.5)
    with pytest.raises(RuntimeError, match="Boolean beta only supported"):
        torch.addr(o(2, 2), o(2), o(2), beta=True)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        torch.mm(o(2, 3), o(2, 3))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(o(2, 3), torch.ones(3, 2, dtype=torch.int32, device="loom"))


def test_bool_products_other_than_addr_refused_as_on_cpu():
    t = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(NotImplementedError):
        torch.mm(t, t)
    torch.loom.set_fallback_mode("silent")
    with pytest.raises(NotImplementedError):
        torch.mm(t.to("loom"), t.to("loom"))
