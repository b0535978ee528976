"""native_group_norm's autograd on loom (csrc/ops/nn/group_norm_autograd.cpp).

The gradients of channels-last inputs come back channels-last, as on the
CPU, with the CPU's values; the gradients of the mean and rstd outputs and
double backward (create_graph) work as PyTorch's own formula does."""

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()), reason="loom device not built")

FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def _leaves(device, shape, dtype, fmt, affine, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=dtype)
    if fmt is not None:
        x = x.contiguous(memory_format=fmt)
    c = shape[1]
    w = torch.randn(c, generator=g, dtype=dtype) if affine else None
    b = torch.randn(c, generator=g, dtype=dtype) if affine else None
    return [t.to(device).requires_grad_() if t is not None else None for t in (x, w, b)]


def _grads(device, shape, groups, dtype, fmt, affine, create_graph=False):
    x, w, b = _leaves(device, shape, dtype, fmt, affine)
    y = F.group_norm(x, groups, w, b)
    go = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    if fmt is not None:
        go = go.contiguous(memory_format=fmt)
    go = go.to(device)
    inputs = [t for t in (x, w, b) if t is not None]
    return y, torch.autograd.grad(y, inputs, go, create_graph=create_graph), inputs


@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 4), 3), ((3, 8, 5, 5), 2), ((2, 4, 2, 3, 4), 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_channels_last_gradients_as_cpu(shape, groups, affine):
    fmt = FORMATS[len(shape)]
    yc, gc, _ = _grads("cpu", shape, groups, torch.float32, fmt, affine)
    yd, gd, _ = _grads("loom", shape, groups, torch.float32, fmt, affine)
    assert yd.stride() == yc.stride()
    for c, d in zip(gc, gd):
        assert d.stride() == c.stride()
        torch.testing.assert_close(d.cpu(), c)
    # The input gradient keeps the input's format.
    assert gd[0].is_contiguous(memory_format=fmt) and not gd[0].is_contiguous()


def test_contiguous_gradients_unchanged():
    yc, gc, _ = _grads("cpu", (2, 6, 3, 4), 3, torch.float32, None, True)
    yd, gd, _ = _grads("loom", (2, 6, 3, 4), 3, torch.float32, None, True)
    for c, d in zip(gc, gd):
        assert d.is_contiguous() and d.stride() == c.stride()
        torch.testing.assert_close(d.cpu(), c)


@pytest.mark.parametrize("affine", [True, False])
def test_statistics_outputs_take_gradients(affine):
    """Gradients flowing into native_group_norm's mean and rstd (the
    differentiable formula) match the CPU's."""
    def run(device):
        x, w, b = _leaves(device, (2, 6, 3, 4), torch.float64, torch.channels_last, affine)
        y, mean, rstd = torch.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5)
        loss = (y * y).sum() + (mean * 3).sum() + (rstd ** 2).sum()
        return torch.autograd.grad(loss, [t for t in (x, w, b) if t is not None])
    for c, d in zip(run("cpu"), run("loom")):
        torch.testing.assert_close(d.cpu(), c)


def test_double_backward_as_cpu():
    out = {}
    for device in ("cpu", "loom"):
        _, (gx, gw, gb), inputs = _grads(device, (2, 6, 3, 4), 3, torch.float64,
                                         torch.channels_last, True, create_graph=True)
        loss = (gx * gx).sum() + (gw * gb).sum()
        out[device] = torch.autograd.grad(loss, inputs, allow_unused=True)
    assert out["loom"][2] is None and out["cpu"][2] is None  # the bias's second order
    for c, d in zip(out["cpu"][:2], out["loom"][:2]):
        torch.testing.assert_close(d.cpu(), c)


@pytest.mark.parametrize("affine", [True, False])
def test_gradcheck_and_gradgradcheck(affine):
    x, w, b = _leaves("loom", (2, 4, 2, 3), torch.float64, torch.channels_last, affine)
    if affine:
        args, fn = (x, w, b), lambda x, w, b: torch.native_group_norm(x, w, b, 2, 4, 6, 2, 1e-5)
    else:
        args, fn = (x,), lambda x: torch.native_group_norm(x, None, None, 2, 4, 6, 2, 1e-5)
    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradgradcheck(fn, args)


def test_input_only_and_weight_only_gradients():
    """Only the gradients asked for are computed, with the CPU's values (the
    CPU's own channels-last backward crashes when the input needs no
    gradient: its reference takes the input NCHW)."""
    def weight_grad(device, fmt):
        x, w, b = _leaves(device, (2, 6, 3, 4), torch.float32, fmt, True)
        x.requires_grad_(False)
        gw, = torch.autograd.grad(F.group_norm(x, 3, w, b).sum(), [w])
        return gw
    torch.testing.assert_close(weight_grad("loom", torch.channels_last).cpu(),
                               weight_grad("cpu", None))
    x, w, b = _leaves("loom", (2, 6, 3, 4), torch.float32, torch.channels_last, True)
    w.requires_grad_(False)
    gx, gb = torch.autograd.grad(F.group_norm(x, 3, w, b).sum(), [x, b])
    assert gx.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(gb.cpu(), torch.full((6,), 24.0))


def test_no_grad_and_inference_mode():
    x, w, b = _leaves("loom", (2, 6, 3, 4), torch.float32, torch.channels_last, True)
    with torch.no_grad():
        assert F.group_norm(x, 3, w, b).grad_fn is None
    with torch.inference_mode():
        assert F.group_norm(x.detach(), 3, w.detach(), b.detach()).grad_fn is None


def test_bad_groups_still_raise():
    x = torch.randn(2, 6, 4, device="loom", requires_grad=True)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 4)


def test_functorch_grad_and_vmap():
    """torch.func's transforms run through loom's autograd as through the
    CPU's."""
    from torch.func import grad, vmap
    out = {}
    for device in ("cpu", "loom"):
        x, w, b = (t.detach() for t in _leaves(device, (2, 6, 3, 4), torch.float64,
                                               torch.channels_last, True))
        g = grad(lambda x_, w_: (F.group_norm(x_, 3, w_, b) ** 2).sum(), argnums=(0, 1))(x, w)
        xc = x.contiguous()  # vmap asks no memory format but the contiguous one
        v = vmap(lambda x_: F.group_norm(x_, 3, w, b))(xc.unsqueeze(0).expand(2, *x.shape))
        out[device] = (*g, v)
    for c, d in zip(out["cpu"], out["loom"]):
        torch.testing.assert_close(d.cpu(), c)


def test_forward_mode_ad_as_cpu():
    """(NCHW: the CPU's own forward-mode formula fails on channels-last.)"""
    import torch.autograd.forward_ad as fwAD
    out = {}
    for device in ("cpu", "loom"):
        x, w, b = (t.detach() for t in _leaves(device, (2, 6, 3, 4), torch.float64, None, True))
        tx = torch.randn(x.shape, generator=torch.Generator().manual_seed(3),
                         dtype=x.dtype).to(device)
        with fwAD.dual_level():
            y = F.group_norm(fwAD.make_dual(x, tx), 3, fwAD.make_dual(w, torch.ones_like(w)), b)
            out[device] = fwAD.unpack_dual(y)
    for c, d in zip(out["cpu"], out["loom"]):
        torch.testing.assert_close(d.cpu(), c)
