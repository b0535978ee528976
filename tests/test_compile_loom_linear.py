"""backend="loom": a linear layer's view, transposed weight, addmm and view
back run as one aten.linear call (compiler/linear.py), with eager's bits,
in inference and in training (forward and backward graphs)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_loom.compiler import jit, observe

pytestmark = pytest.mark.skipif(not jit.available(), reason="needs a C compiler")


def _library_calls(kind):
    programs = sorted((p for p in observe._programs if p.tag.startswith(kind)),
                      key=lambda p: p.serial)
    return programs[-1].library_names


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.head = nn.Linear(8, 5, bias=False)

    def forward(self, x):
        h = self.fc2(self.fc1(x))
        return self.head(h), h


@pytest.mark.parametrize("shape", [(6, 16), (2, 3, 16), (2, 2, 3, 16)])
def test_inference_linear_layers_are_one_call_with_eagers_bits(shape, no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = _Net().to("loom")
    x = torch.randn(*shape, device="loom")
    with torch.no_grad():
        want = m(x)
        got = torch.compile(m, backend="loom")(x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.stride() == w.stride()
        assert torch.equal(g.cpu(), w.cpu())
    names = _library_calls("inference")
    assert names.count("aten.linear.default") == 2  # fc1, fc2 (head has no bias: mm)
    assert "aten.addmm.default" not in names
    assert names.count("aten.permute.default") == 1  # the head's weight only


def test_a_product_read_elsewhere_keeps_its_view(no_fallback):
    """The [M, N] product is an output too: the view back stays, and the
    linear layer computes the product in 2-d."""
    torch._dynamo.reset()
    torch.manual_seed(1)
    w, b = torch.randn(8, 16, device="loom"), torch.randn(8, device="loom")

    def f(x):
        flat = torch.addmm(b, x.view(6, 16), w.t())
        return flat.view(2, 3, 8), flat * 2

    x = torch.randn(2, 3, 16, device="loom")
    want = f(x)
    got = torch.compile(f, backend="loom")(x)
    for g, e in zip(got, want):
        assert torch.equal(g.cpu(), e.cpu())
    names = _library_calls("inference")
    assert names.count("aten.linear.default") == 1 and "aten.addmm.default" not in names


def test_scaled_addmm_is_left_alone(no_fallback):
    torch._dynamo.reset()
    w, b = torch.randn(8, 16, device="loom"), torch.randn(8, device="loom")
    x = torch.randn(6, 16, device="loom")

    def f(x):
        return torch.addmm(b, x, w.t(), beta=0.5)

    assert torch.equal(torch.compile(f, backend="loom")(x).cpu(), f(x).cpu())
    assert "aten.linear.default" not in _library_calls("inference")


def test_training_step_equals_eager(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(2)
    eager = _Net().to("loom")
    model = _Net().to("loom")
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, backend="loom")
    x = torch.randn(2, 3, 16, device="loom")
    for m in (eager, compiled):
        out, h = m(x)
        (out.square().mean() + h.mean()).backward()
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-5, atol=1e-6)
