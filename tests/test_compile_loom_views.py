"""backend="loom": chains of views that library ops read run as one
as_strided call (compiler/views.py), with eager's values and strides;
chains a generated kernel reads, or whose intermediate views are read
elsewhere, are left to the fuser."""

import pytest
import torch
import torch.nn.functional as F

from torch_loom.compiler import jit, observe

pytestmark = pytest.mark.skipif(not jit.available(), reason="needs a C compiler")


def _library_calls():
    programs = sorted((p for p in observe._programs if p.tag.startswith("inference")),
                      key=lambda p: p.serial)
    return programs[-1].library_names


def _check(f, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        want = f(*args)
        got = torch.compile(f, backend="loom")(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.stride() == w.stride()
        assert torch.equal(g.cpu(), w.cpu())
    return _library_calls()


def _heads(qkv, w):
    """Heads split from a fused projection, attended, merged, projected."""
    b, t, c3 = qkv.shape
    q, k, v = qkv.split(c3 // 3, dim=2)
    q, k, v = (z.view(b, t, 4, c3 // 12).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v)
    return y.transpose(1, 2).reshape(b, t, c3 // 3) @ w


@pytest.mark.parametrize("t", [1, 5])
def test_head_views_read_by_library_ops_are_one_call_each(t, no_fallback):
    torch.manual_seed(0)
    qkv = torch.randn(2, t, 96, device="loom") @ torch.randn(96, 96, device="loom")
    names = _check(_heads, qkv, torch.randn(32, 8, device="loom"))
    assert names.count("aten.as_strided.default") >= 3  # q, k, v
    assert "aten.permute.default" not in names


def test_views_a_kernel_reads_stay_views(no_fallback):
    x = torch.randn(2, 3, 8, device="loom")

    def f(x):
        return x.view(2, 3, 2, 4).permute(0, 2, 1, 3) * 2 + 1, x.unsqueeze(0).view(6, 8) * 3

    names = _check(f, x)
    assert "aten.as_strided.default" not in names


def test_an_intermediate_view_read_elsewhere_breaks_the_chain(no_fallback):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 8, device="loom")
    w = torch.randn(2, 4, 5, device="loom")

    def f(x):
        mid = x.view(6, 2, 4)
        return torch.bmm(mid.transpose(0, 1).reshape(2, 6, 4), w), mid

    _check(f, x)


def test_expanded_and_squeezed_chains_equal_eager(no_fallback):
    torch.manual_seed(2)
    a = torch.randn(1, 4, 1, 3, device="loom")
    m = torch.randn(2, 3, 5, device="loom")

    def f(a):
        b = a.squeeze(0).squeeze(1).unsqueeze(0).expand(2, 4, 3)
        return torch.bmm(b, m)

    names = _check(f, a)
    assert "aten.as_strided.default" in names


def test_a_chain_back_to_its_bases_layout_is_the_base(no_fallback):
    """A transposed weight transposed back (a linear layer's weight in the
    backward's product) is the weight itself: no call; a chain to another
    layout of the same sizes is still a view."""
    torch.manual_seed(3)
    x, w = torch.randn(5, 6, device="loom"), torch.randn(6, 6, device="loom")

    def back(x, w):
        return x @ w.t().t()

    def other(x, w):  # square: the same sizes, strides swapped
        return x @ w.view(6, 6).t()

    assert "aten.as_strided.default" not in _check(back, x, w)
    assert "aten.permute.default" not in _check(back, x, w)
    assert "aten.as_strided.default" in _check(other, x, w)


def test_the_mlp_backward_reads_its_weights_as_they_are(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("loom")
    x = torch.randn(3, 8, device="loom")
    torch.compile(model, backend="loom")(x).sum().backward()
    programs = sorted((p for p in observe._programs if p.tag.startswith("backward")),
                      key=lambda p: p.serial)
    assert "aten.as_strided.default" not in programs[-1].library_names
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert torch.equal(g.cpu(), p.grad.cpu())
