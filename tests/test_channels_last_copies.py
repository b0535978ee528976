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


def _conv_step_copies(size, k, kw):
    """One channels-last conv2d forward and backward (batch 6, 32 -> 48
    channels, a k x k window over size x size) on loom and on the CPU: checks
    that the output and both gradients equal the CPU's in value and strides,
    and returns the shapes loom's copy launches copied."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 32, size, size, generator=g).contiguous(memory_format=CL)
    w = torch.randn(48, 32, k, k, generator=g).contiguous(memory_format=CL)
    shape = F.conv2d(x, w, **kw).shape
    go_cpu = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    go_cpu = go_cpu.contiguous(memory_format=CL)
    res, copies = {}, None
    for dev in ("cpu", "loom"):
        xd, wd = x.to(dev).detach().requires_grad_(), w.to(dev).detach().requires_grad_()
        go, out = go_cpu.to(dev), {}

        def step():
            out["y"] = F.conv2d(xd, wd, **kw)
            out["y"].backward(go)

        if dev == "loom":
            copies = _copies(step)
        else:
            step()
        res[dev] = (out["y"], xd.grad, wd.grad)
    for c, l in zip(res["cpu"], res["loom"]):
        assert l.stride() == c.stride()
        torch.testing.assert_close(l.cpu(), c, rtol=1e-4, atol=1e-4)
    return copies


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


@pytest.mark.parametrize("kw", [dict(kernel=3, stride=2, padding=1), dict(kernel=1, stride=2),
                                dict(kernel=1, stride=1), dict(kernel=3, stride=1, padding=1)],
                         ids=str)
def test_conv_channels_last_forward_and_backward_make_no_activation_copy(kw):
    # Strided and 1x1 windows run as GEMMs of channels-last rows, and the
    # Winograd and padded-row kernels write channels-last outputs in place:
    # neither the output, dy, nor the input gradient is copied between
    # layouts (batch 6: a copy of shape (6, ...) is an activation's).
    k = kw.pop("kernel")
    copies = _conv_step_copies(14, k, kw)
    assert not [s for s in copies if s and s[0] == 6], copies


@pytest.mark.parametrize("size", [5, 14], ids=["rows", "winograd"])
def test_conv_channels_last_3x3_copies_no_weight(size):
    # A channels-last 3x3 stride-1 window copies nothing, weight included:
    # Winograd's transform reads the weight where it lies and its gradient
    # is written channels last; where Winograd does not pay (a small image:
    # fewer than half the tiles' outputs are the image's) the forward and
    # the input gradient are GEMMs of channels-last rows, not the implicit
    # GEMM that wants the weight contiguous and writes NCHW.
    copies = _conv_step_copies(size, 3, dict(padding=1))
    assert not copies, copies


class _Block(torch.nn.Module):
    """A ResNet block with a strided 3x3 window and a 1x1 shortcut."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.a = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.b = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(32)
        self.short = torch.nn.Conv2d(16, 32, 1, stride=2, bias=False)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, x):
        y = F.relu(self.a(self.stem(x)))
        y = F.relu(self.bn(self.b(y)) + self.short(y))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def test_channels_last_training_step_copies_only_weights():
    # A channels-last training step copies no activation between layouts;
    # what is left are 2 copies of a convolution's weight (not of batch 6):
    # the 3-channel stem's, forward and weight gradient (padded rows). The
    # Winograd windows transform the channels-last weight where it lies and
    # write its gradient channels last; the rows read it in place. (Bench's
    # SmallResNet step: 34 copies, activations among them, before the
    # channels-last rows and in-place outputs; 16 before the Winograd
    # weights; now 2.)
    torch.manual_seed(0)
    model = _Block().to(memory_format=CL).to("loom")
    x = torch.randn(6, 3, 16, 16).contiguous(memory_format=CL).to("loom")
    y = torch.randint(0, 5, (6,)).to("loom")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    copies = _copies(step)
    assert not [s for s in copies if s and s[0] == 6], copies
    assert len(copies) <= 2, copies
