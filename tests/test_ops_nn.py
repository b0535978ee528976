"""Neural-network ops on loom (softmax, norms, losses, embedding) against the
CPU: forward and backward, odd shapes, non-contiguous inputs, four float
dtypes, bad input, and thread-count independence."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# Our kernels compute in double and round once; the CPU rounds some
# intermediates in the low-precision types, so allow a few of their ulps.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
       torch.float16: dict(rtol=4e-3, atol=4e-3)}


def close(actual, expected, dtype, scale=1.0):
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    torch.testing.assert_close(actual.cpu(), expected, **tol)


def pair(t, requires_grad=True):
    """The same tensor on cpu and on loom, as leaves."""
    c = t.detach().clone().requires_grad_(requires_grad)
    d = t.detach().to("loom").requires_grad_(requires_grad)
    return c, d


def grads(out, inputs, grad):
    return torch.autograd.grad(out, inputs, grad, allow_unused=True)


def sdpa_agrees(cpu, dev, dtype, grad=True, mask=None, **kw):
    """scaled_dot_product_attention of (q, k, v) leaves on the CPU and on
    loom (`mask` moved there too): the outputs are close, and with `grad`
    the three gradients of a random output gradient."""
    oc = F.scaled_dot_product_attention(*cpu, attn_mask=mask, **kw)
    od = F.scaled_dot_product_attention(
        *dev, attn_mask=None if mask is None else mask.to("loom"), **kw)
    close(od, oc.detach(), dtype, scale=2.0)
    if grad:
        g = torch.randn(oc.shape).to(dtype)
        for a, b in zip(grads(od, list(dev), g.to("loom")), grads(oc, list(cpu), g)):
            close(a, b, dtype, scale=4.0)


def noncontig(shape, dtype, seed=0):
    """A loom/cpu pair of tensors of `shape` whose memory is not contiguous:
    a transposed, strided slice of a larger buffer."""
    g = torch.Generator().manual_seed(seed)
    big = torch.randn(*reversed([2 * s for s in shape]), generator=g).to(dtype)
    c = big.permute(*reversed(range(len(shape))))[tuple(slice(0, None, 2) for _ in shape)]
    d = big.to("loom").permute(*reversed(range(len(shape))))[tuple(slice(0, None, 2) for _ in shape)]
    assert not d.is_contiguous()
    return c.detach().requires_grad_(), d.detach().requires_grad_()


# ---- softmax ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 5), 1), ((3, 5), 0),
                                       ((2, 3, 17), -1), ((2, 3, 17), 1),
                                       ((4, 1, 9), 1), ((), 0)])
def test_softmax_forward_backward(fn, dtype, shape, dim):
    torch.manual_seed(0)
    xc, xd = pair(torch.randn(shape).to(dtype) * 3)
    yc, yd = fn(xc, dim), fn(xd, dim)
    assert yd.device.type == "loom" and yd.dtype == yc.dtype
    close(yd, yc.detach(), dtype)
    g = torch.randn(shape).to(dtype)
    (gc,), (gd,) = grads(yc, xc, g), grads(yd, xd, g.to("loom"))
    close(gd, gc, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_noncontiguous(dtype):
    xc, xd = noncontig((5, 6, 7), dtype)
    for dim in range(3):
        yc, yd = torch.log_softmax(xc, dim), torch.log_softmax(xd, dim)
        close(yd, yc.detach(), dtype)
        g = torch.randn(5, 6, 7).to(dtype)
        (gc,), (gd,) = grads(yc, xc, g), grads(yd, xd, g.to("loom").transpose(0, 2).contiguous().transpose(0, 2))
        close(gd, gc, dtype)


def test_softmax_out_and_extremes():
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3,
                      [float("nan"), 1.0, 2.0], [1e4, -1e4, 0.0]])
    xd = x.to("loom")
    torch.testing.assert_close(torch.softmax(xd, 1).cpu(), torch.softmax(x, 1), equal_nan=True)
    torch.testing.assert_close(torch.log_softmax(xd, 1).cpu(), torch.log_softmax(x, 1), equal_nan=True)
    out = torch.empty(0, device="loom")
    torch._softmax(xd, 1, False, out=out)
    torch.testing.assert_close(out.cpu(), torch.softmax(x, 1), equal_nan=True)
    empty = torch.randn(0, 4, device="loom")
    assert torch.softmax(empty, 1).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_over_a_strided_dim_in_tiles(fn, dtype):
    # Long strided rows with neighbours next to them in memory are staged
    # 16 at a time: the same bits as the same rows made contiguous, with
    # rows holding NaN or inf (the exact path) inside a tile, and chunks of
    # rows that end mid-tile.
    g = torch.Generator().manual_seed(16)
    x = (torch.randn(300, 37 * 3, generator=g) * 4).to(dtype)
    x[5, 20], x[7, 21], x[0, 40] = float("nan"), float("inf"), -float("inf")
    d = x.to("loom")
    got, want = fn(d, 0).cpu(), fn(d.t().contiguous(), 1).t().cpu()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, fn(x, 0), equal_nan=True, **tol)
    y = torch.randn(2, 256, 40, generator=g).to(dtype)
    close(fn(y.to("loom"), 1), fn(y, 1), dtype)


def test_softmax_bad_input():
    xd = torch.randn(3, 4, device="loom")
    with pytest.raises(IndexError):
        torch.softmax(xd, 2)
    with pytest.raises(IndexError):
        torch.log_softmax(xd, -3)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        torch.softmax(torch.ones(3, dtype=torch.long, device="loom"), 0, dtype=None)


# ---- layer norm ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,normalized", [((4, 10), (10,)), ((3, 5, 7), (5, 7)),
                                              ((13,), (13,)), ((2, 3, 1), (1,))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, shape, normalized, affine):
    torch.manual_seed(1)
    xc, xd = pair(torch.randn(shape).to(dtype) * 2 + 0.5)
    wc = wd = bc = bd = None
    if affine:
        wc, wd = pair(torch.randn(normalized).to(dtype))
        bc, bd = pair(torch.randn(normalized).to(dtype))
    yc = F.layer_norm(xc, normalized, wc, bc, eps=1e-5)
    yd = F.layer_norm(xd, normalized, wd, bd, eps=1e-5)
    close(yd, yc.detach(), dtype)
    g = torch.randn(shape).to(dtype)
    inc = [xc] + ([wc, bc] if affine else [])
    ind = [xd] + ([wd, bd] if affine else [])
    # With one normalized element the input gradient is rounding noise
    # amplified by rstd = 1/sqrt(eps): compare it loosely.
    scale = 2.0 if normalized != (1,) else 200.0
    for a, b in zip(grads(yd, ind, g.to("loom")), grads(yc, inc, g)):
        close(a, b, dtype, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_noncontiguous(dtype):
    xc, xd = noncontig((6, 9), dtype, seed=3)
    yc, yd = F.layer_norm(xc, (9,)), F.layer_norm(xd, (9,))
    close(yd, yc.detach(), dtype)
    g = torch.randn(6, 9).to(dtype)
    (gc,), (gd,) = grads(yc, xc, g), grads(yd, xd, g.to("loom"))
    close(gd, gc, dtype, scale=2.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("normalized", [(33,), (4, 33)], ids=str)
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm_runs_fused(dtype, normalized, affine, eps):
    # F.rms_norm takes the fused op on loom (one kernel each way, not the
    # composite's six); its values, rstd and gradients against the CPU's
    # composite, eps defaulting to the computation type's epsilon.
    torch.manual_seed(4)
    shape = (3, 4, 33)
    xc, xd = pair(torch.randn(shape).to(dtype) * 2 + 0.5)
    wc = wd = None
    if affine:
        wc, wd = pair(torch.randn(normalized).to(dtype))
    yc = F.rms_norm(xc, normalized, wc, eps=eps)
    yd = F.rms_norm(xd, normalized, wd, eps=eps)
    assert type(yd.grad_fn).__name__ == "FusedRmsNormBackward0"
    close(yd, yc.detach(), dtype)
    out_c = torch.ops.aten._fused_rms_norm(xc.detach(), list(normalized), wc, eps)
    out_d = torch.ops.aten._fused_rms_norm(xd.detach(), list(normalized), wd, eps)
    assert out_d[1].dtype == out_c[1].dtype and out_d[1].shape == out_c[1].shape
    torch.testing.assert_close(out_d[1].cpu(), out_c[1], rtol=1e-5, atol=0)
    small = (torch.randn(5, 33) * 3e-4).to(dtype)  # eps is a tenth of mean(x^2)
    torch.testing.assert_close(torch.ops.aten._fused_rms_norm(small.to("loom"), [33], None, eps)[1].cpu(),
                               torch.ops.aten._fused_rms_norm(small, [33], None, eps)[1], rtol=1e-5, atol=0)
    g = torch.randn(shape).to(dtype)
    inc = [xc] + ([wc] if affine else [])
    ind = [xd] + ([wd] if affine else [])
    for a, b in zip(grads(yd, ind, g.to("loom")), grads(yc, inc, g)):
        close(a, b, dtype, scale=2.0)


def test_layer_norm_stats_match_cpu():
    x = torch.randn(5, 8)
    for a, b in zip(torch.native_layer_norm(x.to("loom"), [8], None, None, 1e-5),
                    torch.native_layer_norm(x, [8], None, None, 1e-5)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a.cpu(), b)


def test_layer_norm_bad_shape():
    xd = torch.randn(3, 4, device="loom")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(xd, (5,))
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(xd, (4,), torch.ones(3, device="loom"))


# ---- batch norm / instance norm --------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (5, 3, 7), (2, 4, 3, 5)])
def test_batch_norm_training(dtype, shape):
    torch.manual_seed(2)
    C = shape[1]
    xc, xd = pair(torch.randn(shape).to(dtype) * 2 + 1)
    wc, wd = pair(torch.randn(C).to(dtype))
    bc, bd = pair(torch.randn(C).to(dtype))
    rmc, rvc = torch.zeros(C, dtype=dtype), torch.ones(C, dtype=dtype)
    rmd, rvd = rmc.to("loom"), rvc.to("loom")
    yc = F.batch_norm(xc, rmc, rvc, wc, bc, training=True, momentum=0.2)
    yd = F.batch_norm(xd, rmd, rvd, wd, bd, training=True, momentum=0.2)
    close(yd, yc.detach(), dtype, scale=2.0)
    close(rmd, rmc, dtype)
    close(rvd, rvc, dtype)
    g = torch.randn(shape).to(dtype)
    for a, b in zip(grads(yd, [xd, wd, bd], g.to("loom")), grads(yc, [xc, wc, bc], g)):
        close(a, b, dtype, scale=3.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_eval(dtype):
    torch.manual_seed(3)
    xc, xd = pair(torch.randn(3, 4, 5).to(dtype))
    wc, wd = pair(torch.randn(4).to(dtype))
    rm, rv = torch.randn(4).to(dtype), torch.rand(4).to(dtype) + 0.5
    yc = F.batch_norm(xc, rm, rv, wc, None, training=False)
    yd = F.batch_norm(xd, rm.to("loom"), rv.to("loom"), wd, None, training=False)
    close(yd, yc.detach(), dtype)
    g = torch.randn(3, 4, 5).to(dtype)
    for a, b in zip(grads(yd, [xd, wd], g.to("loom")), grads(yc, [xc, wc], g)):
        close(a, b, dtype, scale=2.0)


def test_batch_norm_module_and_channels_last():
    torch.manual_seed(4)
    mc = torch.nn.BatchNorm2d(3)
    md = torch.nn.BatchNorm2d(3).to("loom")
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    for _ in range(3):
        torch.testing.assert_close(md(x.to("loom")).cpu(), mc(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(md.running_mean.cpu(), mc.running_mean)
    torch.testing.assert_close(md.running_var.cpu(), mc.running_var)
    assert int(md.num_batches_tracked) == 3
    md.eval(), mc.eval()
    torch.testing.assert_close(md(x.to("loom")).cpu(), mc(x), rtol=1e-5, atol=1e-5)


def test_batch_norm_mixed_precision_stats():
    x = torch.randn(4, 3, 5).bfloat16()
    w = torch.randn(3)
    outs_c = torch.native_batch_norm(x, w, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5)
    outs_d = torch.native_batch_norm(x.to("loom"), w.to("loom"), None, torch.zeros(3, device="loom"),
                                     torch.ones(3, device="loom"), True, 0.1, 1e-5)
    for a, b in zip(outs_d, outs_c):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a.cpu(), b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("stats", [True, False])
def test_batch_norm_legit_out(stats):
    # The out= forms export and torch.compile reach: the outputs resized,
    # the running statistics updated, as on the CPU.
    torch.manual_seed(3)
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    res = {}
    for dev in ("cpu", "loom"):
        rm, rv = torch.zeros(3, device=dev), torch.ones(3, device=dev)
        outs = [torch.empty(0, device=dev) for _ in range(3)]
        args = (x.to(dev), w.to(dev), b.to(dev)) + ((rm, rv) if stats else ()) + (True, 0.1, 1e-5)
        op = torch.ops.aten._native_batch_norm_legit
        (op.out if stats else op.no_stats_out)(*args, out=outs[0], save_mean=outs[1],
                                                save_invstd=outs[2])
        res[dev] = outs + ([rm, rv] if stats else [])
    for a, c in zip(res["loom"], res["cpu"]):
        assert a.device.type == "loom" and a.shape == c.shape
        close(a, c, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_instance_norm(dtype):
    torch.manual_seed(5)
    xc, xd = pair(torch.randn(2, 3, 6, 5).to(dtype))
    wc, wd = pair(torch.randn(3).to(dtype))
    yc, yd = F.instance_norm(xc, weight=wc), F.instance_norm(xd, weight=wd)
    close(yd, yc.detach(), dtype)
    g = torch.randn(2, 3, 6, 5).to(dtype)
    for a, b in zip(grads(yd, [xd, wd], g.to("loom")), grads(yc, [xc, wc], g)):
        close(a, b, dtype, scale=2.0)


def test_batch_norm_bad_input():
    xd = torch.randn(4, 3, device="loom")
    with pytest.raises(RuntimeError):
        F.batch_norm(xd, torch.zeros(4, device="loom"), torch.ones(4, device="loom"))
    with pytest.raises(ValueError):
        F.batch_norm(torch.randn(1, 3, device="loom"), None, None, training=True)


# ---- group norm ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((3, 4, 2, 3), 2), ((3, 6), 3), ((1, 6, 7), 1)])
def test_group_norm(dtype, shape, groups):
    torch.manual_seed(6)
    C = shape[1]
    xc, xd = pair(torch.randn(shape).to(dtype) * 2 - 1)
    wc, wd = pair(torch.randn(C).to(dtype))
    bc, bd = pair(torch.randn(C).to(dtype))
    yc, yd = F.group_norm(xc, groups, wc, bc), F.group_norm(xd, groups, wd, bd)
    close(yd, yc.detach(), dtype, scale=2.0)
    g = torch.randn(shape).to(dtype)
    for a, b in zip(grads(yd, [xd, wd, bd], g.to("loom")), grads(yc, [xc, wc, bc], g)):
        close(a, b, dtype, scale=3.0)


def test_group_norm_bad_groups():
    with pytest.raises(RuntimeError, match="divisible"):
        F.group_norm(torch.randn(2, 6, 4, device="loom"), 4)


# ---- losses -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy(dtype, reduction, weighted):
    torch.manual_seed(7)
    N, C = 9, 5
    xc, xd = pair(torch.randn(N, C).to(dtype) * 2)
    t = torch.randint(0, C, (N,))
    t[3] = -100
    w = torch.rand(C).to(dtype) + 0.5 if weighted else None
    yc = F.cross_entropy(xc, t, weight=w, reduction=reduction)
    yd = F.cross_entropy(xd, t.to("loom"), weight=None if w is None else w.to("loom"),
                         reduction=reduction)
    assert yd.shape == yc.shape
    close(yd, yc.detach(), dtype, scale=2.0)
    g = torch.randn(yc.shape).to(dtype)
    (gc,), (gd,) = grads(yc, xc, g), grads(yd, xd, g.to("loom"))
    close(gd, gc, dtype, scale=2.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_2d_and_no_batch(dtype, reduction):
    torch.manual_seed(8)
    xc, xd = pair(torch.randn(2, 4, 3, 5).to(dtype).log_softmax(1))
    t = torch.randint(0, 4, (2, 3, 5))
    t[0, 1, 2] = 1 - 101
    yc = F.nll_loss(xc, t, reduction=reduction, ignore_index=-100)
    yd = F.nll_loss(xd, t.to("loom"), reduction=reduction, ignore_index=-100)
    close(yd, yc.detach(), dtype)
    g = torch.randn(yc.shape).to(dtype)
    (gc,), (gd,) = grads(yc, xc, g), grads(yd, xd, g.to("loom"))
    close(gd, gc, dtype)
    # one sample, no batch dim
    xc, xd = pair(torch.randn(6).to(dtype))
    yc = F.nll_loss(xc, torch.tensor(2), reduction=reduction)
    yd = F.nll_loss(xd, torch.tensor(2, device="loom"), reduction=reduction)
    close(yd, yc.detach(), dtype)


def test_nll_loss_noncontiguous():
    xc, xd = noncontig((7, 4), torch.float32, seed=9)
    t = torch.tensor([0, 3, 1, 2, 2, 0, 3])
    yc, yd = F.nll_loss(xc, t), F.nll_loss(xd, t.to("loom"))
    close(yd, yc.detach(), torch.float32)
    (gc,), (gd,) = grads(yc, xc, None), grads(yd, xd, torch.ones((), device="loom"))
    close(gd, gc, torch.float32)


def test_nll_loss_bad_input():
    xd = torch.randn(3, 4, device="loom")
    with pytest.raises(ValueError):  # batch size mismatch, as on the CPU
        F.nll_loss(xd, torch.zeros(4, dtype=torch.long, device="loom"))
    with pytest.raises(RuntimeError):
        F.nll_loss(xd, torch.zeros(3, 2, dtype=torch.long, device="loom"))
    with pytest.raises(RuntimeError, match="weight"):
        F.nll_loss(xd, torch.zeros(3, dtype=torch.long, device="loom"),
                   weight=torch.ones(5, device="loom"))
    with pytest.raises(RuntimeError, match="Long or Byte"):
        F.nll_loss(xd, torch.zeros(3, dtype=torch.int32, device="loom"))
    # a target out of range is found by the kernel, so it surfaces
    # asynchronously (at the next sync), as on other asynchronous devices
    with pytest.raises(IndexError, match="nll_loss_forward"):
        F.nll_loss(xd, torch.tensor([0, 9, 1], device="loom")).cpu()


POINTWISE = {
    "mse": lambda x, y, r: F.mse_loss(x, y, reduction=r),
    "huber": lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=0.7),
    "smooth_l1": lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.6),
    "smooth_l1_beta0": lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.0),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_losses(name, dtype, reduction):
    torch.manual_seed(10)
    fn = POINTWISE[name]
    xc, xd = noncontig((5, 7), dtype, seed=11)
    yc_, yd_ = pair(torch.randn(5, 7).to(dtype))
    lc, ld = fn(xc, yc_, reduction), fn(xd, yd_, reduction)
    close(ld, lc.detach(), dtype, scale=2.0)
    g = torch.randn(lc.shape).to(dtype)
    for a, b in zip(grads(ld, [xd, yd_], g.to("loom")), grads(lc, [xc, yc_], g)):
        close(a, b, dtype, scale=2.0)


@pytest.mark.parametrize("name", ["mse", "huber", "smooth_l1"])
def test_pointwise_loss_sums_do_not_depend_on_the_layout(name):
    # Dense float32 inputs take their own loop; a strided view of the same
    # values takes the general one: both sum each block's terms in the same
    # order. 21007 terms: five full blocks and a tail not a multiple of 4.
    torch.manual_seed(13)
    x, y = torch.randn(3001, 7), torch.randn(3001, 7)
    xd, yd = x.to("loom"), y.to("loom")
    xs = xd.t().contiguous().t()
    for r in ("sum", "mean"):
        dense = POINTWISE[name](xd, yd, r)
        strided = POINTWISE[name](xs, yd, r)
        assert torch.equal(dense.cpu(), strided.cpu())
        torch.testing.assert_close(dense.cpu(), POINTWISE[name](x, y, r), rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(dtype, reduction):
    torch.manual_seed(12)
    xc, xd = pair(torch.rand(6, 5).to(dtype).clamp(0.02, 0.98))
    t = torch.rand(6, 5).to(dtype)
    w = torch.rand(6, 5).to(dtype)
    lc = F.binary_cross_entropy(xc, t, weight=w, reduction=reduction)
    ld = F.binary_cross_entropy(xd, t.to("loom"), weight=w.to("loom"), reduction=reduction)
    close(ld, lc.detach(), dtype, scale=2.0)
    g = torch.randn(lc.shape).to(dtype)
    (gc,), (gd,) = grads(lc, xc, g), grads(ld, xd, g.to("loom"))
    close(gd, gc, dtype, scale=2.0)


def test_loss_bad_input():
    x = torch.rand(3, 4, device="loom")
    with pytest.raises(RuntimeError, match="binary_cross_entropy"):
        F.binary_cross_entropy(x + 1, torch.rand(3, 4, device="loom")).cpu()
    with pytest.raises(RuntimeError, match="negative values for beta"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        F.huber_loss(x, x, delta=0.0)
    with pytest.raises(RuntimeError, match="size of tensor"):
        torch.ops.aten.mse_loss(x, torch.rand(3, 5, device="loom"))


# ---- embedding ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx,freq", [(None, False), (2, False), (None, True), (3, True)])
def test_embedding_backward(dtype, padding_idx, freq):
    torch.manual_seed(13)
    wc, wd = pair(torch.randn(11, 6).to(dtype))
    idx = torch.randint(0, 11, (4, 7))
    idx[0, :3] = 3
    idx[1, 2] = 2
    yc = F.embedding(idx, wc, padding_idx=padding_idx, scale_grad_by_freq=freq)
    g = torch.randn(4, 7, 6).to(dtype)
    (gc,) = grads(yc, wc, g)
    gd = torch.ops.aten.embedding_dense_backward(
        g.to("loom"), idx.to("loom"), 11, -1 if padding_idx is None else padding_idx, freq)
    close(gd, gc, dtype)
    # non-contiguous grad_output, int32 indices
    gnc = g.to("loom").transpose(0, 1).contiguous().transpose(0, 1)
    gd2 = torch.ops.aten.embedding_dense_backward(
        gnc, idx.int().to("loom"), 11, -1 if padding_idx is None else padding_idx, freq)
    close(gd2, gc, dtype)


def test_embedding_backward_bad_index():
    g = torch.randn(3, 4, device="loom")
    with pytest.raises(RuntimeError):
        torch.ops.aten.embedding_dense_backward(
            g, torch.tensor([0, 1, 2], dtype=torch.float32, device="loom"), 5, -1, False)
    with pytest.raises(IndexError, match="embedding_dense_backward: index 7 "):
        torch.ops.aten.embedding_dense_backward(
            g, torch.tensor([0, 7, 2], device="loom"), 5, -1, False).cpu()


# ---- thread-count independence -------------------------------------------------------------

_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, torch, torch.nn.functional as F
    torch.manual_seed(0)
    h = hashlib.sha256()
    def add(t):
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 300).to(dtype).to("loom").requires_grad_()
        w = torch.randn(300).to(dtype).to("loom").requires_grad_()
        for y in (F.softmax(x, 1), F.log_softmax(x, 0), F.layer_norm(x, (300,), w),
                  F.group_norm(x.view(8, 8, 300), 4, w[:8]),
                  F.batch_norm(x.view(16, 4, 300), None, None, w[:4], training=True),
                  F.cross_entropy(x, torch.randint(0, 300, (64,)).to("loom")),
                  F.mse_loss(x, x.detach() * 0.5), F.huber_loss(x, x.detach() * 0.3)):
            add(y)
            for g in torch.autograd.grad(y, [x, w], torch.randn(y.shape).to(dtype).to("loom"),
                                         allow_unused=True):
                if g is not None:
                    add(g)
        for e in (24, 64):  # 64: bf16 takes the fused AMX kernel where there is one
            q = torch.randn(2, 3, 200, e).to(dtype).to("loom").requires_grad_()
            o = F.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True)
            add(o)
            add(torch.autograd.grad(o, q, torch.randn(o.shape).to(dtype).to("loom"))[0])
        idx = torch.randint(0, 50, (4000,)).to("loom")
        add(torch.ops.aten.embedding_dense_backward(
            torch.randn(4000, 33).to(dtype).to("loom"), idx, 50, -1, False))
    print(h.hexdigest())
""")


def test_bitwise_identical_across_thread_counts():
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, LOOM_NUM_THREADS=threads, LOOM_FALLBACK="error")
        r = subprocess.run([sys.executable, "-c", _DETERMINISM_SCRIPT], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]


# ---- scaled dot-product attention ------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("shape", [((2, 3, 5, 8), (2, 3, 7, 8), 6), ((4, 9, 16), (4, 9, 16), 16),
                                   ((1, 2, 70, 16), (1, 2, 90, 16), 16),  # several tiles
                                   ((1, 2, 9, 256), (1, 2, 70, 256), 200),  # the widest tiled heads
                                   ((1, 1, 5, 300), (1, 1, 6, 300), 300)])  # past them: rows
def test_sdpa(dtype, causal, mask_kind, shape):
    torch.manual_seed(14)
    qs, ks, ev = shape
    vs = ks[:-1] + (ev,)
    qc, qd = pair(torch.randn(qs).to(dtype))
    kc, kd = pair(torch.randn(ks).to(dtype))
    vc, vd = pair(torch.randn(vs).to(dtype))
    L, S = qs[-2], ks[-2]
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(L, S) > 0.3
        mask[:, 0] = True  # every query sees at least one key
    elif mask_kind == "float":
        mask = torch.randn(L, S).to(dtype)
    md = None if mask is None else mask.to("loom")
    assert torch._fused_sdp_choice(qd, kd, vd, md, 0.0, causal) == 4  # overrideable
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), dtype, mask=mask, is_causal=causal and mask is None)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, -0.3])
@pytest.mark.parametrize("dims", [(16, 24), (64, 96)])
def test_sdpa_bf16_on_amx(causal, scale, dims):
    # bf16 without a mask runs fused on AMX tiles where the CPU has them:
    # 600 queries are 9 full items and a partial one, 4096 keys 16 key
    # blocks; causal items stop at their last query. Head dims that are not
    # multiples of 32 are zero-padded to the tiles' steps. A negative scale
    # must not turn hidden keys into visible ones.
    torch.manual_seed(17)
    e, ev = dims
    qc, qd = pair(torch.randn(1, 2, 600, e).bfloat16())
    kc, kd = pair(torch.randn(1, 2, 4096, e).bfloat16())
    vc, vd = pair(torch.randn(1, 2, 4096, ev).bfloat16())
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, is_causal=causal, scale=scale)


def bf16_qkv(shape):
    """Random bf16 q (BH, L, E), k (BH, S, E), v (BH, S, Ev), each as a
    (CPU, loom) pair of leaves, for shape (BH, L, S, E, Ev)."""
    bh, L, S, e, ev = shape
    return (pair(torch.randn(bh, n, d).bfloat16()) for n, d in ((L, e), (S, e), (S, ev)))


@pytest.mark.parametrize("shape", [(3, 37, 50, 32, 64), (1, 1, 1, 32, 32), (2, 70, 33, 128, 32),
                                   (2, 5, 700, 64, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_fused_edges(shape, causal):
    # partial query and key blocks, one query, more queries than keys
    # (causal rows past the keys see them all), wide heads; a few queries
    # (one item per head, which packs its own key blocks) over several key
    # blocks
    torch.manual_seed(18)
    (qc, qd), (kc, kd), (vc, vd) = bf16_qkv(shape)
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, grad=False, is_causal=causal)


def test_sdpa_bf16_head_dims_read_only_their_columns():
    # head dims of 24 are padded to the tiles' 32 with zeros, never with the
    # next columns of a row: here those hold NaN, which a padded product
    # (0 * NaN) would spread into every result
    torch.manual_seed(19)
    full = [torch.randn(2, 300, 32).bfloat16() for _ in range(3)]
    for t in full:
        t[..., 24:] = float("nan")
    qc, kc, vc = (t[..., :24] for t in full)
    od = F.scaled_dot_product_attention(*(t.to("loom")[..., :24] for t in full))
    close(od, F.scaled_dot_product_attention(qc, kc, vc), torch.bfloat16, scale=2.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_sdpa_nan_rows(dtype):
    # a NaN in a query's scores makes its row NaN, as on the CPU, and so
    # does a +inf score; the other rows are untouched (the blocked kernels
    # too: fp32, and bf16 where the CPU has no AMX)
    torch.manual_seed(22)
    q, k, v = (torch.randn(1, 40, 32).to(dtype) for _ in range(3))
    q[0, 5, 3] = float("nan")
    k[0, 7, 0] = float("inf")
    ref = F.scaled_dot_product_attention(q, k, v)
    out = F.scaled_dot_product_attention(q.to("loom"), k.to("loom"), v.to("loom")).cpu()
    assert torch.equal(out.isnan(), ref.isnan())
    torch.testing.assert_close(out.nan_to_num(), ref.nan_to_num(), rtol=2e-2, atol=2e-2)
    # The gradients are NaN where the CPU's are: the NaN row weighs NaN on
    # every key, so all of dK and dV, and its own row of dQ.
    k[0, 7, 0] = 0.0
    inputs = [tuple(t.to(dev).detach().requires_grad_() for t in (q, k, v)) for dev in ("cpu", "loom")]
    for qkv in inputs:
        out = F.scaled_dot_product_attention(*qkv)
        out.backward(torch.ones_like(out))
    for r, l in zip(*inputs):
        assert torch.equal(l.grad.cpu().isnan(), r.grad.isnan())
        torch.testing.assert_close(l.grad.cpu().nan_to_num(), r.grad.nan_to_num(), rtol=2e-2,
                                   atol=2e-2)


def test_sdpa_hidden_infinite_values_add_nothing():
    # A key hidden from a query adds nothing to its row, even where its value
    # (the output) or its key (the query gradient) is infinite: rows 64..99
    # share a tile with key 100 but cannot see it, and keep the bits they
    # have with that key zero.
    torch.manual_seed(23)
    q, k, v = (torch.randn(1, 2, 150, 16) for _ in range(3))

    def run(key, value):
        qd, kd, vd = (t.to("loom").requires_grad_() for t in (q, key, value))
        out = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        out[:, :, :100].sum().backward()
        return out.detach().cpu()[:, :, :100], qd.grad.cpu()[:, :, :100]

    zero_k, zero_v, inf_k, inf_v = k.clone(), v.clone(), k.clone(), v.clone()
    zero_k[:, :, 100] = zero_v[:, :, 100] = 0.0
    inf_k[:, :, 100] = inf_v[:, :, 100] = float("inf")
    out, dq = run(zero_k, zero_v)
    assert bool(out.isfinite().all()) and bool(dq.isfinite().all())
    assert torch.equal(run(zero_k, inf_v)[0], out)
    assert torch.equal(run(inf_k, zero_v)[1], dq)


@pytest.mark.parametrize("shape", [(8, 1, 4096, 64, 64), (3, 3, 1000, 24, 40), (2, 4, 17, 256, 256),
                                   (1, 2, 16384, 16, 200), (1, 1, 16385, 32, 32), (2, 4, 1, 8, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_decoding(shape, causal):
    # Up to 4 queries over up to 16384 keys (one more key: the fused tiles)
    # read each key and value row once; odd head dims, a negative scale, and
    # the gradients through the log-sum-exp it leaves.
    torch.manual_seed(20)
    bh, L, S, e, ev = shape
    (qc, qd), (kc, kd), (vc, vd) = bf16_qkv(shape)
    for scale in (None, -0.3):
        sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, grad=scale is not None,
                    is_causal=causal, scale=scale)
    # the log-sum-exp the backward reads, against float64
    lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        qd.detach()[None], kd.detach()[None], vd.detach()[None], is_causal=causal)[1]
    s64 = qc.detach().double() @ kc.detach().double().transpose(-1, -2) / e ** 0.5
    if causal:
        s64 = s64.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.cpu()[0].double(), torch.logsumexp(s64, -1), rtol=1e-5,
                               atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_decoding_nan_rows_and_columns(causal):
    # A NaN score makes its query's row NaN, an infinite key every row whose
    # score with it is +inf or NaN; columns past the head dims (NaN here)
    # are never read. (Causal rows hide key 7, which the CPU kernel still
    # adds into their scores: no infinite key there.)
    torch.manual_seed(21)
    full = [torch.randn(3, n, 32).bfloat16() for n in (4, 300, 300)]
    for t in full:
        t[..., 24:] = float("nan")
    q, k, v = (t[..., :24].clone() for t in full)
    q[0, 2, 3] = float("nan")
    if not causal:
        k[1, 7, 0] = float("inf")
    for t, c in zip(full, (q, k, v)):
        t[..., :24] = c
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out = F.scaled_dot_product_attention(*(t.to("loom")[..., :24] for t in full),
                                         is_causal=causal).cpu()
    assert torch.equal(out.isnan(), ref.isnan())
    assert bool(out.isnan().any())
    torch.testing.assert_close(out.nan_to_num(), ref.nan_to_num(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_skips_the_tiles_its_mask_hides(dtype):
    # A KV cache's mask: query i, at position 100 + i, sees slots 0..100 + i
    # of 300, so the last key tile is hidden from every query, and a query
    # block's first rows miss tiles its later rows see; slots 64..127, a
    # whole tile, are hidden from all. Skipping the hidden tiles gives the
    # bits of a mask that hides them by a large finite bias, whose tiles are
    # computed.
    torch.manual_seed(16)
    q, k, v = (torch.randn(1, 2, n, 16).to(dtype) for n in (150, 300, 300))
    mask = torch.arange(300)[None] <= torch.arange(150)[:, None] + 100
    mask[:, 64:128] = False
    bias = torch.zeros(150, 300).to(dtype).masked_fill(~mask, -1e30)
    qd, kd, vd = (t.to("loom") for t in (q, k, v))
    skipped = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask.to("loom"))
    computed = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=bias.to("loom"))
    assert torch.equal(skipped.cpu(), computed.cpu())
    close(skipped, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), dtype, scale=2.0)


def test_sdpa_native_op_and_fallback_choices():
    q = torch.randn(2, 2, 4, 8, device="loom")
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q)
    assert out[0].shape == (2, 2, 4, 8) and out[1].shape == (2, 2, 4)
    ref = F.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu())
    torch.testing.assert_close(out[0].cpu(), ref, rtol=1e-5, atol=1e-5)
    # dropout and grouped heads go to the math path
    assert torch._fused_sdp_choice(q, q, q, None, 0.5, False) == 0
    k = torch.randn(2, 1, 4, 8, device="loom")
    assert torch._fused_sdp_choice(q, k, k, None, 0.0, False, enable_gqa=True) == 0


# ---- fused optimizers ------------------------------------------------------------------------------


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, fused=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, fused=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.05, maximize=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3, maximize=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=1e-2, fused=True),
])
def test_fused_optimizers_match_cpu(make_opt):
    torch.manual_seed(15)
    params = [torch.randn(5, 3), torch.randn(7)]
    grads_seq = [[torch.randn_like(p) for p in params] for _ in range(4)]
    results = []
    for device in ("cpu", "loom"):
        ps = [p.clone().to(device).requires_grad_() for p in params]
        opt = make_opt(ps)
        for gs in grads_seq:
            for p, g in zip(ps, gs):
                p.grad = g.to(device)
            opt.step()
        results.append([p.detach().cpu() for p in ps])
    for a, b in zip(results[1], results[0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_adamw_grad_scale_matches_cpu(amsgrad):
    # The unscaled gradient is written back; a found inf skips the step.
    torch.manual_seed(16)
    n = 1000  # past one vector block, with a tail
    state = [torch.randn(n), torch.randn(n) * 8, torch.randn(n), torch.rand(n), torch.rand(n)]
    for inf in (0.0, 1.0):
        results = []
        for device in ("cpu", "loom"):
            p, g, m, v, vmax = (t.clone().to(device) for t in state)
            step = torch.tensor(3.0, device=device)
            torch._fused_adamw_([p], [g], [m], [v], [vmax] if amsgrad else [], [step], lr=1e-2,
                                beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8,
                                amsgrad=amsgrad, maximize=False,
                                grad_scale=torch.tensor(8.0, device=device),
                                found_inf=torch.tensor(inf, device=device))
            results.append([t.cpu() for t in (p, g, m, v, vmax)])
        for a, b in zip(results[1], results[0]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
