"""Convolutions on loom against the CPU: conv1d/2d/3d with groups
(depthwise included), stride, padding (incl. "same"), dilation, bias,
transposed convolution; forward and every gradient; fp32/bf16/fp64; odd
sizes; bad parameters; and a small CNN trained with no CPU fallback."""


import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4),
       torch.float64: dict(rtol=1e-9, atol=1e-9),
       torch.bfloat16: dict(rtol=3e-2, atol=1e-1)}


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def leaf(t, device):
    return t.detach().to(device).requires_grad_()


def compare(fn, tensors, dtype, scale=1.0):
    """Runs fn on CPU and loom leaves; compares outputs and all gradients."""
    cpu = [leaf(t, "cpu") if t is not None else None for t in tensors]
    dev = [leaf(t, "loom") if t is not None else None for t in tensors]
    y, ly = fn(*cpu), fn(*dev)
    assert ly.device.type == "loom" and ly.shape == y.shape and ly.dtype == y.dtype
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    torch.testing.assert_close(ly.detach().cpu(), y.detach(), **tol)
    g = rand(*y.shape, dtype=dtype, seed=99)
    y.backward(g)
    ly.backward(g.to("loom"))
    for c, d in zip(cpu, dev):
        if c is not None:
            torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)


CONV2D = [
    # (N, C, H, W), (O, k), dict(stride, padding, dilation, groups)
    ((2, 3, 7, 9), (5, 3), dict(padding=1)),
    ((1, 4, 13, 8), (6, (3, 2)), dict(stride=(2, 3), padding=(2, 1), dilation=2, groups=2)),
    ((3, 6, 10, 10), (6, 5), dict(padding=2, groups=6)),            # depthwise
    ((2, 8, 9, 9), (4, 1), dict(stride=2)),                          # 1x1 strided
    ((2, 8, 9, 9), (4, 1), dict()),                                  # 1x1 (no im2col)
    ((1, 1, 1, 1), (1, 3), dict(padding=1)),
    ((2, 3, 63, 7), (7, 3), dict(padding="same", dilation=2)),
    ((1, 2, 8, 8), (3, 4), dict(padding="same")),                    # asymmetric same
    ((2, 64, 14, 14), (64, 3), dict(padding=1)),
    ((2, 32, 11, 11), (48, 3), dict(padding=1, groups=2)),          # grouped, implicit paths
    ((1, 40, 8, 8), (60, 3), dict(padding=1, groups=2)),            # partial flip tiles
    ((2, 37, 6, 6), (45, 3), dict(padding=1)),
    ((3, 16, 9, 9), (16, (3, 5)), dict(padding=(1, 2), dilation=(2, 1))),
    # large enough for the padded-row kernels (little waste), strided too
    ((2, 16, 30, 30), (24, 3), dict(padding=1)),
    ((2, 16, 30, 60), (32, 3), dict(padding=2, dilation=2, groups=2)),
    ((2, 8, 31, 33), (16, 5), dict(stride=(2, 3), padding=2)),
    ((2, 3, 40, 40), (16, 7), dict(stride=2, padding=3)),           # stem-like
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("case", CONV2D, ids=[str(i) for i in range(len(CONV2D))])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(case, bias, dtype):
    (n, c, h, w), (o, k), kw = case
    kk = (k, k) if isinstance(k, int) else k
    groups = kw.get("groups", 1)
    x = rand(n, c, h, w, dtype=dtype, seed=1)
    wt = rand(o, c // groups, *kk, dtype=dtype, seed=2)
    b = rand(o, dtype=dtype, seed=3) if bias else None
    scale = 1.0 if dtype != torch.bfloat16 else (c // groups * kk[0] * kk[1]) ** 0.5 / 3
    compare(lambda x, w, b: F.conv2d(x, w, b, **kw), [x, wt, b], dtype, max(scale, 1.0))


@pytest.mark.parametrize("bias", [True, False])
def test_conv1d_and_conv3d(bias):
    x1, w1 = rand(2, 4, 63), rand(6, 2, 7)
    b1 = rand(6) if bias else None
    compare(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=3, groups=2), [x1, w1, b1], torch.float32)
    x3, w3 = rand(2, 3, 5, 6, 7), rand(4, 3, 3, 2, 3)
    b3 = rand(4) if bias else None
    compare(lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 2), padding=1, dilation=(1, 2, 1)),
            [x3, w3, b3], torch.float32)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, output_padding=1),
                                dict(stride=1, padding=0, groups=2),
                                dict(stride=3, padding=2, dilation=2)])
def test_conv_transpose2d(kw):
    x = rand(2, 4, 7, 9)
    w = rand(4, 3, 3, 3)
    b = rand(3 * kw.get("groups", 1))
    compare(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), [x, w, b], torch.float32)


def rounded_once(actual, exact):
    """True where `actual` (bfloat16) is `exact` (float32) rounded once:
    within half a unit in its last place, with a hair for float32's own
    rounding."""
    e = exact.double()
    ulp = torch.exp2(torch.floor(torch.log2(e.abs().clamp_min(2.0 ** -126))) - 7)
    return (actual.double() - e).abs() <= 0.5 * ulp * (1 + 2.0 ** -10)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_bf16_conv_transpose_with_bias_rounds_once(dim):
    # The bias joins the float32 sums: adding it after rounding the sums to
    # bfloat16 rounds twice, off by a unit in the last place in places.
    fn = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][dim - 1]
    x = rand(2, 4, *[5] * dim, dtype=torch.bfloat16) * 4
    w = rand(4, 3, *[3] * dim, dtype=torch.bfloat16, seed=1)
    b = rand(3, dtype=torch.bfloat16, seed=2) * 8
    kw = dict(stride=2, padding=1, output_padding=1)
    exact = fn(x.float(), w.float(), b.float(), **kw)
    out = fn(x.to("loom"), w.to("loom"), b.to("loom"), **kw).cpu()
    assert out.dtype == torch.bfloat16
    assert bool(rounded_once(out, exact).all())


BF16_CONVS = [
    # (N, C, spatial), (O, k), dict(...): the bf16 implicit GEMMs' read modes
    ((2, 64, 28, 28), (96, 3), dict(padding=1)),             # runs across rows; k in 3 blocks
    ((2, 40, 13, 11), (36, 3), dict()),                      # runs along rows; a packed weight
    ((2, 32, 17, 17), (48, 3), dict(stride=2, padding=1)),   # stride 2
    ((1, 16, 5, 75), (24, 3), dict(stride=2, padding=1)),    # stride 2 past 32 columns
    ((1, 24, 14, 14), (40, 3), dict(stride=3, padding=1)),   # stride 3, lane by lane
    ((2, 48, 12, 12), (64, 3), dict(padding=2, dilation=2, groups=2)),
    ((1, 16, 24, 24), (544, 3), dict(padding=1)),            # 544 outputs: two passes of rows
    ((3, 32, 7, 7), (32, 5), dict(padding=2)),               # 25 taps
    ((2, 32, 50), (40, 5), dict(padding=2)),                 # conv1d
    ((1, 16, 5, 6, 7), (24, 3), dict(padding=1)),            # conv3d
    # strided over 512 outputs or more: the input gradient by phases
    ((1, 16, 46, 50), (24, 7), dict(stride=2, padding=3)),     # the stem's window
    ((1, 16, 47, 45), (32, 1), dict(stride=2)),                # phases without taps
    ((1, 16, 50, 70), (32, 3), dict(stride=(2, 3), padding=2)),
    ((1, 16, 15, 16, 18), (24, 3), dict(stride=2, padding=1)),  # conv3d
    # 4096 grid positions or more: the channels-last kernels (forward and
    # stride-1 input gradient), blocks of channels part empty
    ((2, 32, 40, 50), (48, 3), dict(padding=1)),
    ((4, 48, 64, 64), (48, 3), dict(stride=2, padding=1)),
    # 64 channels or more: the channels-last weight gradient too
    ((2, 64, 46, 44), (72, 3), dict(padding=1)),
    ((4, 64, 64, 63), (64, 3), dict(stride=2, padding=1)),
    # ten phases written in place: more than one launch takes
    ((4, 32, 160, 64), (32, 5), dict(stride=(5, 2))),
]


def rounded_once_of_sums(actual, exact, abs_sums):
    """`actual` (bfloat16) is `exact` rounded once, give or take float32
    summation error (2^-16 of the sum of the terms' magnitudes): a wrong
    term is off by far more."""
    a, e = actual.double(), exact.double()
    mag = torch.maximum(a.abs(), e.abs()).clamp_min(2.0 ** -126)
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - 7)
    bad = (a - e).abs() > 0.5 * ulp + abs_sums * 2.0 ** -16
    assert not bool(bad.any()), f"{int(bad.sum())} of {bad.numel()} off"


@pytest.mark.parametrize("case", BF16_CONVS, ids=[str(i) for i in range(len(BF16_CONVS))])
def test_bf16_conv_sums_round_once(case):
    # Output and both gradients are float32 sums rounded to bfloat16 once,
    # 2-d images channels-last too.
    (n, c, *sp), (o, k), kw = case
    x = rand(n, c, *sp, dtype=torch.bfloat16, seed=1)
    check_bf16_conv(x, case)
    if len(sp) == 2:
        check_bf16_conv(x.to(memory_format=torch.channels_last), case)


def check_bf16_conv(x, case):
    (n, c, *sp), (o, k), kw = case
    groups = kw.get("groups", 1)
    conv = [F.conv1d, F.conv2d, F.conv3d][len(sp) - 1]
    w = rand(o, c // groups, *[k] * len(sp), dtype=torch.bfloat16, seed=2)
    b = rand(o, dtype=torch.bfloat16, seed=3)
    xl, wl = leaf(x, "loom"), leaf(w, "loom")
    y = conv(xl, wl, b.to("loom"), **kw)
    gy = rand(*y.shape, dtype=torch.bfloat16, seed=4)
    y.backward(gy.to("loom"))
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    exact = conv(xd, wd, b.double(), **kw)
    exact.backward(gy.double())
    xa, wa = x.double().abs().requires_grad_(), w.double().abs().requires_grad_()
    sums = conv(xa, wa, b.double().abs(), **kw)
    sums.backward(gy.double().abs())
    rounded_once_of_sums(y.detach().cpu(), exact.detach(), sums.detach())
    rounded_once_of_sums(xl.grad.cpu(), xd.grad, xa.grad)
    rounded_once_of_sums(wl.grad.cpu(), wd.grad, wa.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=(2, 3), dilation=(2, 1),
                                                            padding=(1, 2), stride=(2, 3))],
                         ids=["3x3", "strided"])
def test_unfold_and_fold_match_cpu_bitwise(dtype, kw):
    x = rand(2, 3, 9, 11, dtype=dtype)
    for batch in [lambda t: t, lambda t: t[0]]:   # batched and unbatched
        xc = batch(x).clone().requires_grad_()
        xl = batch(x).to("loom").requires_grad_()
        u, ul = F.unfold(xc, **kw), F.unfold(xl, **kw)
        assert torch.equal(ul.detach().cpu(), u.detach())
        f, fl = F.fold(u, (9, 11), **kw), F.fold(ul, (9, 11), **kw)  # windows overlap
        assert torch.equal(fl.detach().cpu(), f.detach())
        g = rand(*f.shape, dtype=dtype, seed=3)
        f.backward(g)
        fl.backward(g.to("loom"))
        assert torch.equal(xl.grad.cpu(), xc.grad)
    for bad in [lambda d: F.unfold(torch.ones(1, 1, 2, 2, device=d), 3),
                lambda d: F.fold(torch.ones(1, 4, 5, device=d), (3, 3), 2)]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


def test_conv_noncontiguous_input():
    x = rand(2, 9, 12, 3).permute(0, 3, 1, 2)  # (2, 3, 9, 12), channels last
    w = rand(5, 3, 3, 3)
    compare(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32)
    x = rand(2, 30, 30, 8).permute(0, 3, 1, 2)  # padded-row kernels, channels last
    w = rand(16, 8, 3, 3)
    compare(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32)


def test_conv2d_weight_grad_long_k():
    # dy (24 channels x 2 images x 160 x 162 grid) is over 4 MB: the padded
    # weight gradient splits k into chunks, each serving all of dW's panels.
    x, w = rand(2, 8, 160, 160), rand(24, 8, 3, 3)
    compare(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32, scale=30.0)


@pytest.mark.parametrize("shape,padding,used", [
    ((2, 64, 28, 28), 1, True),   # ResNet-like: many tile blocks
    ((1, 130, 14, 15), 1, True),  # two channel passes, odd width (half tiles at the right)
    ((2, 24, 17, 16), 0, True),   # no padding: odd output height
    ((1, 16, 16, 16), 2, True),
    ((2, 32, 8, 8), 1, True),     # half the tiles' outputs kept
    ((1, 32, 7, 7), 1, False),    # under half (49 of 128 outputs): the GEMM path
])
def test_conv2d_winograd(shape, padding, used, monkeypatch):
    # 3x3 windows of stride 1 over enough channels go through Winograd's
    # F(2x2, 3x3): forward and input gradient, channels-last input included;
    # without AVX-512 (or under LOOM_CPU_FEATURES=generic) its generic twin.
    n, c, h, w = shape
    x, wt, b = rand(*shape), rand(100, c, 3, 3, seed=1), rand(100, seed=2)
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=padding)
    compare(fn, [x, wt, b], torch.float32)
    compare(fn, [x.to(memory_format=torch.channels_last), wt, b], torch.float32)
    # The results (output and weight gradient) are the transforms', not the
    # GEMM path's, and close to exact.
    dx, dw, db = x.to("loom"), wt.to("loom"), b.to("loom")
    dy = rand(n, 100, h + 2 * padding - 2, w + 2 * padding - 2, seed=3)

    def run():
        out = F.conv2d(dx, dw, db, padding=padding).cpu()
        gw = torch.ops.aten.convolution_backward(
            dy.to("loom"), dx, dw, None, [1, 1], [padding] * 2, [1, 1], False, [0, 0], 1,
            [False, True, False])[1].cpu()
        return out, gw

    wino = run()
    monkeypatch.setenv("LOOM_CONV_WINOGRAD", "0")
    gemm = run()
    exact = (F.conv2d(x.double(), wt.double(), b.double(), padding=padding),
             torch.nn.grad.conv2d_weight(x.double(), wt.shape, dy.double(), padding=padding))
    for w_res, g_res, e_res in zip(wino, gemm, exact):
        assert torch.equal(w_res, g_res) != used
        for got in (w_res, g_res):  # both within a few fp32 roundings of the largest result
            torch.testing.assert_close(got.double(), e_res, rtol=0, atol=2e-6 * e_res.abs().max())


def test_conv_input_grad_with_a_col_past_the_caches():
    # 3 images whose col is 38 MB: the strided input gradient makes it an
    # image at a time (a chunk, and the chunks' seams, must not show)
    x, w = rand(3, 8, 180, 179), rand(4, 8, 7, 7)
    compare(lambda x, w: F.conv2d(x, w, stride=2, padding=3), [x, w], torch.float32, scale=30.0)


def test_conv_with_a_large_col_gemm():
    # ResNet-18's last stage (512 -> 512, 3x3 at 7x7, 8 images) runs a col GEMM
    # past the large-operand sizes (weight 9.4 MB, col 7.2 MB, 43 row panels):
    # the GEMM's k blocking must fit the convolution's packed buffers.
    x, w = rand(8, 512, 7, 7), rand(512, 512, 3, 3, seed=1)
    compare(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32, scale=30.0)


def test_conv1d_long_sequence():
    x, w, b = rand(2, 8, 500), rand(12, 8, 3), rand(12)
    compare(lambda x, w, b: F.conv1d(x, w, b, padding=1), [x, w, b], torch.float32)


@pytest.mark.parametrize("fn", [
    lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(4, 2, 3, 3, device=d)),
    lambda d: F.conv2d(torch.ones(1, 4, 5, 5, device=d), torch.ones(4, 2, 3, 3, device=d), groups=3),
    lambda d: F.conv2d(torch.ones(1, 3, 2, 2, device=d), torch.ones(4, 3, 3, 3, device=d)),
    lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(4, 3, 3, 3, device=d), stride=0),
    lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(4, 3, 3, 3, device=d), padding=-1),
    lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(4, 3, 3, 3, device=d), padding="same", stride=2),
    lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(4, 3, 3, 3, device=d), torch.ones(3, device=d)),
])
def test_bad_conv_params_match_cpu(fn):
    with pytest.raises(Exception) as cpu_err:
        fn("cpu")
    with pytest.raises(type(cpu_err.value)):
        fn("loom")


class SmallCNN(nn.Module):
    def __init__(self, bn):
        super().__init__()
        norm = (lambda c: nn.BatchNorm2d(c)) if bn else (lambda c: nn.Identity())
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=not bn), norm(16), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=not bn), norm(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1, bias=not bn), norm(16))
        self.down = nn.Conv2d(16, 32, 1, stride=2)
        self.head = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(self.down(x))


@pytest.mark.parametrize("bn", [False, True])
def test_small_resnet_trains_without_fallback(bn):
    torch.manual_seed(0)
    model = SmallCNN(bn)
    ref = SmallCNN(bn)
    ref.load_state_dict(model.state_dict())
    model = model.to("loom")
    x, target = rand(4, 3, 16, 16, seed=5), torch.tensor([1, 2, 3, 4])
    for m, dev in ((ref, "cpu"), (model, "loom")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(dev)), target.to(dev))
            loss.backward()
            opt.step()
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-3, atol=1e-4, msg=name)
