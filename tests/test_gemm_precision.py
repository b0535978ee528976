"""float32 matrix products under torch.set_float32_matmul_precision: what
each GEMM variant serves (kernels/gemm/gemm_select.c). "medium" rounds A
and B to bfloat16 (nearest, ties to even, as torch's conversion) and sums
the products in float32 on the variants with bf16 products (AVX512BF16's
vdpbf16ps, AMX tiles); the generic and AVX512 variants, and "high" without
AMX, stay exact float32; "highest" is exact everywhere."""

import pytest
import torch

from conftest import digest_with_threads, gemm_variant_here, run_python

BF16_HERE = gemm_variant_here("avx512bf16")
AMX_HERE = gemm_variant_here("amx")


@pytest.fixture
def precision():
    old = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(old)


def rounded(t):
    return t.bfloat16().double()


def truncated(t):
    """t cut to bfloat16 by dropping the low 16 bits (no rounding)."""
    return (t.view(torch.int32) & -65536).view(torch.float32).double()


def operands():
    """Products over several tiles and k blocks (k past 512, odd), either
    layout, batched and with a bias: (loom call, the same on CPU doubles
    given a rounding of the operands, magnitudes)."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(150, 1037, generator=g), torch.randn(1037, 230, generator=g)
    at = torch.randn(301, 90, generator=g).t()  # 90 x 301, transposed
    bt = torch.randn(70, 301, generator=g).t()  # 301 x 70
    x, w = torch.randn(3, 40, 260, generator=g), torch.randn(3, 260, 50, generator=g)
    bias = torch.randn(70, generator=g)
    L = lambda t: t.to("loom")
    d = lambda t: t.double()
    return [
        (lambda: L(a) @ L(b), lambda r: r(a) @ r(b), d(a).abs() @ d(b).abs()),
        (lambda: torch.addmm(L(bias), L(at), L(bt)), lambda r: d(bias) + r(at) @ r(bt),
         d(bias).abs() + d(at).abs() @ d(bt).abs()),
        (lambda: torch.bmm(L(x), L(w)), lambda r: r(x) @ r(w), d(x).abs() @ d(w).abs()),
    ]


@pytest.mark.skipif(not BF16_HERE, reason="loom's GEMM has no bf16 products on this CPU")
def test_medium_multiplies_operands_rounded_to_bf16(precision, no_fallback):
    precision("medium")
    for i, (fn, ref, mag) in enumerate(operands()):
        got = fn().cpu().double()
        near, exact, cut = ref(rounded), ref(lambda t: t.double()), ref(truncated)
        # the bf16-rounded product, to within float32 summation order
        assert ((got - near).abs() <= mag * 2.0 ** -20).all(), i
        # and not the exact product, nor one of truncated operands
        for other in (exact, cut):
            assert (got - near).abs().sum() * 100 < (got - other).abs().sum(), i


@pytest.mark.skipif(not BF16_HERE, reason="loom's GEMM has no bf16 products on this CPU")
def test_medium_rounds_ties_to_even(precision, no_fallback):
    # A @ I under "medium" is bf16(A) itself: halfway cases (1 + 2^-8 lies
    # between 1 and 1 + 2^-7), either sign, at several exponents
    g = torch.Generator().manual_seed(4)
    high7 = torch.randint(0, 128, (48, 40), generator=g, dtype=torch.int32)
    exponent = 110 + torch.arange(40, dtype=torch.int32) % 30
    bits = (exponent << 23) | (high7 << 16) | 0x8000  # exactly halfway
    a = bits.view(torch.float32) * torch.where(torch.arange(40) % 3 == 0, -1.0, 1.0)
    a[:, 30:] = torch.randn(48, 10, generator=g)  # and non-ties
    eye = torch.eye(40)
    precision("medium")
    got = (a.to("loom") @ eye.to("loom")).cpu()
    assert torch.equal(got, a.bfloat16().float())
    assert not torch.equal(got, a)


def test_medium_against_cpu(precision, no_fallback):
    # The CPU's "medium" may be exact or bf16: both lie within bf16
    # rounding (2^-8 of each product's operands) of loom's.
    precision("medium")
    for i, (fn, ref, mag) in enumerate(operands()):
        got = fn().cpu().double()
        cpu = ref(lambda t: t.float()).double()  # the CPU's float32 matmul
        assert ((got - cpu).abs() <= mag * 2.0 ** -7).all(), i


def test_high_and_highest(precision, no_fallback):
    # "highest" is exact float32; "high" too without AMX, and within 2^-15
    # on AMX's three bf16 passes.
    for prec in ("highest", "high"):
        precision(prec)
        for i, (fn, ref, mag) in enumerate(operands()):
            got = fn().cpu().double()
            tol = 2.0 ** -15 if prec == "high" and AMX_HERE else 2.0 ** -20
            assert ((got - ref(lambda t: t.double())).abs() <= mag * tol).all(), (prec, i)
    precision("highest")
    fn = operands()[0][0]
    first = fn().cpu()
    precision("medium")
    fn()
    precision("highest")
    assert torch.equal(fn().cpu(), first)  # nothing of "medium" stays behind
    if not AMX_HERE:
        precision("high")
        assert torch.equal(fn().cpu(), first)


# Each precision's bits, written out by a fresh process.
PRODUCTS = """
import torch
g = torch.Generator().manual_seed(5)
a, b = torch.randn(300, 1100, generator=g), torch.randn(1100, 390, generator=g)
la, lb = a.to("loom"), b.to("loom")
out = []
for prec in ("highest", "medium", "high"):
    torch.set_float32_matmul_precision(prec)
    out += [la @ lb, la[:, :517] @ lb[:517].t().contiguous().t(), (lb.t() @ la.t())]
"""


def test_medium_bits_independent_of_thread_count():
    code = PRODUCTS + "add(*out)\nprint('DIGEST', h.hexdigest())\n"
    one = digest_with_threads(code, 1)
    assert digest_with_threads(code, 2) == one


@pytest.mark.parametrize("env", [{"LOOM_CPU_FEATURES": "generic"}, {"LOOM_GEMM": "avx512"}])
def test_variants_without_bf16_products_stay_exact(env):
    # The generic and AVX512 variants serve every precision in exact float32:
    # "medium" and "high" give "highest"'s bits, which are within float32
    # summation order of the exact product.
    code = PRODUCTS + """
d = lambda t: t.double()
ex = [d(a) @ d(b), d(a[:, :517]) @ d(b[:517]), d(b).t() @ d(a).t()]
mag = [d(a).abs() @ d(b).abs(), d(a[:, :517]).abs() @ d(b[:517]).abs(), d(b).abs().t() @ d(a).abs().t()]
for i in range(3):
    got = out[i].cpu()
    assert ((d(got) - ex[i]).abs() <= mag[i] * 2.0 ** -20).all(), i
    assert torch.equal(out[3 + i].cpu(), got), ("medium", i)
    assert torch.equal(out[6 + i].cpu(), got), ("high", i)
print("OK")
"""
    proc = run_python(code, env=dict(env, LOOM_FALLBACK="error"))
    assert proc.stdout.strip().endswith("OK")
