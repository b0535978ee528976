"""Complex tensors on loom against the CPU: copies and views, fill,
add/sub/mul/div (tensors, broadcasting, Python numbers, alpha, in place and
out=), neg, abs, angle, conj_physical and the materialisation of conjugate
views, polar, complex, sum and mean; each runs natively (no CPU fallback,
and no copy of its data back to the host: a hidden CPU fallback would make
one)."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

DEV = "loom"
CPLX = [torch.complex64, torch.complex128]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


def close(got, ref):
    assert got.device.type == DEV
    torch.testing.assert_close(got.cpu(), ref)


def device_kernels(fn):
    """Runs fn under the profiler; returns its result and the names of the
    device activities it caused."""
    torch.loom.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        r = fn()
        torch.loom.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1}
    return r, names


def assert_native(fn, kernel="complex.apply"):
    r, names = device_kernels(fn)
    assert "memcpy DtoH" not in names, names
    if kernel:
        assert kernel in names, names
    return r


@pytest.mark.parametrize("dtype", CPLX)
def test_binary(no_fallback, dtype):
    a, b = sample((4, 5), dtype), sample((4, 5), dtype, seed=1)
    real = sample((5,), torch.float32 if dtype == torch.complex64 else torch.float64, 2)
    la, lb, lr = a.to(DEV), b.to(DEV), real.to(DEV)
    for op in (torch.add, torch.sub, torch.mul, torch.div):
        close(assert_native(lambda: op(la, lb)), op(a, b))
        close(assert_native(lambda: op(la, lb[:1])), op(a, b[:1]))  # broadcast
        close(assert_native(lambda: op(la, lr)), op(a, real))  # real operand promoted
        close(assert_native(lambda: op(la, 2.5 - 1j)), op(a, 2.5 - 1j))  # Python numbers
        close(assert_native(lambda: op(la, 3)), op(a, 3))
        close(assert_native(lambda: op(la.t(), lb.t())), op(a.t(), b.t()))  # strided
    close(assert_native(lambda: torch.add(la, lb, alpha=2 - 1j)), torch.add(a, b, alpha=2 - 1j))
    close(assert_native(lambda: torch.sub(la, lb, alpha=0.5)), torch.sub(a, b, alpha=0.5))
    close(assert_native(lambda: torch.mul(lr, la)), torch.mul(real, a))  # real self


def test_division_edge_cases(no_fallback):
    a = torch.tensor([1 + 1j, 1e30 + 1e30j, 0j, 3 - 4j], dtype=torch.complex64)
    b = torch.tensor([1e-30 + 0j, 1e30 - 1e30j, 0j, 0 + 2j], dtype=torch.complex64)
    torch.testing.assert_close((a.to(DEV) / b.to(DEV)).cpu(), a / b, equal_nan=True)


@pytest.mark.parametrize("dtype", CPLX)
def test_inplace_and_out(no_fallback, dtype):
    a, b = sample((3, 4), dtype), sample((3, 4), dtype, seed=1)
    la = a.to(DEV)
    assert_native(lambda: la.mul_(b.to(DEV)))
    close(la, a * b)
    assert_native(lambda: la.add_(1j))
    close(la, a * b + 1j)
    out = torch.empty(0, dtype=dtype, device=DEV)
    r = assert_native(lambda: torch.div(a.to(DEV), b.to(DEV), out=out))
    assert r is out
    close(out, a / b)
    wide = torch.empty(3, 4, dtype=torch.complex128, device=DEV)
    torch.sub(a.to(DEV), b.to(DEV), out=wide)
    close(wide, (a - b).to(torch.complex128))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(3, 4, device=DEV).mul_(a.to(DEV))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        a[:1].to(DEV).add_(b.to(DEV))


@pytest.mark.parametrize("dtype", CPLX)
def test_unary(no_fallback, dtype):
    a = sample((6, 7), dtype)
    a[0, 0] = 0
    a[0, 1] = -2.0
    la = a.to(DEV)
    for fn in (torch.abs, torch.angle, torch.neg, torch.conj_physical):
        close(assert_native(lambda: fn(la)), fn(a))
        close(assert_native(lambda: fn(la[:, ::2])), fn(a[:, ::2]))
    out = torch.empty(0, dtype=a.real.dtype, device=DEV)
    torch.abs(la, out=out)
    close(out, a.abs())
    b = la.clone()
    assert_native(lambda: b.neg_())
    close(b, -a)
    b = la.clone()
    assert_native(lambda: b.conj_physical_())
    close(b, a.conj())


def test_conj_views_materialise(no_fallback):
    a = sample((5, 3), torch.complex64)
    lc = a.to(DEV).conj()
    assert lc.is_conj()
    close(assert_native(lambda: lc.resolve_conj()), a.conj().resolve_conj())
    close(assert_native(lambda: lc.clone()), a.conj())
    close(assert_native(lambda: lc * 2), a.conj() * 2)
    torch.testing.assert_close(lc.cpu(), a.conj())  # copied out with its conjugate bit
    n = a.to(DEV).conj().imag  # a negative view
    close(n.clone(), a.conj().imag.clone())
    close(assert_native(lambda: torch.conj_physical(lc), kernel=None), a)


def test_real_imag_views_and_copies(no_fallback):
    a = sample((4, 6), torch.complex128)
    la = a.to(DEV)
    close(la.real, a.real)
    close(la.imag, a.imag)
    assert la.real.data_ptr() == la.data_ptr()  # views
    la.imag.fill_(2.0)
    a.imag.fill_(2.0)
    close(la, a)
    close(torch.view_as_complex(torch.view_as_real(la)), a)
    close(la.to(torch.complex64), a.to(torch.complex64))
    close(la.real.to(torch.complex64), a.real.to(torch.complex64))
    close(la.t().contiguous(), a.t().contiguous())
    f = torch.empty(3, dtype=torch.complex64, device=DEV).fill_(1 - 2j)
    close(f, torch.full((3,), 1 - 2j, dtype=torch.complex64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polar_complex(no_fallback, dtype):
    r, t = sample((5, 4), dtype).abs(), sample((4,), dtype, seed=1)
    close(assert_native(lambda: torch.polar(r.to(DEV), t.to(DEV).expand(5, 4))),
          torch.polar(r, t.expand(5, 4)))
    close(assert_native(lambda: torch.complex(r.to(DEV), t.to(DEV).expand(5, 4))),
          torch.complex(r, t.expand(5, 4)))
    with pytest.raises(RuntimeError, match="scalar type"):
        torch.complex(r.to(DEV), t.to(DEV).double() if dtype == torch.float32 else t.to(DEV).float())


@pytest.mark.parametrize("dtype", CPLX)
def test_sum_mean(no_fallback, dtype):
    a = sample((3, 4, 5), dtype)
    la = a.to(DEV)
    for fn, kw in [(torch.sum, {}), (torch.sum, {"dim": 1}), (torch.sum, {"dim": (0, 2), "keepdim": True}),
                   (torch.mean, {}), (torch.mean, {"dim": -1}), (torch.mean, {"dim": 0, "keepdim": True})]:
        close(assert_native(lambda: fn(la, **kw), kernel=None), fn(a, **kw))
    close(la.conj().sum(0), a.conj().sum(0))
    close(la.transpose(0, 2).sum(1), a.transpose(0, 2).sum(1))
    close(la.sum(dtype=torch.complex128), a.sum(dtype=torch.complex128))
    out = torch.empty(0, dtype=dtype, device=DEV)
    torch.sum(la, 2, out=out)
    close(out, a.sum(2))


def test_complex_autograd(no_fallback):
    a = sample((4,), torch.complex128)
    grads = []
    for dev in ("cpu", DEV):
        x = a.detach().to(dev).requires_grad_()
        y = ((x * (2 + 1j)) / (x.conj() + 3)).abs().sum()
        y.backward()
        grads.append(x.grad)
    close(grads[1], grads[0])


def test_half_parts_make_chalf_on_the_cpu_counted():
    """complex32 has no loom kernels yet: Half parts run on the CPU, counted
    as a fallback, with the CPU's result (and the CPU's error for polar)."""
    a, b = torch.randn(5, dtype=torch.half), torch.randn(5, dtype=torch.half)
    torch.loom.clear_fallback_ops()
    got = torch.complex(a.to("loom"), b.to("loom"))
    assert got.dtype == torch.complex32 and got.device.type == "loom"
    assert torch.equal(torch.view_as_real(got.cpu()), torch.view_as_real(torch.complex(a, b)))
    assert "aten::complex.out" in torch.loom.fallback_ops()
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        torch.polar(a.to("loom"), b.to("loom"))
