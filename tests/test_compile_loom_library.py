"""backend="loom": ops a compiled graph leaves to the library, with eager's
bits: the cross-entropy's backward (nll_loss_backward, one pass writing the
gradient, not the decomposition's zero fill, scatter and scaling passes)
and the column sum of a tensor already in memory (a bias gradient: the
library streams whole rows; a sum with a pointwise prologue stays a
generated kernel)."""

import pytest
import torch
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


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
    names = _newest_library_calls()
    assert "aten.nll_loss_backward.default" in names
    assert not any("scatter" in n or "full_like" in n for n in names)
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=1e-7)
    assert torch.equal(grads[1][1], grads[0][1])


def _newest_library_calls(kind="backward"):
    from torch_loom.compiler import observe

    programs = sorted((p for p in observe._programs if p.tag.startswith(kind)),
                      key=lambda p: p.serial)
    return programs[-1].library_names


def _bias_grads(x, w):
    y = x @ w  # a library product: its result is in memory
    return y.sum(0), y.view(4, 16, 384).sum((0, 1)), (y * 2).sum(0), y.sum(1)


def test_column_sums_of_a_tensor_in_memory_are_the_librarys():
    torch.manual_seed(1)
    x, w = torch.randn(64, 48, device="loom"), torch.randn(48, 384, device="loom")
    compiler.reset_counters()
    got = torch.compile(_bias_grads, backend="loom")(x, w)
    names = _newest_library_calls("inference")
    # the two leading-dim sums of y; y * 2 fuses into its sum's kernel and
    # the row sum (over the last dim) stays generated
    assert names.count("aten.sum.dim_IntList") == 2
    assert compiler.counters()["kernels_generated"] == 2
    for a, b in zip(got, _bias_grads(x, w)):
        assert torch.equal(a.cpu(), b.cpu())


def test_small_or_strided_column_sums_stay_generated():
    x = torch.randn(300, 140, device="loom")
    compiler.reset_counters()
    small = torch.compile(lambda t: (t @ t.t()).sum(0), backend="loom")(x[:8, :8])
    strided = torch.compile(lambda t: t.sum(0), backend="loom")(x[:, ::2])
    assert not any("sum" in n for n in _newest_library_calls("inference"))
    assert compiler.counters()["kernels_generated"] == 2
    torch.testing.assert_close(small.cpu(), (x[:8, :8] @ x[:8, :8].t()).sum(0).cpu())
    torch.testing.assert_close(strided.cpu(), x[:, ::2].sum(0).cpu())
