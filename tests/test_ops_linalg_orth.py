"""Orthogonal factorizations on loom against the CPU: geqrf, householder_product,
ormqr, qr (every mode), eigh/eigvalsh, svd/svdvals, what PyTorch composes from
them (pinv, matrix_rank, matrix_norm, cond), matrix_exp and lstsq; float32 and
float64, batched, tall, wide, rank-deficient and repeated-eigenvalue inputs;
gradients; nothing on the CPU fallback (thread-count independence is checked
in test_ops_linalg_decomp.py). Eigen- and singular vectors are defined up to
sign (and, for repeated values, up to a rotation): they are checked through
what they must satisfy and, where unique, against the CPU's up to sign."""
import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_fallback")

DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64).to(dtype)


def check(actual, expected):
    assert actual.device.type == "loom"
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, **tol(expected.dtype))


def loom(t):
    return t.to("loom")


def orthonormal_columns(q):
    q = q.cpu()
    eye = torch.eye(q.shape[-1], dtype=q.dtype).expand(*q.shape[:-2], -1, -1)
    torch.testing.assert_close(q.mT @ q, eye, **tol(q.dtype))


SHAPES = [(6, 6), (3, 9, 4), (2, 4, 9), (2, 2, 5, 5), (1, 1)]


# ---- QR ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_geqrf_householder_product(dtype, shape):
    a = randn(*shape, dtype=dtype)
    got, want = torch.geqrf(loom(a)), torch.geqrf(a)
    check(got[0], want[0])
    check(got[1], want[1])
    k = min(shape[-2:])
    if shape[-2] >= shape[-1]:
        check(torch.linalg.householder_product(got[0], got[1]),
              torch.linalg.householder_product(want[0], want[1]))
    check(torch.linalg.householder_product(got[0][..., :k], got[1][..., :k]),
          torch.linalg.householder_product(want[0][..., :k], want[1][..., :k]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dtype, shape, mode):
    a = randn(*shape, dtype=dtype, seed=2)
    (q, r), (q0, r0) = torch.linalg.qr(loom(a), mode=mode), torch.linalg.qr(a, mode=mode)
    check(r, r0)
    check(q, q0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr(dtype, left, transpose):
    a = randn(3, 7, 4, dtype=dtype, seed=3)
    c = randn(3, 7, 5, dtype=dtype, seed=4) if left else randn(3, 5, 7, dtype=dtype, seed=4)
    v, tau = torch.geqrf(a)
    check(torch.ormqr(loom(v), loom(tau), loom(c), left, transpose),
          torch.ormqr(v, tau, c, left, transpose))
    # A non-contiguous C.
    cl = loom(c.mT.contiguous()).mT[..., :]
    check(torch.ormqr(loom(v), loom(tau), cl, left, transpose),
          torch.ormqr(v, tau, c, left, transpose))


# ---- eigh --------------------------------------------------------------------------------


def symmetric(*shape, dtype=torch.float64, seed=0):
    x = randn(*shape, seed=seed)
    return (x + x.mT).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (7, 7), (3, 12, 12), (2, 2, 5, 5), (32, 16, 16)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, shape, uplo):
    a = symmetric(*shape, dtype=dtype, seed=5)
    # Only the named triangle is read.
    junk = a + (torch.triu(torch.ones_like(a), 1) if uplo == "L" else torch.tril(torch.ones_like(a), -1))
    w, v = torch.linalg.eigh(loom(junk), UPLO=uplo)
    w0, v0 = torch.linalg.eigh(a)
    check(w, w0)
    orthonormal_columns(v)
    torch.testing.assert_close((v @ torch.diag_embed(w) @ v.mT).cpu(), a, **tol(dtype))
    check(v.abs(), v0.abs())          # distinct eigenvalues: vectors unique up to sign
    check(torch.linalg.eigvalsh(loom(junk), UPLO=uplo), w0)


def test_eigh_repeated_and_zero():
    q, _ = torch.linalg.qr(randn(8, 8, seed=6))
    w = torch.tensor([-2.0, -2.0, 0.0, 0.0, 0.0, 1.0, 3.0, 3.0], dtype=torch.float64)
    a = q @ torch.diag(w) @ q.mT
    a = (a + a.mT) / 2
    got_w, got_v = torch.linalg.eigh(loom(a))
    check(got_w, w)
    orthonormal_columns(got_v)
    torch.testing.assert_close((got_v @ torch.diag_embed(got_w) @ got_v.mT).cpu(), a,
                               rtol=1e-9, atol=1e-9)
    check(torch.linalg.eigvalsh(loom(torch.zeros(3, 3))), torch.zeros(3))


# ---- SVD ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(32, 16, 16)])
@pytest.mark.parametrize("full", [False, True])
def test_svd(dtype, shape, full):
    a = randn(*shape, dtype=dtype, seed=7)
    u, s, vh = torch.linalg.svd(loom(a), full_matrices=full)
    u0, s0, vh0 = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == u0.shape and vh.shape == vh0.shape
    check(s, s0)
    orthonormal_columns(u)
    orthonormal_columns(vh.mT)
    k = min(shape[-2:])
    rebuilt = u[..., :k] @ torch.diag_embed(s).to(u.dtype) @ vh[..., :k, :]
    torch.testing.assert_close(rebuilt.cpu(), a, **tol(dtype))
    check(u[..., :k].abs(), u0[..., :k].abs())
    check(vh[..., :k, :].abs(), vh0[..., :k, :].abs())
    check(torch.linalg.svdvals(loom(a)), s0)


@pytest.mark.parametrize("full", [False, True])
def test_svd_rank_deficient(full):
    a = randn(2, 9, 3, seed=8) @ randn(2, 3, 6, seed=9)          # rank 3 of 6
    u, s, vh = torch.linalg.svd(loom(a), full_matrices=full)
    check(s, torch.linalg.svdvals(a))
    orthonormal_columns(u)
    orthonormal_columns(vh.mT)
    torch.testing.assert_close((u[..., :6] @ torch.diag_embed(s) @ vh[..., :6, :]).cpu(), a,
                               rtol=1e-9, atol=1e-9)
    assert torch.linalg.matrix_rank(loom(a)).cpu().tolist() == [3, 3]


@pytest.mark.parametrize("dtype", DTYPES)
def test_composites(dtype):
    a = randn(3, 6, 4, dtype=dtype, seed=10)
    sq = randn(3, 5, 5, dtype=dtype, seed=11)
    check(torch.linalg.pinv(loom(a)), torch.linalg.pinv(a))
    check(torch.linalg.matrix_norm(loom(a), ord=2), torch.linalg.matrix_norm(a, ord=2))
    check(torch.linalg.matrix_norm(loom(a), ord="nuc"), torch.linalg.matrix_norm(a, ord="nuc"))
    check(torch.linalg.cond(loom(sq)), torch.linalg.cond(sq))
    p = symmetric(5, 5, dtype=dtype, seed=12)
    check(torch.linalg.pinv(loom(p), hermitian=True), torch.linalg.pinv(p, hermitian=True))


def test_bad_arguments():
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.eigh(loom(torch.ones(3, 4)))
    with pytest.raises(RuntimeError, match="driver="):
        torch.linalg.svd(loom(torch.ones(3, 4)), driver="gesvd")
    with pytest.raises(RuntimeError, match="geqrf: input must have at least 2 dimensions"):
        torch.geqrf(loom(torch.ones(3)))
    with pytest.raises(RuntimeError, match="qr received unrecognized mode"):
        torch.linalg.qr(loom(torch.ones(3, 3)), mode="bad")


# ---- gradients ---------------------------------------------------------------------------


def grads(fn, x, device):
    x = x.detach().to(device).requires_grad_()
    out = fn(x)
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=device).view_as(out))
    return out, x.grad


@pytest.mark.parametrize("name,fn,make", [
    ("qr", lambda a: (lambda qr: qr[0].sum(-2) + qr[1].sum(-2))(torch.linalg.qr(a)),
     lambda: randn(2, 6, 4)),
    ("eigvalsh", torch.linalg.eigvalsh, lambda: symmetric(2, 6, 6)),
    ("eigh_gauge_free", lambda a: (lambda wv: wv[1] @ torch.diag_embed(wv[0] ** 2) @ wv[1].mT)(
        torch.linalg.eigh(a)), lambda: symmetric(2, 5, 5)),
    ("svdvals", torch.linalg.svdvals, lambda: randn(2, 7, 4)),
    ("pinv", torch.linalg.pinv, lambda: randn(2, 4, 6)),
    ("householder_product", lambda a: torch.linalg.householder_product(
        a, torch.linspace(0.5, 1.5, 3, dtype=a.dtype, device=a.device)), lambda: randn(6, 3)),
])
def test_gradients(name, fn, make):
    x = make()
    for got, want in zip(grads(fn, x, "loom"), grads(fn, x, "cpu")):
        check(got, want)


# ---- matrix_exp and lstsq ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.01, 1.0, 8.0])
def test_matrix_exp(dtype, scale):
    a = randn(3, 7, 7, dtype=dtype, seed=13) * scale / 3
    want = torch.linalg.matrix_exp(a)
    got = torch.linalg.matrix_exp(loom(a))
    assert got.device.type == "loom" and got.dtype == dtype
    torch.testing.assert_close(got.cpu() / want.abs().amax(), want / want.abs().amax(),
                               **tol(dtype))
    check(torch.matrix_exp(loom(a[0, :1, :1])), torch.matrix_exp(a[0, :1, :1]))


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shapes", [((6, 4), (6, 2)), ((3, 4, 6), (3, 4, 2)), ((2, 6, 4), (2, 6))])
def test_lstsq(driver, shapes):
    a, b = randn(*shapes[0], seed=14), randn(*shapes[1], seed=15)
    got = torch.linalg.lstsq(loom(a), loom(b), driver=driver)
    want = torch.linalg.lstsq(a, b, driver=driver)
    for g, w in zip(got, want):
        check(g, w)


def test_matrix_exp_and_lstsq_gradients():
    a = randn(5, 5, seed=16) / 2
    for got, want in zip(grads(torch.linalg.matrix_exp, a, "loom"),
                         grads(torch.linalg.matrix_exp, a, "cpu")):
        check(got, want)
    b = randn(6, 2, seed=17)
    fn = lambda x: torch.linalg.lstsq(x, b.to(x.device)).solution   # noqa: E731
    for got, want in zip(grads(fn, randn(6, 3, seed=18), "loom"),
                         grads(fn, randn(6, 3, seed=18), "cpu")):
        check(got, want)

