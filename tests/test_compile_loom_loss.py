"""backend="loom": the cross-entropy's backward inside a compiled graph runs
the library's nll_loss_backward (one pass writing the gradient), not the
decomposition's zero fill, scatter and scaling passes, with eager's bits."""

import pytest
import torch
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit

pytestmark = pytest.mark.skipif(not jit.available(), reason="needs a C compiler")


@pytest.fixture(autouse=True)
def _fresh(no_fallback):
    torch._dynamo.reset()
    yield
    assert torch.loom.fallback_ops() == {}


def _loss(x, w, target, reduction, ignore_index):
    logits = x @ w
    return F.cross_entropy(logits, target, reduction=reduction, ignore_index=ignore_index)


@pytest.mark.parametrize("reduction,ignore_index", [("mean", -100), ("sum", 3), ("mean", 3)])
def test_cross_entropy_backward_is_the_library_op_with_eagers_bits(reduction, ignore_index):
    torch.manual_seed(0)
    x = torch.randn(24, 16, device="loom")
    w0 = torch.randn(16, 40)
    target = torch.randint(0, 40, (24,), device="loom")
    target[::5] = 3  # some targets ignored where ignore_index is 3
    grads = []
    for compiled in (False, True):
        w = w0.to("loom").requires_grad_()
        fn = torch.compile(_loss, backend="loom") if compiled else _loss
        compiler.reset_counters()
        loss = fn(x, w, target, reduction, ignore_index)
        loss.backward()
        grads.append((loss.detach().cpu(), w.grad.cpu()))
    c = compiler.counters()
    assert c["graphs_fallen_back"] == 0
    names = _newest_backward_library_calls()
    assert "aten.nll_loss_backward.default" in names
    assert not any("scatter" in n or "full_like" in n for n in names)
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=1e-7)
    assert torch.equal(grads[1][1], grads[0][1])


def _newest_backward_library_calls():
    from torch_loom.compiler import observe

    programs = sorted((p for p in observe._programs if p.tag.startswith("backward")),
                      key=lambda p: p.serial)
    return programs[-1].library_names
