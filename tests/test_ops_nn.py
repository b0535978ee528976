"""Neural-network ops on loom (softmax, norms, losses, embedding) against the
CPU: forward and backward, odd shapes, non-contiguous inputs, four float
dtypes, bad input, and thread-count independence. Attention and the fused
optimizers have files of their own."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from nn_compare import DTYPES, close, grads, pair

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


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
