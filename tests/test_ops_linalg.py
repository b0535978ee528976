"""Matrix products on loom against the CPU: mm, addmm, bmm, baddbmm,
matmul (every broadcasting case), linear, dot, vdot, mv, addmv, outer, addr,
einsum; odd shapes (1, 7, 63, 513), transposed and sliced operands, fp32,
bf16, fp16 (native) and fp64; autograd; bad input; independence of the
thread count and agreement of every GEMM variant."""
import hashlib
import os
import subprocess
import sys
import textwrap


import pytest
import torch
import torch.nn.functional as F
from conftest import gemm_variant_here

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
SIZES = [1, 7, 63, 513]


def tol(dtype, k):
    """Both sides accumulate in fp32 (fp64) in different orders, then round."""
    root = max(1.0, k) ** 0.5
    return {torch.float32: dict(rtol=1e-4, atol=1e-5 * root),
            torch.float64: dict(rtol=1e-10, atol=1e-10 * root),
            torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2 * root),
            torch.float16: dict(rtol=2e-3, atol=1e-3 * root)}[dtype]


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def on_loom(*ts):
    return [t.to("loom") for t in ts]


def check(actual, expected, dtype, k):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, **tol(dtype, k))


def layout(t, how):
    """`t` (a CPU matrix) as a loom tensor stored `how`: contiguous,
    transposed (column-major), or a strided slice of a larger buffer."""
    if how == "contig":
        return t.to("loom")
    if how == "trans":
        return t.t().contiguous().to("loom").t()
    big = torch.zeros(t.shape[0] * 2, t.shape[1] + 3, dtype=t.dtype)
    big[::2, 1:t.shape[1] + 1] = t
    return big.to("loom")[::2, 1:t.shape[1] + 1]


# ---- mm and friends -----------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [
    (m, n, k) for m in SIZES for n in SIZES for k in SIZES
    if m * n * k <= 513 * 513 * 63])      # larger ones add time, not coverage
def test_mm_odd_shapes(m, n, k):
    a, b = rand(m, k, seed=1), rand(k, n, seed=2)
    hows = ["contig", "trans", "slice"]
    la = layout(a, hows[(m + k) % 3])
    lb = layout(b, hows[(n + k) % 3])
    check(torch.mm(la, lb), a @ b, torch.float32, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ha,hb", [("contig", "contig"), ("trans", "contig"),
                                   ("contig", "trans"), ("slice", "trans")])
def test_mm_dtypes_layouts(dtype, ha, hb):
    a, b = rand(37, 129, dtype=dtype, seed=3), rand(129, 70, dtype=dtype, seed=4)
    got = torch.mm(layout(a, ha), layout(b, hb))
    check(got, a @ b, dtype, 129)


def test_mm_transposed_output_and_out():
    a, b = rand(20, 30), rand(30, 40)
    la, lb = on_loom(a, b)
    out = torch.empty(40, 20, device="loom").t()
    torch.mm(la, lb, out=out)
    check(out, a @ b, torch.float32, 30)
    out2 = torch.empty(0, device="loom")
    torch.mm(la, lb, out=out2)
    check(out2, a @ b, torch.float32, 30)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_addmm_alpha_beta_broadcast(dtype):
    a, b = rand(33, 65, dtype=dtype, seed=5), rand(65, 17, dtype=dtype, seed=6)
    for bias in (rand(17, dtype=dtype, seed=7), rand(33, 1, dtype=dtype, seed=8),
                 rand(33, 17, dtype=dtype, seed=9)):
        la, lb, lbias = on_loom(a, b, bias)
        for alpha, beta in ((1, 1), (0.5, 2.0), (2, 0)):
            got = torch.addmm(lbias, la, lb, alpha=alpha, beta=beta)
            check(got, torch.addmm(bias, a, b, alpha=alpha, beta=beta), dtype, 65)


def test_addmm_beta_zero_ignores_nan():
    a, b = rand(5, 6), rand(6, 7)
    bias = torch.full((5, 7), float("nan"))
    got = torch.addmm(bias.to("loom"), a.to("loom"), b.to("loom"), beta=0)
    assert not torch.isnan(got.cpu()).any()
    check(got, a @ b, torch.float32, 6)


def test_addmm_inplace():
    a, b, c = rand(9, 10), rand(10, 11), rand(9, 11)
    la, lb, lc = on_loom(a, b, c)
    lc.addmm_(la, lb, beta=0.5, alpha=3)
    check(lc, torch.addmm(c, a, b, beta=0.5, alpha=3), torch.float32, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_baddbmm(dtype):
    a, b = rand(5, 31, 40, dtype=dtype, seed=10), rand(5, 40, 9, dtype=dtype, seed=11)
    la, lb = on_loom(a, b)
    check(torch.bmm(la, lb), torch.bmm(a, b), dtype, 40)
    check(torch.bmm(la.transpose(1, 2).contiguous().transpose(1, 2), lb[:, :, :]),
          torch.bmm(a, b), dtype, 40)
    c = rand(31, 9, dtype=dtype, seed=12)
    check(torch.baddbmm(c.to("loom"), la, lb, beta=0.5, alpha=2),
          torch.baddbmm(c, a, b, beta=0.5, alpha=2), dtype, 40)
    c3 = rand(5, 31, 9, dtype=dtype, seed=13)
    lc3 = c3.to("loom")
    lc3.baddbmm_(la, lb)
    check(lc3, torch.baddbmm(c3, a, b), dtype, 40)
    # addbmm sums the batch: one GEMM over k = batch x 40
    check(torch.addbmm(c.to("loom"), la, lb, beta=0.5, alpha=2),
          torch.addbmm(c, a, b, beta=0.5, alpha=2), dtype, 200)
    check(torch.addbmm(c[0].to("loom"), la.transpose(1, 2).contiguous().transpose(1, 2), lb),
          torch.addbmm(c[0], a, b), dtype, 200)
    lc = c.to("loom")
    lc.addbmm_(la, lb)
    check(lc, torch.addbmm(c, a, b), dtype, 200)


@pytest.mark.parametrize("sa,sb", [
    ((7,), (7,)), ((5, 7), (7,)), ((7,), (7, 3)), ((4, 5, 7), (7,)),
    ((7,), (4, 7, 3)), ((4, 5, 7), (7, 3)), ((5, 7), (4, 7, 3)),
    ((2, 1, 5, 7), (3, 7, 6)), ((2, 3, 5, 7), (2, 3, 7, 6)), ((1, 63), (63, 1)),
])
def test_matmul_broadcasting(sa, sb):
    a, b = rand(*sa, seed=14), rand(*sb, seed=15)
    la, lb = on_loom(a, b)
    check(torch.matmul(la, lb), torch.matmul(a, b), torch.float32, sa[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 63), (3, 5, 63), (1, 63)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_backward(dtype, shape, bias):
    x = rand(*shape, dtype=dtype, seed=16).requires_grad_()
    w = rand(33, 63, dtype=dtype, seed=17).requires_grad_()
    b = rand(33, dtype=dtype, seed=18).requires_grad_() if bias else None
    lx = x.detach().to("loom").requires_grad_()
    lw = w.detach().to("loom").requires_grad_()
    lb = b.detach().to("loom").requires_grad_() if bias else None
    y, ly = F.linear(x, w, b), F.linear(lx, lw, lb)
    check(ly, y, dtype, 63)
    g = rand(*y.shape, dtype=dtype, seed=19)
    y.backward(g)
    ly.backward(g.to("loom"))
    check(lx.grad, x.grad, dtype, 33)
    k = 1
    for s in shape[:-1]:
        k *= s
    check(lw.grad, w.grad, dtype, k)
    if bias:
        check(lb.grad, b.grad, dtype, k)


def test_mm_backward_uses_transposed_views():
    a = rand(63, 7, seed=20).requires_grad_()
    b = rand(7, 513, seed=21).requires_grad_()
    la = a.detach().to("loom").requires_grad_()
    lb = b.detach().to("loom").requires_grad_()
    g = rand(63, 513, seed=22)
    (a @ b).backward(g)
    (la @ lb).backward(g.to("loom"))
    check(la.grad, a.grad, torch.float32, 513)
    check(lb.grad, b.grad, torch.float32, 63)


# ---- vectors ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_products(dtype):
    m, k = 63, 513
    A, x, y = rand(m, k, dtype=dtype, seed=23), rand(k, dtype=dtype, seed=24), rand(m, dtype=dtype, seed=25)
    lA, lx, ly = on_loom(A, x, y)
    check(torch.mv(lA, lx), torch.mv(A, x), dtype, k)
    check(torch.mv(lA.t().contiguous().t(), lx), torch.mv(A, x), dtype, k)
    check(torch.addmv(ly, lA, lx, beta=0.5, alpha=2), torch.addmv(y, A, x, beta=0.5, alpha=2), dtype, k)
    check(torch.dot(lx, lx), torch.dot(x, x), dtype, k)
    check(torch.vdot(lx[:-1:2], lx[1::2]), torch.vdot(x[:-1:2], x[1::2]), dtype, k)
    check(torch.outer(ly, lx), torch.outer(y, x), dtype, 1)
    c = rand(m, k, dtype=dtype, seed=26)
    check(torch.addr(c.to("loom"), ly, lx, beta=2, alpha=0.5),
          torch.addr(c, y, x, beta=2, alpha=0.5), dtype, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_cross(dtype):
    a = rand(4, 3, 5, seed=20).to(dtype) * (10 if dtype == torch.int64 else 1)
    b = rand(1, 3, 5, seed=21).to(dtype) * (10 if dtype == torch.int64 else 1)
    exact = dtype == torch.int64
    tol_args = dict(rtol=0, atol=0) if exact else dict(rtol=1e-5, atol=1e-6)
    for fn in [lambda x, y: torch.linalg.cross(x, y, dim=1), lambda x, y: torch.cross(x, y, dim=1),
               lambda x, y: torch.linalg.cross(x.transpose(1, 2), y.transpose(1, 2))]:
        torch.testing.assert_close(fn(a.to("loom"), b.to("loom")).cpu(), fn(a, b), **tol_args)
    for bad in [lambda d: torch.linalg.cross(a.to(d), a[:, :2].to(d), dim=1),
                lambda d: torch.linalg.cross(a.to(d), a[0].to(d))]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


def test_einsum():
    a, b = rand(3, 5, 7, seed=27), rand(3, 7, 4, seed=28)
    la, lb = on_loom(a, b)
    for eq, args in (("bij,bjk->bik", (a, b)), ("bij,bjk->ik", (a, b)),
                     ("bij->bji", (a,)), ("bij,bij->b", (a, a))):
        largs = [t.to("loom") for t in args]
        check(torch.einsum(eq, *largs), torch.einsum(eq, *args), torch.float32, 21)


def test_empty_and_k_zero():
    la, lb = torch.empty(0, 5, device="loom"), torch.empty(5, 3, device="loom")
    assert torch.mm(la, lb).shape == (0, 3)
    z = torch.mm(torch.empty(4, 0, device="loom"), torch.empty(0, 3, device="loom"))
    assert torch.equal(z.cpu(), torch.zeros(4, 3))
    c = rand(4, 3)
    got = torch.addmm(c.to("loom"), torch.empty(4, 0, device="loom"),
                      torch.empty(0, 3, device="loom"), beta=2)
    check(got, 2 * c, torch.float32, 1)


# ---- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize("fn", [
    lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)),
    lambda d: torch.mm(torch.ones(2, 3, 1, device=d), torch.ones(3, 5, device=d)),
    lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(3, 5, dtype=torch.float64, device=d)),
    lambda d: torch.bmm(torch.ones(2, 3, device=d), torch.ones(3, 5, device=d)),
    lambda d: torch.bmm(torch.ones(2, 2, 3, device=d), torch.ones(3, 3, 5, device=d)),
    lambda d: torch.addmm(torch.ones(3, 3, device=d), torch.ones(2, 3, device=d), torch.ones(3, 5, device=d)),
    lambda d: torch.mv(torch.ones(2, 3, device=d), torch.ones(4, device=d)),
    lambda d: torch.dot(torch.ones(3, device=d), torch.ones(4, device=d)),
    lambda d: torch.dot(torch.ones(3, 1, device=d), torch.ones(3, device=d)),
    lambda d: torch.matmul(torch.ones(2, 3, 4, device=d), torch.ones(5, 6, device=d)),
    lambda d: torch.addr(torch.ones(3, 3, device=d), torch.ones(2, 1, device=d), torch.ones(3, device=d)),
])
def test_bad_input_matches_cpu(fn):
    with pytest.raises(Exception) as cpu_err:
        fn("cpu")
    with pytest.raises(type(cpu_err.value)):
        fn("loom")


def test_mixed_devices_raise():
    with pytest.raises(RuntimeError):
        torch.mm(torch.ones(2, 3, device="loom"), torch.ones(3, 2))


# ---- determinism and variants ------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import hashlib, torch
    g = torch.Generator().manual_seed(0)
    outs = []
    # the second product's tiles are as wide as C and pack their own A
    # (rows 4 KB apart are not read in place)
    for m, k, n in ((300, 700, 513), (300, 1024, 200)):
        a = torch.randn(m, k, generator=g)
        b = torch.randn(k, n, generator=g)
        for dt in (torch.float32, torch.bfloat16):
            la, lb = a.to(dt).to("loom"), b.to(dt).to("loom")
            outs.append(torch.mm(la, lb).cpu())
            outs.append(torch.mm(la.t().contiguous().t(), lb[:, :]).cpu())
            ref = a.to(dt).float() @ b.to(dt).float()
            for out in outs[-2:]:
                err = (out.float() - ref).abs().max().item()
                assert err < (1e-3 if dt == torch.float32 else 0.5), (dt, m, k, n, err)
    print(hashlib.sha256(b"".join(o.view(torch.uint8).numpy().tobytes() for o in outs)).hexdigest())
""")


def run_script(env_extra):
    env = dict(os.environ, **env_extra)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def test_result_independent_of_thread_count():
    assert run_script({"LOOM_NUM_THREADS": "1"}) == run_script({"LOOM_NUM_THREADS": "2"})


@pytest.mark.parametrize("variant", ["generic", "avx512", "avx512bf16", "amx"])
def test_every_gemm_variant_is_correct(variant):
    # The script checks each result against the CPU itself.
    run_script({"LOOM_GEMM": variant})


def amx_here():
    """Whether loom's GEMM runs on AMX."""
    return gemm_variant_here("amx")


@pytest.fixture
def matmul_precision():
    old = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(old)


def test_float32_matmul_precision(matmul_precision):
    # "medium" multiplies float32 as bfloat16 on AMX and AVX512-BF16 (as
    # CPU eager's oneDNN does on AMX); "high" on AMX as three products of
    # bfloat16 high and low parts (about 16 bits of each operand); "highest"
    # in float32. Elsewhere they are float32 (tests/test_gemm_precision.py).
    # Convolutions, matrix-vector and outer products are not matrix
    # products here (nor on the CPU).
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(70, 600, generator=g), torch.randn(600, 45, generator=g)
    bias, bat = torch.randn(70, generator=g), torch.randn(3, 20, 600, generator=g)
    x, w = torch.randn(2, 8, 9, 9, generator=g), torch.randn(4, 8, 3, 3, generator=g)
    la, lb, lbias, lbat = (t.to("loom") for t in (a, b, bias, bat))
    d = lambda t: t.double()
    r = lambda t: t.bfloat16().double()
    cases = [  # loom product, exact, with operands rounded to bfloat16, magnitudes
        (lambda: la @ lb, d(a) @ d(b), r(a) @ r(b), d(a).abs() @ d(b).abs()),
        (lambda: torch.addmm(lbias, lb.t(), la.t()), d(bias) + d(b).t() @ d(a).t(),
         d(bias) + r(b).t() @ r(a).t(), d(bias).abs() + d(b).abs().t() @ d(a).abs().t()),
        (lambda: torch.nn.functional.linear(lbat, la), d(bat) @ d(a).t(), r(bat) @ r(a).t(),
         d(bat).abs() @ d(a).abs().t()),
    ]
    amx, bf16 = amx_here(), gemm_variant_here("avx512bf16")
    conv_ref = vector_ref = None
    for prec in ("highest", "medium", "high"):
        matmul_precision(prec)
        for fn, exact, rounded, mag in cases:
            got = fn().cpu().double()
            if prec == "medium" and bf16:
                assert ((got - rounded).abs() <= mag * 2.0 ** -20).all(), prec
                assert ((got - exact).abs() > mag * 2.0 ** -14).any(), prec
            elif prec == "high" and amx:
                assert ((got - exact).abs() <= mag * 2.0 ** -15).all(), prec
                assert ((got - rounded).abs() > mag * 2.0 ** -14).any(), prec
            else:
                assert ((got - exact).abs() <= mag * 2.0 ** -20).all(), prec
        conv = torch.nn.functional.conv2d(x.to("loom"), w.to("loom")).cpu()
        conv_ref = conv if conv_ref is None else conv_ref
        assert torch.equal(conv, conv_ref), prec
        vector = [torch.addr(la[:, :45], la[:, 0], lb[0]), torch.addmv(lbias, la, lb[:, 0]),
                  torch.outer(la[:, 0], lb[0])]
        vector_ref = vector_ref if prec != "highest" else vector
        for v, ref in zip(vector, vector_ref):
            assert torch.equal(v.cpu(), ref.cpu()), prec
