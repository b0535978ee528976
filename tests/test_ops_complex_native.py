"""Complex elementary functions on loom (exp, log, sqrt, reciprocal, sin,
cos, tanh, sigmoid, sgn) against the CPU, special values included, natively; and
the accounting of every other complex op: each either runs natively (no
copy of its data to the host) or runs on the CPU counted in
torch.loom.fallback_ops() (so LOOM_FALLBACK=error refuses it, naming the
op) -- never on the CPU unseen."""
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

DEV = "loom"
CPLX = [torch.complex64, torch.complex128]
NATIVE_UNARY = ["exp", "log", "sqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "sgn"]

INF, NAN = math.inf, math.nan
SPECIAL = [complex(INF, 0), complex(-INF, 0), complex(0, INF), complex(INF, INF),
           complex(-INF, INF), complex(NAN, 0), complex(0, NAN), complex(NAN, NAN),
           complex(1e30, 1e30), complex(-1e30, 3), complex(0, 0), complex(-0.0, 0),
           complex(0, -0.0), complex(100, 1), complex(-100, -2), complex(1, 2)]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g) * 2


def host_copies(fn):
    """Runs fn under the profiler; returns its result and whether it copied
    device data to the host (as any CPU computation of a loom op does)."""
    torch.loom.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        r = fn()
        torch.loom.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1}
    return r, "memcpy DtoH" in names, names


def same(got, ref, rtol=None, atol=None):
    """Equal within tolerance, NaN where the CPU has NaN, per part."""
    assert got.device.type == DEV and got.dtype == ref.dtype and got.shape == ref.shape
    parts = torch.view_as_real if ref.is_complex() else (lambda t: t)
    torch.testing.assert_close(parts(got.cpu().resolve_conj()), parts(ref.resolve_conj()),
                               equal_nan=True, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", CPLX)
@pytest.mark.parametrize("name", NATIVE_UNARY)
def test_native_unary_against_cpu(no_fallback, name, dtype):
    fn = getattr(torch, name)
    x = sample((33, 17), dtype)
    lx = x.to(DEV)
    got, copied, names = host_copies(lambda: fn(lx))
    assert not copied and "complex.apply" in names, names
    same(got, fn(x))
    # a strided (transposed, sliced) operand
    same(fn(lx.t()[::2]), fn(x.t()[::2]))
    # out= and in place
    out = torch.empty(3, dtype=dtype, device=DEV)
    getattr(torch, name)(lx, out=out)
    same(out, fn(x))
    y = lx.clone()
    getattr(y, name + "_")()
    same(y, fn(x))
    # a conjugate view is read as its values
    same(fn(lx.conj()), fn(x.conj()))


@pytest.mark.parametrize("dtype", CPLX)
@pytest.mark.parametrize("name", NATIVE_UNARY)
def test_native_unary_special_values(no_fallback, name, dtype):
    fn = getattr(torch, name)
    x = torch.tensor(SPECIAL, dtype=dtype)
    # the results the CPU gives for these, its NaNs and infinities included
    same(fn(x.to(DEV)), fn(x), rtol=1e-6 if dtype == torch.complex64 else 1e-13, atol=0)


# Ops over complex operands: (name, function of the loom or CPU arguments,
# arguments). Each is native or counted.
def _args(dtype):
    a, b = sample((4, 4), dtype), sample((4, 4), dtype, seed=1)
    spd = a @ a.mH + 4 * torch.eye(4, dtype=dtype)
    return a, b, spd


CASES = [
    ("expm1", lambda a, b, s: torch.expm1(a)),
    ("log1p", lambda a, b, s: torch.log1p(a)),
    ("log2", lambda a, b, s: torch.log2(a)),
    ("rsqrt", lambda a, b, s: torch.rsqrt(a)),
    ("tan", lambda a, b, s: torch.tan(a)),
    ("sinh", lambda a, b, s: torch.sinh(a)),
    ("cosh", lambda a, b, s: torch.cosh(a)),
    ("asin", lambda a, b, s: torch.asin(a)),
    ("atanh", lambda a, b, s: torch.atanh(a)),
    ("sgn", lambda a, b, s: torch.sgn(a)),
    ("pow", lambda a, b, s: torch.pow(a, b)),
    ("pow_scalar", lambda a, b, s: torch.pow(a, 2.5)),
    ("eq", lambda a, b, s: torch.eq(a, b)),
    ("mm", lambda a, b, s: a @ b),
    ("mv", lambda a, b, s: torch.mv(a, b[0])),
    ("vdot", lambda a, b, s: torch.vdot(a[0], b[0])),
    ("cholesky", lambda a, b, s: torch.linalg.cholesky(s)),
    ("solve", lambda a, b, s: torch.linalg.solve(s, b)),
    ("qr", lambda a, b, s: torch.cat(torch.linalg.qr(a))),
    ("exp", lambda a, b, s: torch.exp(a)),
    ("add", lambda a, b, s: a + b),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_complex_ops_native_or_counted(name, fn):
    dtype = torch.complex64
    a, b, spd = _args(dtype)
    la, lb, ls = a.to(DEV), b.to(DEV), spd.to(DEV)
    ref = fn(a, b, spd)
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    got, copied, _ = host_copies(lambda: fn(la, lb, ls))
    counted = torch.loom.fallback_ops()
    # a computation on the host is always counted
    assert not copied or counted, f"{name} ran on the CPU uncounted"
    if ref.is_complex() or ref.is_floating_point():
        same(got, ref, rtol=1e-4, atol=1e-4)
    else:
        assert torch.equal(got.cpu(), ref)
    # under LOOM_FALLBACK=error a counted op raises, naming it; a native one runs
    torch.loom.set_fallback_mode("error")
    torch.loom.clear_fallback_ops()
    if counted:
        with pytest.raises(NotImplementedError, match=r"The operator 'aten::\w+"):
            fn(la, lb, ls)
    else:
        fn(la, lb, ls)
        assert torch.loom.fallback_ops() == {}


@pytest.mark.parametrize("op", [torch.eq, torch.ne], ids=["eq", "ne"])
def test_complex_comparisons_native(op):
    a = sample((3, 5), torch.complex64)
    b = a.clone()
    b[0, 1] += 1j          # imaginary part differs
    b[2, 3] += 1           # real part differs
    b[1, 4] = float("nan")
    torch.loom.set_fallback_mode("error")
    torch.loom.clear_fallback_ops()
    for x, y in ((a, b), (a, b[1]), (a.conj(), b.conj())):
        got = op(x.to(DEV), y.to(DEV))
        assert got.dtype == torch.bool and torch.equal(got.cpu(), op(x, y))
    for number in (0, a[1, 1].item()):
        assert torch.equal(op(a.to(DEV), number).cpu(), op(a, number))
    assert torch.loom.fallback_ops() == {}


def test_counted_linalg_names_the_op():
    # complex products are native (real products of the parts); a complex
    # factorization still runs on the CPU, counted under its own name
    a = sample((3, 3), torch.complex128)
    a = a @ a.mH + 3 * torch.eye(3, dtype=a.dtype)
    torch.loom.set_fallback_mode("error")
    with pytest.raises(NotImplementedError, match="aten::linalg_cholesky_ex"):
        torch.linalg.cholesky(a.to(DEV))
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    same(torch.linalg.cholesky(a.to(DEV)), torch.linalg.cholesky(a))
    assert torch.loom.fallback_ops().get("aten::linalg_cholesky_ex", 0) >= 1, \
        torch.loom.fallback_ops()
