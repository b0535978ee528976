"""fp32 convolutions over channels-last tensors equal the CPU's, forward and
both gradients, laid out as the CPU lays them out: the channels-last rows
(1x1 windows and strided ones: a GEMM of each position's taps), the
Winograd and padded-row planes read from and written to channels-last
memory, over strides, padding, dilation, groups, bias and mixed layouts;
bitwise the same with 1 and 2 threads."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last

# (n, c_in, c_out, kernel, stride, padding, dilation, groups, h, w)
CASES = [
    (2, 32, 64, 1, 2, 0, 1, 1, 16, 16),   # the shortcut: 1x1 of stride 2
    (2, 16, 24, 1, 1, 0, 1, 1, 7, 9),     # 1x1 of stride 1: the image's rows
    (2, 32, 64, 3, 2, 1, 1, 1, 16, 15),   # 3x3 of stride 2
    (3, 12, 16, 5, 3, 2, 1, 1, 13, 14),   # 5x5 of stride 3
    (2, 16, 32, 3, 2, 2, 2, 1, 11, 12),   # dilated and strided
    (2, 16, 16, 3, 1, 1, 1, 1, 12, 12),   # Winograd's planes
    (2, 3, 32, 3, 1, 1, 1, 1, 20, 20),    # few channels: padded rows
    (16, 3, 8, 3, 1, 1, 1, 1, 32, 32),    # padded rows, dy's rows a 4 KB multiple apart: moved
    (2, 16, 32, 3, 1, 2, 2, 1, 10, 10),   # dilated, stride 1
    (2, 16, 32, 3, 2, 1, 1, 4, 12, 12),   # groups
    (2, 8, 16, 2, 1, 0, 1, 1, 6, 5),      # even window, no padding
]


def _run(dev, x, w, b, go_seed, **kw):
    xd = x.to(dev).detach().requires_grad_()
    wd = w.to(dev).detach().requires_grad_()
    bd = b.to(dev).detach().requires_grad_() if b is not None else None
    y = F.conv2d(xd, wd, bd, **kw)
    go = torch.randn(y.shape, generator=torch.Generator().manual_seed(go_seed))
    go = go.contiguous(memory_format=CL if x.is_contiguous(memory_format=CL) else
                       torch.contiguous_format).to(dev)
    y.backward(go)
    return [y, xd.grad, wd.grad] + ([bd.grad] if bd is not None else [])


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout", ["cl", "cl_input", "cl_weight"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_conv2d_channels_last_matches_cpu(case, layout, bias):
    n, ci, co, k, s, p, d, groups, h, wd = case
    g = torch.Generator().manual_seed(hash(case) % 1000)
    x = torch.randn(n, ci, h, wd, generator=g)
    w = torch.randn(co, ci // groups, k, k, generator=g)
    b = torch.randn(co, generator=g) if bias else None
    if layout in ("cl", "cl_input"):
        x = x.contiguous(memory_format=CL)
    if layout in ("cl", "cl_weight"):
        w = w.contiguous(memory_format=CL)
    kw = dict(stride=s, padding=p, dilation=d, groups=groups)
    cpu = _run("cpu", x, w, b, 1, **kw)
    loom = _run("loom", x, w, b, 1, **kw)
    for name, c, l in zip(["out", "grad_input", "grad_weight", "grad_bias"], cpu, loom):
        assert l.stride() == c.stride(), (name, l.stride(), c.stride())
        torch.testing.assert_close(l.cpu(), c, rtol=1e-4, atol=1e-4, msg=name)


def test_conv3d_channels_last_3d_matches_cpu():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 6, 7, 8, generator=g).contiguous(memory_format=torch.channels_last_3d)
    w = torch.randn(16, 8, 3, 3, 3, generator=g).contiguous(
        memory_format=torch.channels_last_3d)
    for kw in (dict(stride=2, padding=1), dict(stride=1, padding=0), dict(stride=(1, 2, 2))):
        res = {}
        for dev in ("cpu", "loom"):
            xd, wd = x.to(dev).detach().requires_grad_(), w.to(dev).detach().requires_grad_()
            y = F.conv3d(xd, wd, **kw)
            y.backward(torch.ones_like(y))
            res[dev] = (y, xd.grad, wd.grad)
        for c, l in zip(res["cpu"], res["loom"]):
            assert l.stride() == c.stride()
            torch.testing.assert_close(l.cpu(), c, rtol=1e-4, atol=1e-4)


def test_conv_channels_last_thread_count_independent():
    code = """
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    CL = torch.channels_last
    outs = []
    for ci, co, k, s, p in [(32, 64, 1, 2, 0), (24, 40, 3, 2, 1), (16, 16, 3, 1, 1),
                            (16, 24, 1, 1, 0)]:
        x = torch.randn(3, ci, 17, 18, generator=g).contiguous(memory_format=CL).to("loom")
        w = torch.randn(co, ci, k, k, generator=g).contiguous(memory_format=CL).to("loom")
        x.requires_grad_(); w.requires_grad_()
        y = F.conv2d(x, w, stride=s, padding=p)
        y.backward(torch.randn(y.shape, generator=g).contiguous(memory_format=CL).to("loom"))
        add(y, x.grad, w.grad)
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 2)


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_channels_last_rows_in_passes_of_images(bias):
    """A batch whose col rows pass about 2 MB runs the forward and the
    input gradient a few images at a time (here 7, 7 and 1: 295 KB of
    col per image): each image's results are the bits it gets alone, and
    the CPU's values."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(15, 32, 32, 32, generator=g).contiguous(memory_format=CL)
    w = torch.randn(40, 32, 3, 3, generator=g).contiguous(memory_format=CL)
    b = torch.randn(40, generator=g) if bias else None
    dy = torch.randn(15, 40, 16, 16, generator=g).contiguous(memory_format=CL)
    xl, wl, dyl = x.to("loom"), w.to("loom"), dy.to("loom")
    bl = b.to("loom") if bias else None
    kw = dict(stride=2, padding=1)

    def gi_of(d, xx):
        return torch.ops.aten.convolution_backward(d, xx, wl, None, [2, 2], [1, 1], [1, 1], False,
                                                   [0, 0], 1, [True, False, False])[0]

    y, gi = F.conv2d(xl, wl, bl, **kw), gi_of(dyl, xl)
    assert y.is_contiguous(memory_format=CL) and gi.is_contiguous(memory_format=CL)
    for i in range(15):
        assert torch.equal(y[i:i + 1].cpu(), F.conv2d(xl[i:i + 1], wl, bl, **kw).cpu()), i
        assert torch.equal(gi[i:i + 1].cpu(), gi_of(dyl[i:i + 1], xl[i:i + 1]).cpu()), i
    torch.testing.assert_close(y.cpu(), F.conv2d(x, w, b, **kw), rtol=1e-4, atol=1e-4)
    ref_gi = torch.ops.aten.convolution_backward(dy, x, w, None, [2, 2], [1, 1], [1, 1], False,
                                                 [0, 0], 1, [True, False, False])[0]
    torch.testing.assert_close(gi.cpu(), ref_gi, rtol=1e-4, atol=1e-4)


def test_channels_last_weight_grad_in_passes_of_images():
    """The weight gradient's col in passes of images (here 7, 7 and 1),
    each adding its products to the sums so far: every image's products
    counted once (the CPU's values), the same bits with 1 and 2 threads."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(15, 32, 32, 32, generator=g).contiguous(memory_format=CL)
    w = torch.randn(40, 32, 3, 3, generator=g).contiguous(memory_format=CL)
    dy = torch.randn(15, 40, 16, 16, generator=g).contiguous(memory_format=CL)

    def gw_of(d, xx, ww):
        return torch.ops.aten.convolution_backward(d, xx, ww, None, [2, 2], [1, 1], [1, 1], False,
                                                   [0, 0], 1, [False, True, False])[1]

    gw = gw_of(dy.to("loom"), x.to("loom"), w.to("loom"))
    assert gw.is_contiguous(memory_format=CL)
    torch.testing.assert_close(gw.cpu(), gw_of(dy, x, w), rtol=1e-4, atol=2e-3)
    code = """
    CL = torch.channels_last
    g = torch.Generator().manual_seed(4)
    x = torch.randn(15, 32, 32, 32, generator=g).contiguous(memory_format=CL).to("loom")
    w = torch.randn(40, 32, 3, 3, generator=g).contiguous(memory_format=CL).to("loom")
    dy = torch.randn(15, 40, 16, 16, generator=g).contiguous(memory_format=CL).to("loom")
    add(torch.ops.aten.convolution_backward(dy, x, w, None, [2, 2], [1, 1], [1, 1], False,
                                            [0, 0], 1, [False, True, False])[1])
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 2)


# (n, c_in, c_out, stride, h, w): narrow images through the padded rows,
# whose positions' channels the planes take by permutes (2-4 channels),
# rows of whole and partial blocks of 16 positions
NARROW = [(4, 3, 16, 1, 19, 37), (3, 2, 8, 1, 16, 35), (2, 4, 16, 1, 13, 21),
          (2, 2, 16, 1, 12, 40), (32, 3, 32, 1, 32, 32)]


@pytest.mark.parametrize("case", NARROW, ids=str)
def test_channels_last_narrow_image_planes_give_nchw_bits(case):
    """A network's first convolution over a channels-last image of a few
    channels: the padded planes it makes from the image are the NCHW
    image's, so the forward and the weight gradient have the NCHW path's
    bits, and the CPU's values."""
    n, c, o, s, h, wd = case
    g = torch.Generator().manual_seed(sum(case))
    x = torch.randn(n, c, h, wd, generator=g)
    w = torch.randn(o, c, 3, 3, generator=g)
    y_ref = F.conv2d(x, w, stride=s, padding=1)
    dy = torch.randn(y_ref.shape, generator=g)

    def step(fmt):
        xl = x.contiguous(memory_format=fmt).to("loom")
        wl = w.contiguous(memory_format=fmt).to("loom")
        y = F.conv2d(xl, wl, stride=s, padding=1)
        gw = torch.ops.aten.convolution_backward(
            dy.contiguous(memory_format=fmt).to("loom"), xl, wl, None, [s, s], [1, 1], [1, 1],
            False, [0, 0], 1, [False, True, False])[1]
        return y.cpu(), gw.cpu()

    gw_ref = torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [1, 1], [1, 1], False,
                                                 [0, 0], 1, [False, True, False])[1]
    cl, nchw = step(CL), step(torch.contiguous_format)
    for got, base, ref in zip(cl, nchw, (y_ref, gw_ref)):
        assert torch.equal(got, base)
        # the weight gradient sums up to 32K products a value
        torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)
    code = f"""
    CL = torch.channels_last
    g = torch.Generator().manual_seed(3)
    x = torch.randn({n}, {c}, {h}, {wd}, generator=g).contiguous(memory_format=CL).to("loom")
    w = torch.randn({o}, {c}, 3, 3, generator=g).contiguous(memory_format=CL).to("loom")
    y = torch.nn.functional.conv2d(x, w, stride={s}, padding=1)
    dy = torch.randn(y.shape, generator=g).contiguous(memory_format=CL).to("loom")
    add(y, torch.ops.aten.convolution_backward(dy, x, w, None, [{s}, {s}], [1, 1], [1, 1], False,
                                               [0, 0], 1, [False, True, False])[1])
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 2)
