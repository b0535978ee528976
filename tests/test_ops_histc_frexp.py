"""histc, histogram and frexp native on loom, against the CPU: histc and
unweighted histograms bit for bit (the CPU's bin selection in the element
type; the CPU's bin edges), weighted ones to rounding (the CPU adds per
thread), frexp bit for bit for every float dtype. Nothing may fall back;
bad input raises naming the op, as on the CPU."""
import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

INF, NAN = float("inf"), float("nan")


def sample(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=dtype) * 3
    # the bounds themselves, values next to them, outside and infinite
    x[:8] = torch.tensor([-2.0, 2.0, 7.5, -1e30, 1e30, INF, -INF, 0.0], dtype=dtype)
    x[8:10] = torch.nextafter(torch.tensor([-2.0, 2.0], dtype=dtype),
                              torch.tensor([-INF, INF], dtype=dtype))
    return x


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bins,lo,hi", [(100, -2, 2), (7, -2.0, 2.0), (1, -1, 1),
                                        (33, -0.3, 2.9), (1000, -5, 5)])
def test_histc_matches_cpu_bitwise(dtype, bins, lo, hi):
    x = sample(200_003, dtype, bins)  # several blocks of 65536
    want = torch.histc(x, bins, lo, hi)
    got = torch.histc(x.to("loom"), bins, lo, hi)
    assert got.device.type == "loom" and got.dtype == dtype
    assert torch.equal(got.cpu(), want)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_range_from_data_out_and_views(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 41, generator=g, dtype=dtype)
    # min == max: the data's own range; a constant input widens by 1
    assert torch.equal(torch.histc(x.to("loom"), 13).cpu(), torch.histc(x, 13))
    c = torch.full((5,), 2.5, dtype=dtype)
    assert torch.equal(torch.histc(c.to("loom"), 4, 3, 3).cpu(), torch.histc(c, 4, 3, 3))
    # a transposed (strided) input, out=, an empty input
    t = x.t()
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.histc(t.to("loom"), 9, -1, 1.5, out=out)
    assert torch.equal(out.cpu(), torch.histc(t, 9, -1, 1.5))
    e = torch.histc(torch.empty(0, dtype=dtype, device="loom"), 6)
    assert torch.equal(e.cpu(), torch.histc(torch.empty(0, dtype=dtype), 6))


def test_histc_bad_input_names_op():
    x = torch.randn(10, device="loom")
    with pytest.raises(NotImplementedError, match="histc"):
        torch.histc(torch.arange(5, device="loom"), 3)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, 0)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, 3, 2, 1)
    with pytest.raises(RuntimeError, match="histc: range of .* is not finite"):
        torch.histc(x, 3, -INF, 1)
    with pytest.raises(RuntimeError, match="histc: range of .* is not finite"):
        torch.histc(torch.tensor([1.0, NAN], device="loom"), 3)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", [dict(bins=10), dict(bins=13, range=(-1.0, 1.5)),
                                dict(bins=5, density=True), dict(bins=1),
                                dict(bins=64, range=(-2.0, 2.0))])
def test_histogram_bin_count_matches_cpu(dtype, kw):
    x = sample(70_001, dtype, 3)
    x = x[x.isfinite()]
    h1, e1 = torch.histogram(x, **kw)
    h2, e2 = torch.histogram(x.to("loom"), **kw)
    assert torch.equal(e2.cpu(), e1)  # the CPU's linspace, bit for bit
    assert torch.equal(h2.cpu(), h1)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_edges_weights_and_out(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3000, generator=g, dtype=dtype)
    edges = torch.tensor([-3.0, -1.0, 0.0, 0.5, 0.5001, 2.0], dtype=dtype)
    x[:6] = edges  # values on every edge
    h1, e1 = torch.histogram(x, edges)
    h2, e2 = torch.histogram(x.to("loom"), edges.to("loom"))
    assert torch.equal(h2.cpu(), h1) and torch.equal(e2.cpu(), e1)
    w = torch.rand(3000, generator=g, dtype=dtype)
    for density in (False, True):
        h1, _ = torch.histogram(x, edges, weight=w, density=density)
        h2, _ = torch.histogram(x.to("loom"), edges.to("loom"), weight=w.to("loom"),
                                density=density)
        torch.testing.assert_close(h2.cpu(), h1)
        h1, _ = torch.histogram(x, 8, weight=w, density=density)
        h2, _ = torch.histogram(x.to("loom"), 8, weight=w.to("loom"), density=density)
        torch.testing.assert_close(h2.cpu(), h1)
    hist = torch.empty(0, dtype=dtype, device="loom")
    be = torch.empty(0, dtype=dtype, device="loom")
    torch.histogram(x.to("loom"), 6, range=(-1.0, 1.0), out=(hist, be))
    h1, e1 = torch.histogram(x, 6, range=(-1.0, 1.0))
    assert torch.equal(hist.cpu(), h1) and torch.equal(be.cpu(), e1)
    # an empty input: numpy's default range [0, 1]
    h1, e1 = torch.histogram(torch.empty(0, dtype=dtype), 4)
    h2, e2 = torch.histogram(torch.empty(0, dtype=dtype, device="loom"), 4)
    assert torch.equal(h2.cpu(), h1) and torch.equal(e2.cpu(), e1)


def test_histogram_bad_input_names_op():
    x = torch.randn(10, device="loom")
    with pytest.raises(RuntimeError, match="histogram.*same dtype"):
        torch.histogram(x, torch.tensor([0.0, 1.0], dtype=torch.float64, device="loom"))
    with pytest.raises(RuntimeError, match="histogramdd: if weight tensor is provided"):
        torch.histogram(x, 3, weight=torch.ones(4, device="loom"))
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        torch.histogram(x, 3, range=(1.0, 0.0))


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frexp_matches_cpu_bitwise(dtype):
    g = torch.Generator().manual_seed(5)
    edge = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, INF, -INF, NAN, 1e-45, 5e-324, 3e38,
                         -6e-8, 65504.0])
    x = torch.cat([edge, torch.randn(2000, generator=g, dtype=torch.float64)
                   * torch.exp2(torch.randint(-60, 60, (2000,), generator=g).double())]).to(dtype)
    m1, e1 = torch.frexp(x)
    m2, e2 = torch.frexp(x.to("loom"))
    assert m2.dtype == dtype and e2.dtype == torch.int32
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    assert torch.equal(m2.cpu().view(bits), m1.view(bits))
    assert torch.equal(e2.cpu(), e1)
    # out=, a strided input, broadcast into the outputs
    xs = x[:1000].reshape(20, 50).t()
    m = torch.empty(0, dtype=dtype, device="loom")
    e = torch.empty(0, dtype=torch.int32, device="loom")
    torch.frexp(xs.to("loom"), out=(m, e))
    mc, ec = torch.frexp(xs)
    assert torch.equal(m.cpu().view(bits), mc.view(bits)) and torch.equal(e.cpu(), ec)


def test_frexp_bad_input_names_op():
    with pytest.raises(RuntimeError, match="frexp.*floating-point"):
        torch.frexp(torch.arange(3, device="loom"))
    x = torch.randn(3, device="loom")
    with pytest.raises(RuntimeError, match="frexp.*exponent to have int dtype"):
        torch.frexp(x, out=(torch.empty(3, device="loom"),
                            torch.empty(3, dtype=torch.long, device="loom")))
    with pytest.raises(RuntimeError, match="frexp.*mantissa to have dtype"):
        torch.frexp(x, out=(torch.empty(3, dtype=torch.float64, device="loom"),
                            torch.empty(3, dtype=torch.int32, device="loom")))
