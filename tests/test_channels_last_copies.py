"""Layout copies a channels-last training step does not make on loom: each
test profiles one op's launches and checks that a copy it no longer needs
(copy.strided, with the tensor's shape) does not come back, and that the
results still equal the CPU's, laid out as the CPU lays them out."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last


def _copies(fn):
    """The shapes of the tensors that fn's copy launches copied."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 record_shapes=True) as prof:
        fn()
        torch.loom.synchronize()
    shapes = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        mine = [k for k in e.kernels if k.name == "copy.strided"]
        if mine and not any(any(k.name == "copy.strided" for k in c.kernels)
                            for c in e.cpu_children):
            shapes += [tuple(e.input_shapes[0]) if e.input_shapes else None] * len(mine)
    return shapes


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=2, dilation=2)], ids=str)
def test_conv_backward_reads_a_channels_last_output_gradient_in_place(kw):
    # A 3x3 stride-1 convolution's input gradient (the flipped weight's
    # forward) and weight gradient (padded or Winograd planes) read dy
    # through its strides: dy is not copied to NCHW first.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 20, 20, generator=g).contiguous(memory_format=CL)
    w = torch.randn(48, 32, 3, 3, generator=g).contiguous(memory_format=CL)
    res = {}
    for dev in ("cpu", "loom"):
        xd, wd = x.to(dev).detach().requires_grad_(), w.to(dev).detach().requires_grad_()
        y = F.conv2d(xd, wd, **kw)
        go = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
        go = go.contiguous(memory_format=CL).to(dev)
        if dev == "loom":
            copies = _copies(lambda: y.backward(go))
            assert tuple(go.shape) not in copies, copies
        else:
            y.backward(go)
        res[dev] = (xd.grad, wd.grad)
    for c, l in zip(res["cpu"], res["loom"]):
        assert l.stride() == c.stride()
        torch.testing.assert_close(l.cpu(), c, rtol=1e-4, atol=1e-4)
