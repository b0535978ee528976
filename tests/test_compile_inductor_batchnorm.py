"""Batch norm in loom graphs under a plain torch.compile: it stays whole (the
library's kernels, as in eager), and a training batch norm with the ReLU
after it (and a residual added before the ReLU) runs as one
loom::batch_norm_relu call, its backward with the ReLU's gradient as one
loom::batch_norm_relu_backward call, with eager's bits."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

_FWD = "torch.ops.loom.batch_norm_relu.default("
_BWD = "torch.ops.loom.batch_norm_relu_backward.default("
_UNFUSED = "torch.ops.aten._native_batch_norm_legit_functional.default("


@pytest.fixture(autouse=True)
def _no_cpu_fallback(no_fallback):
    yield


class _Block(nn.Module):
    """conv(relu(bn(x))), or conv(relu(bn(x) + r)) when called with a
    residual (the convolution reads the ReLU's output, so the backward gets
    that output, not a saved mask); `scale` puts a multiply between batch
    norm and ReLU (no fusion)."""

    def __init__(self, c, scale=False):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.scale = scale

    def forward(self, x, r=None):
        y = self.bn(x)
        if self.scale:
            y = y * 2
        if r is not None:
            y = y + r
        return self.conv(F.relu(y))


def _run(block, compiled, x, r, g):
    """One forward and backward: (output, x.grad, r.grad, weight.grad,
    bias.grad, running_mean, running_var), and the generated code."""
    from torch._inductor.utils import run_and_get_code

    x = x.detach().clone().requires_grad_()
    r = r.detach().clone().requires_grad_() if r is not None else None
    fn = torch.compile(block) if compiled else block

    def step():
        y = fn(x, r)
        y.backward(g)
        return y.detach()

    if compiled:
        y, codes = run_and_get_code(step)
    else:
        y, codes = step(), []
    bn = block.bn
    got = (y, x.grad, r.grad if r is not None else None, bn.weight.grad, bn.bias.grad,
           bn.running_mean, bn.running_var)
    return [t.detach().cpu() if t is not None else None for t in got], "\n".join(codes)


def _inputs(shape, channels_last):
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x, r, g = (torch.randn(shape).to("loom").contiguous(memory_format=fmt) for _ in range(3))
    return x, r, g


def _blocks(c, scale=False, channels_last=False):
    torch.manual_seed(1)
    a = _Block(c, scale)
    with torch.no_grad():
        a.bn.weight.uniform_(0.5, 1.5)
        a.bn.bias.uniform_(-0.5, 0.5)
    b = _Block(c, scale)
    b.load_state_dict(a.state_dict())
    a, b = a.to("loom"), b.to("loom")
    if channels_last:
        a, b = a.to(memory_format=torch.channels_last), b.to(memory_format=torch.channels_last)
    return a, b


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_batch_norm_relu_is_one_library_call_each_way_with_eager_bits(channels_last, residual):
    """relu(bn(x)) and relu(bn(x) + r) in training: the forward is one
    loom::batch_norm_relu call, the backward one loom::batch_norm_relu_backward
    (with a residual whose gradient the backward also needs, it keeps the
    masked gradient), and the output, every gradient and the running
    statistics equal loom eager's bit for bit."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    x, r, g = _inputs((8, 24, 10, 10), channels_last)
    r = r if residual else None
    compiled_block, eager_block = _blocks(24, channels_last=channels_last)
    got, code = _run(compiled_block, True, x, r, g)
    want, _ = _run(eager_block, False, x, r, g)
    assert code.count(_FWD) == 1 and code.count(_BWD) == 1, code
    assert _UNFUSED not in code and "native_batch_norm_backward" not in code.split(_BWD)[-1]
    assert counters["inductor"]["loom_batch_norm_relu"] == 2
    if residual:
        assert "True)" in code.split(_BWD)[1].split("\n")[0]  # keep_masked: r's gradient
    if channels_last:
        assert not got[0].is_contiguous()  # the layout eager gives it
    for name, a, b in zip(("out", "dx", "dr", "dw", "db", "mean", "var"), got, want):
        if b is None:
            assert a is None
            continue
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_batch_norm_without_relu_stays_whole_and_matches_eager():
    """A batch norm whose output is scaled before the ReLU is not fused, and
    is not decomposed either: the library's batch norm, forward and
    backward, as extern calls, with eager's results."""
    torch._dynamo.reset()
    x, r, g = _inputs((4, 16, 6, 6), True)
    compiled_block, eager_block = _blocks(16, scale=True, channels_last=True)
    got, code = _run(compiled_block, True, x, r, g)
    want, _ = _run(eager_block, False, x, r, g)
    assert _FWD not in code and _BWD not in code
    assert _UNFUSED in code and "torch.ops.aten.native_batch_norm_backward.default(" in code
    for name, a, b in zip(("out", "dx", "dr", "dw", "db", "mean", "var"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.parametrize("library", [True, False])
def test_switches_off_keep_the_ops_unfused_or_decomposed(library):
    """config.batch_norm_relu off: batch norm and ReLU stay separate ops;
    config.batch_norm_library off too: Inductor decomposes batch norm into
    generated code. Results as eager's either way."""
    from torch_loom._inductor import config

    torch._dynamo.reset()
    x, _, g = _inputs((4, 16, 6, 6), False)
    compiled_block, eager_block = _blocks(16)
    with config.patch(batch_norm_relu=False, batch_norm_library=library):
        got, code = _run(compiled_block, True, x, None, g)
    want, _ = _run(eager_block, False, x, None, g)
    assert _FWD not in code and _BWD not in code
    assert (_UNFUSED in code) == library
    assert ("torch.ops.aten.native_batch_norm_backward.default(" in code) == library
    for name, a, b in zip(("out", "dx", "dr", "dw", "db", "mean", "var"), got, want):
        if b is None:
            continue
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


def test_cpu_graphs_keep_inductors_batch_norm():
    """CPU graphs are not touched: Inductor decomposes their batch norm into
    generated code as before."""
    torch._dynamo.reset()
    from torch._inductor.utils import run_and_get_code

    bn = nn.BatchNorm2d(8)
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    _, codes = run_and_get_code(lambda: torch.compile(lambda t: F.relu(bn(t)))(x).sum().backward())
    code = "\n".join(codes)
    assert "batch_norm_relu" not in code and _UNFUSED not in code
