"""Ops that used to run on the CPU fallback, now native on loom, against
the CPU: nextafter (float32/float64; 16-bit floats run on the counted CPU
fallback) and embedding_renorm_ (embedding with max_norm). Edge values,
broadcast and out= forms; nothing native may fall back to the CPU."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

INF, NAN = float("inf"), float("nan")
EDGE = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 1e-45, -1e-45, 3.4e38, 1e-300, 5e-324]


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nextafter_matches_cpu_bitwise(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.tensor(EDGE, dtype=dtype).repeat_interleave(len(EDGE)),
                   torch.randn(200, generator=g, dtype=dtype)])
    b = torch.cat([torch.tensor(EDGE, dtype=dtype).repeat(len(EDGE)),
                   torch.randn(200, generator=g, dtype=dtype)])
    want = torch.nextafter(a, b)
    got = torch.nextafter(a.to("loom"), b.to("loom")).cpu()
    assert got.dtype == dtype
    assert torch.equal(got.view(torch.int32 if dtype == torch.float32 else torch.int64),
                       want.view(torch.int32 if dtype == torch.float32 else torch.int64))
    # broadcast, out= and in-place
    x = torch.randn(4, 1, dtype=dtype, generator=g)
    y = torch.randn(1, 5, dtype=dtype, generator=g)
    out = torch.empty(4, 5, dtype=dtype, device="loom")
    torch.nextafter(x.to("loom"), y.to("loom"), out=out)
    assert torch.equal(out.cpu(), torch.nextafter(x, y))
    z = x.expand(4, 5).clone().to("loom")
    z.nextafter_(y.to("loom"))
    assert torch.equal(z.cpu(), torch.nextafter(x, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nextafter_16bit_runs_on_counted_fallback(dtype):
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    a = torch.tensor([0.0, 1.0, -1.0, 65504.0, INF, NAN]).to(dtype)
    b = torch.tensor([1.0, 2.0, -2.0, INF, 0.0, 1.0]).to(dtype)
    got = torch.nextafter(a.to("loom"), b.to("loom")).cpu()
    assert torch.equal(got.view(torch.int16), torch.nextafter(a, b).view(torch.int16))
    assert any("nextafter" in k for k in torch.loom.fallback_ops())


def test_nextafter_rejects_integers():
    with pytest.raises(RuntimeError, match="nextafter"):
        torch.nextafter(torch.ones(3, dtype=torch.long, device="loom"),
                        torch.ones(3, dtype=torch.long, device="loom"))


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, INF, 0.0])
def test_embedding_renorm_matches_cpu(dtype, norm_type):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(10, 7, generator=g, dtype=dtype) * 3
    w[4] = 0.01  # a named row already within max_norm stays as it is
    idx = torch.tensor([[1, 4, 1], [9, 0, 1]])  # repeats are renormed once
    want = w.clone()
    torch.embedding_renorm_(want, idx, 1.5, norm_type)
    got = w.to("loom")
    r = torch.embedding_renorm_(got, idx.to("loom"), 1.5, norm_type)
    assert r.data_ptr() == got.data_ptr()
    torch.testing.assert_close(got.cpu(), want)
    assert torch.equal(got.cpu()[[2, 3, 5, 6, 7, 8]], w[[2, 3, 5, 6, 7, 8]])
    assert not torch.equal(want[[0, 1, 9]], w[[0, 1, 9]])


@pytest.mark.usefixtures("no_fallback")
def test_embedding_max_norm_forward_and_gradient():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(12, 5, generator=g) * 4
    idx = torch.tensor([3, 7, 3, 11, 0])
    wl = w.to("loom").requires_grad_()
    wc = w.clone().requires_grad_()
    yl = F.embedding(idx.to("loom"), wl, max_norm=2.0)
    yc = F.embedding(idx, wc, max_norm=2.0)
    torch.testing.assert_close(yl.detach().cpu(), yc.detach())
    torch.testing.assert_close(wl.detach().cpu(), wc.detach())  # renormed in place
    gy = torch.randn(yc.shape, generator=g)
    yl.backward(gy.to("loom"))
    yc.backward(gy)
    torch.testing.assert_close(wl.grad.cpu(), wc.grad)
    # a strided weight (a column slice) renorms through its strides
    big = torch.randn(12, 10, generator=g)
    want = big.clone()
    torch.embedding_renorm_(want[:, ::2], idx, 1.0, 2.0)
    got = big.to("loom")
    torch.embedding_renorm_(got[:, ::2], idx.to("loom"), 1.0, 2.0)
    torch.testing.assert_close(got.cpu(), want)


def test_embedding_renorm_bad_input_names_op():
    w = torch.randn(4, 3, device="loom")
    with pytest.raises(IndexError, match="embedding_renorm_.*out of range"):
        torch.embedding_renorm_(w, torch.tensor([0, 9], device="loom"), 1.0, 2.0)
    with pytest.raises(RuntimeError, match="embedding_renorm_"):
        torch.embedding_renorm_(torch.randn(4, device="loom"),
                                torch.tensor([0], device="loom"), 1.0, 2.0)
    with pytest.raises(RuntimeError, match="embedding_renorm_"):
        torch.embedding_renorm_(w, torch.tensor([0.0], device="loom"), 1.0, 2.0)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logcumsumexp_matches_cpu(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 33, 4, generator=g, dtype=dtype) * 20
    for dim in (0, 1, -1):
        want = torch.logcumsumexp(x, dim)
        got = torch.logcumsumexp(x.to("loom"), dim).cpu()
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    # infinities, NaN and huge magnitudes along one row
    e = torch.tensor([[-INF, -INF, 0.0, INF, 1.0, INF],
                      [1e30, -1e30, NAN, 2.0, -INF, 3.0],
                      [-INF, 5.0, -INF, -INF, 5.0, 80.0]], dtype=dtype)
    torch.testing.assert_close(torch.logcumsumexp(e.to("loom"), 1).cpu(),
                               torch.logcumsumexp(e, 1), equal_nan=True, atol=0, rtol=0)
    # 0-d, empty, a transposed input and out=
    s = torch.tensor(2.5, dtype=dtype)
    assert torch.equal(torch.logcumsumexp(s.to("loom"), 0).cpu(), torch.logcumsumexp(s, 0))
    assert torch.logcumsumexp(torch.empty(0, 3, dtype=dtype, device="loom"), 0).shape == (0, 3)
    t = x[:, :, 0].t()
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.logcumsumexp(t.to("loom"), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(t, 1), atol=0, rtol=0)


@pytest.mark.usefixtures("no_fallback")
def test_logcumsumexp_gradient():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 9, generator=g, dtype=torch.float64)
    xl = x.to("loom").requires_grad_()
    xc = x.clone().requires_grad_()
    gy = torch.randn(4, 9, generator=g, dtype=torch.float64)
    torch.logcumsumexp(xl, 1).backward(gy.to("loom"))
    torch.logcumsumexp(xc, 1).backward(gy)
    torch.testing.assert_close(xl.grad.cpu(), xc.grad)


def test_logcumsumexp_rejects_integers():
    with pytest.raises(NotImplementedError, match="logcumsumexp"):
        torch.logcumsumexp(torch.arange(4, device="loom"), 0)


ERFCX_EDGE = [0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 3.9, 4.0, -6.0, -6.2, -26.0,
              -27.0, 26.0, 49.9, 50.0, 50.5, 1e3, 4e7, 6e7, 1e30, -1e30, INF, -INF, NAN]


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("fn", [torch.special.erfcx, torch.special.log_ndtr])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_erfcx_log_ndtr_match_cpu(fn, dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.tensor(ERFCX_EDGE, dtype=dtype),
                   torch.randn(400, generator=g, dtype=dtype) * 8,
                   torch.linspace(-30, 60, 901, dtype=dtype)])
    want = fn(x)
    got = fn(x.to("loom")).cpu()
    assert got.dtype == dtype
    # the CPU's table and expansions, in its order of operations
    torch.testing.assert_close(got, want, equal_nan=True, atol=0,
                               rtol=2 * torch.finfo(dtype).eps)
    # integer input promotes; out=; a strided view
    i = torch.arange(-5, 6)
    torch.testing.assert_close(fn(i.to("loom")).cpu(), fn(i))
    out = torch.empty(0, dtype=dtype, device="loom")
    fn(x.to("loom")[::3], out=out)
    torch.testing.assert_close(out.cpu(), want[::3], equal_nan=True, atol=0,
                               rtol=2 * torch.finfo(dtype).eps)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("fn", [torch.special.erfcx, torch.special.log_ndtr])
def test_erfcx_log_ndtr_gradients(fn):
    x = torch.linspace(-8, 8, 37, dtype=torch.float64)
    xl = x.to("loom").requires_grad_()
    xc = x.clone().requires_grad_()
    fn(xl).sum().backward()
    fn(xc).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p,weighted", [(1, False), (2, True)])
def test_multi_margin_loss_matches_cpu(dtype, reduction, p, weighted):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(13, 7, generator=g, dtype=dtype)
    y = torch.randint(0, 7, (13,), generator=g)
    w = torch.rand(7, generator=g, dtype=dtype) + 0.5 if weighted else None
    xl = x.to("loom").requires_grad_()
    xc = x.clone().requires_grad_()
    kw = dict(p=p, margin=0.7, reduction=reduction)
    lc = F.multi_margin_loss(xc, y, weight=w, **kw)
    ll = F.multi_margin_loss(xl, y.to("loom"), weight=None if w is None else w.to("loom"), **kw)
    assert ll.shape == lc.shape
    torch.testing.assert_close(ll.detach().cpu(), lc.detach(), atol=0, rtol=0)
    gy = torch.rand(lc.shape, generator=g, dtype=dtype)
    lc.backward(gy)
    ll.backward(gy.to("loom"))
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, atol=0, rtol=0)


@pytest.mark.usefixtures("no_fallback")
def test_multi_margin_loss_single_sample_and_errors():
    x = torch.tensor([0.3, -1.0, 2.0, 0.1])
    y = torch.tensor(2)
    for reduction in ("none", "mean", "sum"):
        want = F.multi_margin_loss(x, y, reduction=reduction, margin=3.0)
        got = F.multi_margin_loss(x.to("loom"), y.to("loom"), reduction=reduction, margin=3.0)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(IndexError, match="target out of range"):
        F.multi_margin_loss(torch.zeros(2, 3, device="loom"),
                            torch.tensor([0, 3], device="loom")).cpu()
    with pytest.raises(RuntimeError, match="only p == 1 and p == 2"):
        torch.ops.aten.multi_margin_loss(torch.zeros(2, 3, device="loom"),
                                         torch.tensor([0, 1], device="loom"), 3)
    with pytest.raises(RuntimeError, match="inconsistent target size"):
        F.multi_margin_loss(torch.zeros(2, 3, device="loom"), torch.tensor([0], device="loom"))


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_matches_cpu(dtype, reduction):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(9, 6, generator=g, dtype=dtype)
    y = torch.randint(0, 6, (9, 6), generator=g)
    y[torch.rand(9, 6, generator=g) < 0.3] = -1  # targets end at the first -1
    y[0] = -1  # a row with no targets
    y[1] = torch.arange(6)  # a row where every class is a target
    xl = x.to("loom").requires_grad_()
    xc = x.clone().requires_grad_()
    lc = F.multilabel_margin_loss(xc, y, reduction=reduction)
    ll = F.multilabel_margin_loss(xl, y.to("loom"), reduction=reduction)
    assert ll.shape == lc.shape
    torch.testing.assert_close(ll.detach().cpu(), lc.detach(), atol=0, rtol=0)
    out_c, ist_c = torch.ops.aten.multilabel_margin_loss_forward(x, y, 0)
    out_l, ist_l = torch.ops.aten.multilabel_margin_loss_forward(x.to("loom"), y.to("loom"), 0)
    assert torch.equal(ist_l.cpu(), ist_c)
    gy = torch.rand(lc.shape, generator=g, dtype=dtype)
    lc.backward(gy)
    ll.backward(gy.to("loom"))
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, atol=0, rtol=0)


@pytest.mark.usefixtures("no_fallback")
def test_multilabel_margin_loss_single_sample_and_errors():
    x = torch.tensor([0.1, 0.2, 0.4, 0.8])
    y = torch.tensor([3, 0, -1, 1])
    for reduction in ("none", "mean", "sum"):
        want = F.multilabel_margin_loss(x, y, reduction=reduction)
        got = F.multilabel_margin_loss(x.to("loom"), y.to("loom"), reduction=reduction)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(RuntimeError, match="inconsistent target size"):
        F.multilabel_margin_loss(torch.zeros(2, 3, device="loom"),
                                 torch.zeros(2, 2, dtype=torch.long, device="loom"))
    with pytest.raises(IndexError, match="target out of range"):
        F.multilabel_margin_loss(torch.zeros(1, 3, device="loom"),
                                 torch.tensor([[0, 5, -1]], device="loom")).cpu()


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 1.5, INF])
def test_cdist_pdist_forward_match_cpu(dtype, p):
    g = torch.Generator().manual_seed(8)
    x1 = torch.randn(2, 1, 7, 5, generator=g, dtype=dtype)
    x2 = torch.randn(3, 6, 5, generator=g, dtype=dtype)
    x2[0, 0] = x1[0, 0, 0]  # a zero distance
    want = torch.cdist(x1, x2, p=p, compute_mode="donot_use_mm_for_euclid_dist")
    got = torch.cdist(x1.to("loom"), x2.to("loom"), p=p,
                      compute_mode="donot_use_mm_for_euclid_dist").cpu()
    assert got.shape == want.shape == (2, 3, 7, 6)
    torch.testing.assert_close(got, want, rtol=4 * torch.finfo(dtype).eps, atol=0)
    x = torch.randn(9, 4, generator=g, dtype=dtype)
    x[3] = x[5]
    torch.testing.assert_close(F.pdist(x.to("loom"), p=p).cpu(), F.pdist(x, p=p),
                               rtol=4 * torch.finfo(dtype).eps, atol=0)


@pytest.mark.usefixtures("no_fallback")
def test_cdist_matrix_product_form_and_edges():
    g = torch.Generator().manual_seed(9)
    x1 = torch.randn(30, 8, generator=g)
    x2 = torch.randn(27, 8, generator=g)
    torch.testing.assert_close(torch.cdist(x1.to("loom"), x2.to("loom")).cpu(),
                               torch.cdist(x1, x2))
    assert torch.cdist(torch.empty(0, 3, device="loom"), torch.randn(4, 3).to("loom")).shape == (0, 4)
    assert torch.equal(torch.cdist(torch.empty(2, 0, device="loom"), torch.empty(3, 0).to("loom"),
                                   p=1.0).cpu(), torch.zeros(2, 3))
    assert F.pdist(torch.randn(1, 3).to("loom")).shape == (0,)
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.cdist(x1.to("loom"), x2.to("loom"), p=-1.0)
    with pytest.raises(RuntimeError, match="same number of columns"):
        torch.cdist(x1.to("loom"), x2[:, :3].to("loom"))


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF])
def test_cdist_pdist_gradients_match_cpu(dtype, p):
    g = torch.Generator().manual_seed(10)
    x1 = torch.randn(2, 5, 4, generator=g, dtype=dtype)
    x2 = torch.randn(1, 6, 4, generator=g, dtype=dtype)
    x2[0, 1] = x1[0, 2]  # a zero distance
    x2[0, 2, 0] = x1[1, 3, 0]  # a zero difference in one column
    mode = "donot_use_mm_for_euclid_dist"
    a, b = x1.to("loom").requires_grad_(), x2.to("loom").requires_grad_()
    ac, bc = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    gy = torch.randn(2, 5, 6, generator=g, dtype=dtype)
    torch.cdist(a, b, p=p, compute_mode=mode).backward(gy.to("loom"))
    torch.cdist(ac, bc, p=p, compute_mode=mode).backward(gy)
    tol = dict(rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6 if dtype == torch.float32 else 1e-12)
    torch.testing.assert_close(a.grad.cpu(), ac.grad, **tol)
    torch.testing.assert_close(b.grad.cpu(), bc.grad, **tol)
    x = torch.randn(7, 3, generator=g, dtype=dtype)
    x[4] = x[1]
    xl, xc = x.to("loom").requires_grad_(), x.clone().requires_grad_()
    gp = torch.randn(21, generator=g, dtype=dtype)
    F.pdist(xl, p=p).backward(gp.to("loom"))
    F.pdist(xc, p=p).backward(gp)
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, **tol)
