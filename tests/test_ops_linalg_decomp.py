"""Decompositions and solves on loom against the CPU: Cholesky, LU (factor,
unpack, solve), triangular solves, solve, inv, det/slogdet/logdet,
cholesky_solve/cholesky_inverse; float32 and float64, batched (a batch of
256 64x64 matrices included), broadcast and non-contiguous operands, out=
forms; singular and non-positive-definite inputs (the info outputs and
PyTorch's messages); gradients; nothing on the CPU fallback; results
independent of the thread count (for the QR, eigh and SVD of
test_ops_linalg_orth.py too)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"),
              pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")]

DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def general(*shape, dtype=torch.float64, seed=0):
    """Well-conditioned square (or rectangular) matrices."""
    a = torch.randn(*shape, generator=gen(seed), dtype=torch.float64)
    n = min(shape[-2:])
    a[..., range(n), range(n)] += 2 * max(shape[-2:]) ** 0.5
    return a.to(dtype)


def spd(*shape, dtype=torch.float64, seed=0):
    """Symmetric positive-definite matrices."""
    x = torch.randn(*shape, generator=gen(seed), dtype=torch.float64)
    return (x @ x.mT / shape[-1] + torch.eye(shape[-1], dtype=torch.float64)).to(dtype)


def rhs(*shape, dtype=torch.float64, seed=1):
    return torch.randn(*shape, generator=gen(seed), dtype=torch.float64).to(dtype)


def check(actual, expected, dtype=None):
    assert actual.device.type == "loom"
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, **tol(dtype or expected.dtype))


def loom(t):
    return t.to("loom")


def odd_layout(t):
    """`t` on loom, transposed in memory and sliced (no contiguous dim)."""
    big = torch.zeros(*t.shape[:-2], t.shape[-1], 2 * t.shape[-2] + 1, dtype=t.dtype)
    big[..., 1::2] = t.mT
    view = loom(big)[..., 1::2].mT
    assert not view.is_contiguous() and not view.mT.is_contiguous()
    return view


SHAPES = [(1, 1), (5, 5), (3, 33, 33), (2, 3, 8, 8)]


# ---- Cholesky --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, shape, upper):
    a = spd(*shape, dtype=dtype)
    check(torch.linalg.cholesky(loom(a), upper=upper), torch.linalg.cholesky(a, upper=upper))
    check(torch.cholesky(loom(a), upper=upper), torch.cholesky(a, upper=upper))


def test_cholesky_reads_one_triangle_and_odd_layouts():
    a = spd(4, 9, 9)
    junk = a + torch.triu(torch.full_like(a, 7.0), 1)   # the upper part is never read
    check(torch.linalg.cholesky(loom(junk)), torch.linalg.cholesky(a))
    check(torch.linalg.cholesky(odd_layout(a), upper=True), torch.linalg.cholesky(a, upper=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_batch_of_256(dtype):
    a = spd(256, 64, 64, dtype=dtype, seed=3)
    b = rhs(256, 64, 2, dtype=dtype)
    L = torch.linalg.cholesky(loom(a))
    check(L, torch.linalg.cholesky(a))
    check(torch.cholesky_solve(loom(b), L), torch.cholesky_solve(b, torch.linalg.cholesky(a)))
    check(torch.linalg.solve(loom(a), loom(b)), torch.linalg.solve(a, b))


def test_cholesky_not_positive_definite():
    a = spd(3, 4, 4)
    a[1, 2, 2] = -10.0                                   # minor of order 3 fails
    L, info = torch.linalg.cholesky_ex(loom(a))
    assert info.device.type == "loom" and info.dtype == torch.int32
    assert info.cpu().tolist() == torch.linalg.cholesky_ex(a).info.tolist() == [0, 3, 0]
    torch.testing.assert_close(L.cpu()[0], torch.linalg.cholesky(a[0]))
    with pytest.raises(torch.linalg.LinAlgError,
                       match=r"\(Batch element 1\): The factorization could not be completed "
                             r"because the input is not positive-definite \(the leading minor "
                             r"of order 3 is not positive-definite\)"):
        torch.linalg.cholesky(loom(a))
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.cholesky: The factorization"):
        torch.linalg.cholesky(loom(-torch.eye(3)))
    with pytest.raises(torch.linalg.LinAlgError, match="order 1"):
        torch.linalg.cholesky_ex(loom(-torch.eye(3)), check_errors=True)


def test_bad_arguments_raise_as_on_cpu():
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.cholesky(loom(torch.ones(3, 4)))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        torch.linalg.cholesky(loom(torch.ones(3, 3, dtype=torch.int64)))
    with pytest.raises(RuntimeError, match="Incompatible shapes of A and B"):
        torch.linalg.solve_triangular(loom(torch.eye(3)), loom(torch.ones(4, 2)), upper=True)
    with pytest.raises(RuntimeError, match="LU without pivoting"):
        torch.linalg.lu_factor(loom(torch.eye(3)), pivot=False)


# ---- triangular solves -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(dtype, upper, left, unit):
    a = general(2, 1, 7, 7, dtype=dtype)                  # broadcast against B's batch
    b = rhs(2, 3, 7, 4, dtype=dtype) if left else rhs(2, 3, 4, 7, dtype=dtype)
    expected = torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
    check(torch.linalg.solve_triangular(loom(a), loom(b), upper=upper, left=left,
                                        unitriangular=unit), expected)
    # A row-major (read as A^T) and a non-contiguous B.
    check(torch.linalg.solve_triangular(loom(a.mT.contiguous()).mT, odd_layout(b), upper=upper,
                                        left=left, unitriangular=unit), expected)


@pytest.mark.parametrize("upper,transpose,unit", [(True, False, False), (False, True, True),
                                                  (False, False, False), (True, True, False)])
def test_triangular_solve(upper, transpose, unit):
    a, b = general(3, 6, 6), rhs(3, 6, 2)
    x, m = torch.triangular_solve(loom(b), loom(a), upper, transpose, unit)
    x0, m0 = torch.triangular_solve(b, a, upper, transpose, unit)
    check(x, x0)
    check(m, m0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(dtype, upper):
    a = spd(4, 10, 10, dtype=dtype)
    f = torch.linalg.cholesky(a, upper=upper)
    b = rhs(10, 3, dtype=dtype)                          # broadcast over the batch
    check(torch.cholesky_solve(loom(b), loom(f), upper=upper), torch.cholesky_solve(b, f, upper))
    check(torch.cholesky_inverse(loom(f[1]), upper=upper), torch.cholesky_inverse(f[1], upper))


# ---- LU and what is built on it ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7, 4), (2, 4, 9), (2, 2, 16, 16)])
def test_lu_factor_unpack(dtype, shape):
    a = torch.randn(*shape, generator=gen(5), dtype=torch.float64).to(dtype)
    LU, piv = torch.linalg.lu_factor(loom(a))
    LU0, piv0 = torch.linalg.lu_factor(a)
    assert piv.dtype == torch.int32 and piv.cpu().equal(piv0)
    check(LU, LU0)
    for got, want in zip(torch.linalg.lu(loom(a)), torch.linalg.lu(a)):
        check(got, want)
    for got, want in zip(torch.lu_unpack(LU, piv), torch.lu_unpack(LU0, piv0)):
        check(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(dtype, left, adjoint):
    a = general(3, 8, 8, dtype=dtype)
    b = rhs(3, 8, 2, dtype=dtype) if left else rhs(3, 2, 8, dtype=dtype)
    LU, piv = torch.linalg.lu_factor(a)
    check(torch.linalg.lu_solve(loom(LU), loom(piv), loom(b), left=left, adjoint=adjoint),
          torch.linalg.lu_solve(LU, piv, b, left=left, adjoint=adjoint))


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(dtype):
    a = general(4, 12, 12, dtype=dtype)
    b = rhs(4, 12, 3, dtype=dtype)
    check(torch.linalg.solve(loom(a), loom(b)), torch.linalg.solve(a, b))
    check(torch.linalg.solve(loom(a), loom(b[:, :, 0])), torch.linalg.solve(a, b[:, :, 0]))
    check(torch.linalg.solve(loom(a), loom(b.mT), left=False), torch.linalg.solve(a, b.mT, left=False))
    check(torch.linalg.solve(odd_layout(a), loom(b[0])), torch.linalg.solve(a, b[0]))
    check(torch.linalg.inv(loom(a)), torch.linalg.inv(a))
    check(torch.linalg.inv(odd_layout(a)), torch.linalg.inv(a))
    s = a / 4                                                # determinants of moderate size
    check(torch.linalg.det(loom(s)), torch.linalg.det(s))
    check(torch.det(odd_layout(s)), torch.det(s))
    for got, want in zip(torch.linalg.slogdet(loom(a)), torch.linalg.slogdet(a)):
        check(got, want)
    p = spd(3, 6, 6, dtype=dtype)
    check(torch.logdet(loom(p)), torch.logdet(p))


def test_out_forms():
    a, b = general(2, 5, 5), rhs(2, 5, 3)
    out = torch.empty(0, device="loom", dtype=torch.float64)
    torch.linalg.solve(loom(a), loom(b), out=out)
    check(out, torch.linalg.solve(a, b))
    L = torch.empty(2, 5, 5, device="loom", dtype=torch.float64)   # row-major out
    torch.linalg.cholesky(loom(spd(2, 5, 5)), out=L)
    check(L, torch.linalg.cholesky(spd(2, 5, 5)))
    inv = torch.empty(0, device="loom", dtype=torch.float64)
    torch.linalg.inv(loom(a), out=inv)
    check(inv, torch.linalg.inv(a))
    x = torch.empty(0, device="loom", dtype=torch.float64)
    torch.linalg.solve_triangular(loom(a), loom(b), upper=True, out=x)
    check(x, torch.linalg.solve_triangular(a, b, upper=True))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.linalg.solve(loom(a), loom(b), out=torch.empty(0, device="loom"))


def test_singular():
    a = general(3, 4, 4)
    a[1, :, 2] = 0.0                                     # column 3 of matrix 1 is zero
    LU, piv, info = torch.linalg.lu_factor_ex(loom(a))
    assert info.cpu().tolist() == torch.linalg.lu_factor_ex(a).info.tolist()
    assert info.cpu()[1].item() > 0 and info.cpu()[0].item() == 0
    _, info = torch.linalg.inv_ex(loom(a))
    assert info.cpu().tolist() == torch.linalg.inv_ex(a).info.tolist()
    with pytest.raises(torch.linalg.LinAlgError,
                       match=r"\(Batch element 1\): The diagonal element 3 is zero"):
        torch.linalg.inv(loom(a))
    with pytest.raises(torch.linalg.LinAlgError, match="input matrix is singular"):
        torch.linalg.solve(loom(a[1]), loom(rhs(4)))
    assert torch.linalg.det(loom(a)).cpu()[1].item() == 0.0
    sign, logabs = torch.linalg.slogdet(loom(a))
    assert sign.cpu()[1].item() == 0.0 and logabs.cpu()[1].item() == float("-inf")


# ---- gradients ---------------------------------------------------------------------------


def grads(fn, *inputs, device):
    xs = [t.detach().to(device).requires_grad_() for t in inputs]
    out = fn(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=device)
                .view_as(o)).sum() for o in outs if o.is_floating_point())
    loss.backward()
    return [out] + [x.grad for x in xs]


@pytest.mark.parametrize("name,fn,make", [
    ("cholesky", lambda a: torch.linalg.cholesky(a @ a.mT + torch.eye(6, dtype=a.dtype,
                                                 device=a.device)), lambda: [general(2, 6, 6)]),
    ("solve", torch.linalg.solve, lambda: [general(2, 6, 6), rhs(2, 6, 3)]),
    ("inv", torch.linalg.inv, lambda: [general(2, 6, 6)]),
    ("det", torch.linalg.det, lambda: [general(2, 6, 6) / 3]),
    ("slogdet", torch.linalg.slogdet, lambda: [general(2, 6, 6)]),
    ("solve_triangular", lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
     lambda: [general(2, 6, 6), rhs(2, 6, 3)]),
    ("lu_factor", lambda a: torch.linalg.lu_factor(a)[0], lambda: [general(2, 6, 6)]),
    ("cholesky_solve", lambda b, a: torch.cholesky_solve(b, torch.linalg.cholesky(a)),
     lambda: [rhs(2, 6, 3), spd(2, 6, 6)]),
])
def test_gradients(name, fn, make):
    inputs = make()
    got = grads(fn, *inputs, device="loom")
    want = grads(fn, *inputs, device="cpu")
    for g, w in zip(got, want):
        for gi, wi in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
            check(gi, wi)


# ---- thread-count independence ----------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import hashlib, torch
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, 24, 24, generator=g)
    a = (x @ x.mT / 24 + torch.eye(24)).to("loom")
    b = torch.randn(64, 24, 5, generator=g).to("loom")
    y = torch.randn(300, 300, generator=g)
    big = (y @ y.mT / 300 + torch.eye(300)).to("loom")    # the blocked Cholesky
    r = torch.randn(48, 12, 9, generator=g).to("loom")
    outs = [torch.linalg.cholesky(a), torch.linalg.solve(a, b), torch.linalg.inv(a),
            torch.linalg.det(a / 2), *torch.linalg.lu_factor(a),
            torch.linalg.solve_triangular(a, b, upper=True), torch.linalg.cholesky(big),
            *torch.geqrf(r), *torch.linalg.qr(r), *torch.linalg.eigh(a), *torch.linalg.svd(r)]
    h = hashlib.sha256()
    for t in outs:
        h.update(t.cpu().contiguous().numpy().tobytes())
    print(h.hexdigest())
""")


def run_script(threads):
    env = dict(os.environ, LOOM_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def test_result_independent_of_thread_count():
    assert run_script(1) == run_script(3)


# ---- empty matrices and batches --------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 4, 4)])
def test_empty(shape):
    a = torch.empty(shape, dtype=torch.float64)
    ops = [torch.linalg.cholesky, torch.linalg.inv, torch.linalg.det, torch.linalg.slogdet,
           torch.linalg.lu_factor, torch.linalg.qr, torch.linalg.eigh, torch.linalg.svd,
           lambda x: torch.linalg.solve_triangular(x, x, upper=True)]
    for op in ops:
        got, want = op(loom(a)), op(a)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert g.device.type == "loom" and g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w)
    assert torch.linalg.cholesky_ex(loom(a)).info.cpu().equal(torch.linalg.cholesky_ex(a).info)


@pytest.mark.parametrize("shape", [(300, 300), (2, 260, 260)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_blocked(shape, upper):
    """float32 from order 256 on runs by panels on the GEMM."""
    a = spd(*shape, dtype=torch.float32, seed=4)
    check(torch.linalg.cholesky(loom(a), upper=upper), torch.linalg.cholesky(a, upper=upper))
    bad = a.clone()
    bad[..., 200, 200] = -1.0                                    # fails in the second panel
    got, want = torch.linalg.cholesky_ex(loom(bad)), torch.linalg.cholesky_ex(bad)
    assert got.info.cpu().equal(want.info)
    with pytest.raises(torch.linalg.LinAlgError, match="order 201 is not positive-definite"):
        torch.linalg.cholesky(loom(bad))
