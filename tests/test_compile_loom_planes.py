"""A convolution's input padded once for its forward and its weight gradient
(loom::conv2d_planes and loom::conv2d_planes_backward,
csrc/ops/conv/conv_planes.cpp) and the compiler pass that uses them
(python/torch_loom/compiler/planes.py): the regular convolution's bits
(the same kernels over the same planes), the CPU's values, any thread
count, the generic path, fewer pads, and a compiled training run that ends
with eager's parameters."""

import collections
import contextlib
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from bench.models import BasicBlock
from torch_loom import compiler
from torch_loom.compiler import jit, planes

from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python

aten = torch.ops.aten

# (n, c, o, h, w, stride): the padded rows (3x3 stride 1 over few input
# channels), and stride 2 (which shares no planes here: the regular
# convolution's results). Winograd's 3x3 stride-1 convolutions read their
# input in place, NCHW or channels last: nothing to share.
CASES = [(2, 5, 24, 14, 11, 1), (8, 3, 32, 16, 16, 1), (2, 8, 16, 10, 9, 2)]


def _case(n, c, o, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g)
    wt = torch.randn(o, c, 3, 3, generator=g) / (3 * c ** 0.5)
    b = torch.randn(o, generator=g)
    return x, wt, b, g


def _planes_and_grads(x, wt, b, s, mask=(True, True, True)):
    out, pl = torch.ops.loom.conv2d_planes(x, wt, b, [s, s], [1, 1], [1, 1], 1)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(x.device)
    grads = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl, [wt.shape[0]], [s, s], [1, 1],
                                                  [1, 1], 1, list(mask))
    return out, pl, dy, grads


@pytest.mark.parametrize("case", CASES)
def test_planes_give_the_regular_convolutions_bits_and_the_cpus_values(case, no_fallback):
    n, c, o, h, w, s = case
    cx, cw, cb, _ = _case(n, c, o, h, w)
    x, wt, b = cx.to("loom"), cw.to("loom"), cb.to("loom")
    out, pl, dy, (gi, gw, gb) = _planes_and_grads(x, wt, b, s)
    assert (pl.numel() > 0) == (s == 1)  # stride 2 falls back to the regular passes
    ref = aten.convolution(x, wt, b, [s, s], [1, 1], [1, 1], False, [0, 0], 1)
    assert torch.equal(out.cpu(), ref.cpu())
    want = aten.convolution_backward(dy, x, wt, [o], [s, s], [1, 1], [1, 1], False, [0, 0], 1,
                                     [True] * 3)
    for got, exp in zip((gi, gw, gb), want):
        assert torch.equal(got.cpu(), exp.cpu())
    cx.requires_grad_(), cw.requires_grad_(), cb.requires_grad_()
    cout = F.conv2d(cx, cw, cb, s, 1)
    cout.backward(dy.cpu())
    torch.testing.assert_close(out.cpu(), cout.detach(), rtol=1e-4, atol=1e-4)
    for got, exp in zip((gi, gw, gb), (cx.grad, cw.grad, cb.grad)):
        torch.testing.assert_close(got.cpu(), exp, rtol=1e-4, atol=1e-3)


CL = torch.channels_last


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", [(CL, CL, CL), (CL, None, None), (None, CL, CL),
                                    (CL, CL, None)], ids=["all", "x", "w_dy", "x_w"])
def test_channels_last_gives_the_regular_convolutions_bits_and_layouts(case, layout, no_fallback):
    # x, the weight and dy each channels last or contiguous: the planes
    # are shared where the NCHW ones are, and the output and gradients are
    # the regular convolution's, bits and strides (the CPU's)
    n, c, o, h, w, s = case
    cx, cw, cb, _ = _case(n, c, o, h, w)
    lay = [lambda t, f=f: t.contiguous(memory_format=f) if f else t for f in layout]
    x, wt, b = lay[0](cx.to("loom")), lay[1](cw.to("loom")), cb.to("loom")
    out, pl = torch.ops.loom.conv2d_planes(x, wt, b, [s, s], [1, 1], [1, 1], 1)
    assert (pl.numel() > 0) == (s == 1)
    ref = aten.convolution(x, wt, b, [s, s], [1, 1], [1, 1], False, [0, 0], 1)
    cref = aten.convolution(lay[0](cx), lay[1](cw), cb, [s, s], [1, 1], [1, 1], False, [0, 0], 1)
    assert torch.equal(out.cpu(), ref.cpu()) and out.stride() == ref.stride() == cref.stride()
    dy = lay[2](torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to("loom"))
    got = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl, [o], [s, s], [1, 1], [1, 1], 1,
                                                [True] * 3)
    want = aten.convolution_backward(dy, x, wt, [o], [s, s], [1, 1], [1, 1], False, [0, 0], 1,
                                     [True] * 3)
    cwant = aten.convolution_backward(dy.cpu(), lay[0](cx), lay[1](cw), [o], [s, s], [1, 1],
                                      [1, 1], False, [0, 0], 1, [True] * 3)
    for a, e, ce in zip(got, want, cwant):
        assert torch.equal(a.cpu(), e.cpu()) and a.stride() == e.stride() == ce.stride()
        torch.testing.assert_close(a.cpu(), ce, rtol=1e-4, atol=1e-3)
    if s == 1:  # the weight gradient reads the planes: another input's give its gradient
        x2 = lay[0](torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to("loom"))
        _, pl2 = torch.ops.loom.conv2d_planes(x2, wt, b, [1, 1], [1, 1], [1, 1], 1)
        gw2 = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl2, [o], [1, 1], [1, 1], [1, 1],
                                                    1, [False, True, False])[1]
        want2 = aten.convolution_backward(dy, x2, wt, [o], [1, 1], [1, 1], [1, 1], False, [0, 0],
                                          1, [False, True, False])[1]
        assert torch.equal(gw2.cpu(), want2.cpu()) and gw2.stride() == want2.stride()
        assert not torch.equal(gw2.cpu(), got[1].cpu())


def test_backward_masks_and_planes_left_out(no_fallback):
    x, wt, b, _ = (t.to("loom") if isinstance(t, torch.Tensor) else t for t in _case(2, 5, 24, 14, 11))
    out, pl, dy, full = _planes_and_grads(x, wt, b, 1)
    # the weight gradient alone, and the planes left out (an empty tensor:
    # the regular backward) give the same gradients
    _, _, _, (gi, gw, gb) = _planes_and_grads(x, wt, b, 1, (False, True, False))
    assert gi is None and gb is None and torch.equal(gw.cpu(), full[1].cpu())
    none = torch.ops.loom.conv2d_planes_backward(dy, x, wt, torch.empty(0, device="loom"), [24],
                                                 [1, 1], [1, 1], [1, 1], 1, [True] * 3)
    for a, e in zip(none, full):
        assert torch.equal(a.cpu(), e.cpu())
    # the weight gradient reads the planes, not the input: another input's
    # planes give that input's weight gradient (and the input gradient is x's)
    x2 = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to("loom")
    _, pl2 = torch.ops.loom.conv2d_planes(x2, wt, b, [1, 1], [1, 1], [1, 1], 1)
    other = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl2, [24], [1, 1], [1, 1], [1, 1],
                                                  1, [True] * 3)
    want2 = aten.convolution_backward(dy, x2, wt, [24], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                      [True] * 3)
    assert torch.equal(other[1].cpu(), want2[1].cpu()) and torch.equal(other[0].cpu(), full[0].cpu())
    assert not torch.equal(other[1].cpu(), full[1].cpu())
    # planes of the wrong shape are not read: the regular backward
    wrong = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl[:, :, :-16].contiguous(), [24],
                                                  [1, 1], [1, 1], [1, 1], 1, [True] * 3)
    for a, e in zip(wrong, full):
        assert torch.equal(a.cpu(), e.cpu())


def test_other_dtypes_and_layouts_share_nothing(no_fallback):
    x, wt, b, _ = _case(2, 8, 8, 9, 9)
    xd, wd = x.double().to("loom"), wt.double().to("loom")
    out, pl = torch.ops.loom.conv2d_planes(xd, wd, None, [1, 1], [1, 1], [1, 1], 1)
    assert pl.numel() == 0
    assert torch.equal(out.cpu(), aten.convolution(xd, wd, None, [1, 1], [1, 1], [1, 1], False,
                                                   [0, 0], 1).cpu())
    xt = x.to("loom").transpose(2, 3)  # not contiguous
    out, pl = torch.ops.loom.conv2d_planes(xt, wt.to("loom"), None, [1, 1], [1, 1], [1, 1], 1)
    assert pl.numel() == 0
    # Winograd reads an NCHW or channels-last input in place: no planes
    for fmt in (torch.contiguous_format, CL):
        xw = torch.randn(2, 16, 12, 12).contiguous(memory_format=fmt).to("loom")
        ww = torch.randn(16, 16, 3, 3).to("loom")
        out, pl = torch.ops.loom.conv2d_planes(xw, ww, None, [1, 1], [1, 1], [1, 1], 1)
        assert pl.numel() == 0
        assert torch.equal(out.cpu(), aten.convolution(xw, ww, None, [1, 1], [1, 1], [1, 1], False,
                                                       [0, 0], 1).cpu())
    with pytest.raises(RuntimeError, match="loom::conv2d_planes: expected a 4-d input"):
        torch.ops.loom.conv2d_planes(x[0].to("loom"), wt.to("loom"), None, [1, 1], [1, 1],
                                     [1, 1], 1)


_DIGEST = """
import torch
aten = torch.ops.aten
g = torch.Generator().manual_seed(3)
for n, c, o, ih, iw in ((3, 5, 24, 14, 11), (8, 3, 32, 16, 16)):
    x = torch.randn(n, c, ih, iw, generator=g).to("loom")
    wt = (torch.randn(o, c, 3, 3, generator=g) / (3 * c)).to("loom")
    out, pl = torch.ops.loom.conv2d_planes(x, wt, None, [1, 1], [1, 1], [1, 1], 1)
    assert pl.numel() > 0
    dy = torch.randn(out.shape, generator=g).to("loom")
    grads = torch.ops.loom.conv2d_planes_backward(dy, x, wt, pl, None, [1, 1], [1, 1], [1, 1], 1,
                                                  [True, True, False])
    want = aten.convolution_backward(dy, x, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                     [True, True, False])
    ref = aten.convolution(x, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert torch.equal(out.cpu(), ref.cpu())
    assert all(torch.equal(a.cpu(), e.cpu()) for a, e in zip(grads[:2], want[:2]))
    add(out, *grads[:2])
print("DIGEST", h.hexdigest())
"""


def test_results_do_not_depend_on_the_thread_count_and_the_generic_path_agrees():
    one = digest_with_threads(_DIGEST, 1)
    here = io.StringIO()  # this process: its own thread count
    with contextlib.redirect_stdout(here):
        exec(DIGEST_PREAMBLE + _DIGEST, {})
    assert here.getvalue().strip() == one
    # the generic kernels (their own bits): the planes still equal the regular passes
    out = run_python(DIGEST_PREAMBLE + _DIGEST, env={"LOOM_CPU_FEATURES": "generic",
                                                     "LOOM_NUM_THREADS": "3"}).stdout
    assert "DIGEST" in out


# ---- the compiler's pass --------------------------------------------------------------

class _Net(nn.Module):
    """A stride-1 3x3 convolution on the padded rows (the stem, over 5
    channels) and Winograd's (the blocks' stride-1 ones)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(5, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 128, 2))
        self.fc = nn.Linear(128, 5)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _train(model, compiled, steps=3, dynamic=None, fmt=torch.contiguous_format):
    torch.manual_seed(0)
    x, y = torch.randn(8, 5, 16, 16).to("loom"), torch.randint(0, 5, (8,)).to("loom")
    x = x.contiguous(memory_format=fmt)
    model = copy.deepcopy(model).to("loom", memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run = torch.compile(model, backend="loom", dynamic=dynamic) if compiled else model

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    losses = [step() for _ in range(steps)]
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        losses.append(step())
    pads = collections.Counter(e.name for e in prof.events())["conv.pad"]
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}, pads


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
def test_compiled_training_pads_each_input_once_and_keeps_eagers_parameters(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Net()
    eager_losses, eager_state, eager_pads = _train(model, False)
    compiler.reset_counters()
    losses, state, pads = _train(model, True)
    c = compiler.counters()
    assert c["graphs_fallen_back"] == 0
    # the stem (Winograd's read their input in place)
    assert c["conv_planes"] == 1
    # it pads its input once instead of twice
    assert pads == eager_pads - 1 and pads > 0
    assert losses == eager_losses and losses[-1] < losses[0]
    for name, t in state.items():  # parameters, running statistics, counts
        assert torch.equal(t, eager_state[name]), name
    assert torch.loom.fallback_ops() == {}


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
def test_compiled_channels_last_training_pads_only_the_stem(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Net()
    eager_losses, eager_state, eager_pads = _train(model, False, fmt=CL)
    compiler.reset_counters()
    losses, state, pads = _train(model, True, fmt=CL)
    c = compiler.counters()
    # channels last, the Winograd convolutions read their input and dy in
    # place: the stem's planes alone are shared
    assert c["graphs_fallen_back"] == 0 and c["conv_planes"] == 1
    assert pads == eager_pads - 1
    assert losses == eager_losses and losses[-1] < losses[0]
    for name, t in state.items():
        assert torch.equal(t, eager_state[name]), name
        if t.dim() == 4:
            assert t.is_contiguous(memory_format=CL), name
    torch._dynamo.reset()


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
def test_the_pass_can_be_switched_off(monkeypatch, no_fallback):
    torch._dynamo.reset()
    monkeypatch.setattr(planes, "ENABLED", False)
    compiler.reset_counters()
    _, _, pads = _train(_Net(), True, steps=1)
    assert compiler.counters()["conv_planes"] == 0
    torch._dynamo.reset()
    monkeypatch.setattr(planes, "ENABLED", True)
    _, _, fewer = _train(_Net(), True, steps=1)
    assert fewer == pads - 1
    torch._dynamo.reset()


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
def test_symbolic_sizes_keep_their_convolutions(no_fallback):
    torch._dynamo.reset()
    compiler.reset_counters()
    eager, _, _ = _train(_Net(), False, steps=1)
    losses, _, _ = _train(_Net(), True, steps=1, dynamic=True)
    c = compiler.counters()
    assert c["graphs_dynamic"] > 0 and c["conv_planes"] == 0
    torch.testing.assert_close(losses, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
