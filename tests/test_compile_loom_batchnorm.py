"""Batch norm fused with its ReLU (loom::batch_norm_relu and its backward,
kernels/nn/norm_batch_act.c) and the compiler pass that uses them
(python/torch_loom/compiler/batchnorm.py): the unfused library sequence's
bits, the CPU's values, any thread count, the generic path, and a compiled
residual network's training that ends with eager's parameters."""

import contextlib
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.models import BasicBlock
from torch_loom import compiler
from torch_loom.compiler import batchnorm, jit

from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python

aten = torch.ops.aten


def _loom(*ts):
    return [None if t is None else t.to("loom") for t in ts]


def _case(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = torch.randn(*shape, generator=g) * 3 + 1
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
    return x, w, b, rm, rv, torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


SHAPES = [(4, 8, 5, 7), (3, 6, 33), (2, 5), (1, 3, 17, 19)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_residual", [False, True])
def test_forward_is_batch_norm_then_add_then_relu_bit_for_bit(shape, with_residual, no_fallback):
    x, w, b, rm, rv, r, _ = _loom(*_case(shape))
    r = r if with_residual else None
    y, mean, invstd, new_rm, new_rv = torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, r, 0.1, 1e-5)
    ref = aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    expect = torch.relu(ref[0] + r if with_residual else ref[0])
    assert torch.equal(y.cpu(), expect.cpu())
    for got, want in zip((mean, invstd, new_rm, new_rv), ref[1:]):
        assert torch.equal(got.cpu(), want.cpu())
    # the CPU's batch norm and ReLU, within rounding
    cx, cw, cb, crm, crv = (t.cpu() for t in (x, w, b, rm, rv))
    cpu = F.batch_norm(cx, crm, crv, cw, cb, training=True, momentum=0.1, eps=1e-5)
    cpu = torch.relu(cpu + r.cpu() if with_residual else cpu)
    torch.testing.assert_close(y.cpu(), cpu, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(new_rm.cpu(), crm)  # moved in place on the CPU
    torch.testing.assert_close(new_rv.cpu(), crv)
    assert torch.equal(rm.cpu(), _case(shape)[3])  # the inputs stay as they were


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_is_threshold_backward_then_batch_norm_backward_bit_for_bit(shape, no_fallback):
    x, w, b, rm, rv, r, g = _loom(*_case(shape, seed=1))
    y, mean, invstd, _, _ = torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, r, 0.1, 1e-5)
    got = torch.ops.loom.batch_norm_relu_backward(g, y, x, w, mean, invstd)
    masked = aten.threshold_backward(g, y, 0)
    want = aten.native_batch_norm_backward(masked, x, w, rm, rv, mean, invstd, True, 1e-5,
                                           [True, True, True])
    assert len(got) == 3
    for a, e in zip(got, want):
        assert torch.equal(a.cpu(), e.cpu())
    kept = torch.ops.loom.batch_norm_relu_backward(g, y, x, w, mean, invstd, True)
    assert len(kept) == 4 and torch.equal(kept[3].cpu(), masked.cpu())
    for a, e in zip(kept, want):
        assert torch.equal(a.cpu(), e.cpu())
    # against the CPU's autograd through batch norm and ReLU
    cx, cw, cb = (t.cpu().requires_grad_() for t in (x, w, b))
    out = torch.relu(F.batch_norm(cx, None, None, cw, cb, training=True, eps=1e-5) + r.cpu())
    out.backward(g.cpu())
    for a, e in zip(got, (cx.grad, cw.grad, cb.grad)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)


def test_non_contiguous_operands_and_nan_inputs(no_fallback):
    x, w, b, rm, rv, r, g = _case((6, 4, 5, 3), seed=2)
    x[0, 1, 2, 2] = float("nan")
    xt = x.to("loom").transpose(2, 3)  # not contiguous: copied by the op
    rt, gt = r.to("loom").transpose(2, 3), g.to("loom").transpose(2, 3)
    w, b, rm, rv = _loom(w, b, rm, rv)
    y, mean, invstd, _, _ = torch.ops.loom.batch_norm_relu(xt, w, b, rm, rv, rt, 0.1, 1e-5)
    ref = aten._native_batch_norm_legit_functional(xt, w, b, rm, rv, True, 0.1, 1e-5)
    assert torch.allclose(y.cpu(), torch.relu(ref[0] + rt).cpu(), equal_nan=True, rtol=0, atol=0)
    assert torch.isnan(y[:, 1]).all() and not torch.isnan(y[:, 0]).any()
    got = torch.ops.loom.batch_norm_relu_backward(gt, y, xt, w, mean, invstd)
    want = aten.native_batch_norm_backward(aten.threshold_backward(gt, y, 0), xt, w, rm, rv,
                                           mean, invstd, True, 1e-5, [True] * 3)
    for a, e in zip(got, want):
        assert torch.allclose(a.cpu(), e.cpu(), equal_nan=True, rtol=0, atol=0)


def test_bad_inputs_raise_naming_the_op():
    x, w, b, rm, rv, r, g = _loom(*_case((2, 3, 4)))
    with pytest.raises(RuntimeError, match="loom::batch_norm_relu: expected a float32 input"):
        torch.ops.loom.batch_norm_relu(x.double(), w, b, rm, rv, None, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="loom::batch_norm_relu: weight must be float32 with 3"):
        torch.ops.loom.batch_norm_relu(x, w[:2], b, rm, rv, None, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="loom::batch_norm_relu: residual must be float32"):
        torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, r[:1], 0.1, 1e-5)
    y, mean, invstd, _, _ = torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, None, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="loom::batch_norm_relu_backward: output must be"):
        torch.ops.loom.batch_norm_relu_backward(g, y[:1], x, w, mean, invstd)


_DIGEST = """
import torch
g = torch.Generator().manual_seed(3)
x = torch.randn(8, 24, 19, 21, generator=g).to("loom")
r = torch.randn(8, 24, 19, 21, generator=g).to("loom")
dy = torch.randn(8, 24, 19, 21, generator=g).to("loom")
w, b, rm = (torch.randn(24, generator=g).to("loom") for _ in range(3))
rv = (torch.rand(24, generator=g) + 0.5).to("loom")
outs = list(torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, r, 0.1, 1e-5))
outs += list(torch.ops.loom.batch_norm_relu_backward(dy, outs[0], x, w, outs[1], outs[2], True))
add(*outs)
print("DIGEST", h.hexdigest())
"""


def test_results_do_not_depend_on_the_thread_count_or_the_isa_path():
    one = digest_with_threads(_DIGEST, 1)
    generic = run_python(DIGEST_PREAMBLE + _DIGEST, env={"LOOM_CPU_FEATURES": "generic",
                                                         "LOOM_NUM_THREADS": "3"}).stdout
    assert [l for l in generic.splitlines() if l.startswith("DIGEST")] == [one]
    here = io.StringIO()  # this process: its own thread count, the CPU's ISA path
    with contextlib.redirect_stdout(here):
        exec(DIGEST_PREAMBLE + _DIGEST, {})
    assert here.getvalue().strip() == one


# ---- the compiler's pass --------------------------------------------------------------

class _ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(4, 4, 1), BasicBlock(4, 8, 2))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _train(model, compiled, steps=3, memory_format=torch.contiguous_format):
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8).to("loom"), torch.randint(0, 5, (4,)).to("loom")
    x = x.contiguous(memory_format=memory_format)
    model = copy.deepcopy(model).to("loom", memory_format=memory_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run = torch.compile(model, backend="loom") if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_compiled_resnet_training_fuses_batch_norms_and_keeps_eagers_parameters(
        memory_format, no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _ResNet()
    eager_losses, eager_state = _train(model, False, memory_format=memory_format)
    compiler.reset_counters()
    losses, state = _train(model, True, memory_format=memory_format)
    c = compiler.counters()
    assert c["graphs_fallen_back"] == 0
    # stem, both blocks' first batch norms, the blocks' ends (identity and
    # projected shortcut added before the ReLU)
    assert c["batch_norm_relu"] == 5
    # every ReLU's gradient is masked by the batch-norm backward after it:
    # a block's end keeps the masked gradient for its shortcut
    assert c["batch_norm_relu_backward"] == 5
    assert losses == eager_losses and losses[-1] < losses[0]
    for name, t in state.items():  # parameters, running statistics, counts
        assert torch.equal(t, eager_state[name]), name
    assert torch.loom.fallback_ops() == {}


@pytest.mark.skipif(not jit.available(), reason="needs a C compiler")
def test_the_pass_can_be_switched_off(monkeypatch, no_fallback):
    torch._dynamo.reset()
    monkeypatch.setattr(batchnorm, "ENABLED", False)
    compiler.reset_counters()
    losses, _ = _train(_ResNet(), True, steps=1)
    c = compiler.counters()
    assert c["batch_norm_relu"] == 0 and c["batch_norm_relu_backward"] == 0
    torch._dynamo.reset()
