"""backend="loom": a compiled function whose caller backpropagates only some
of its outputs (a model returning logits and loss) runs a backward without
the zero gradients autograd would materialize for the others, with eager's
gradients."""

import copy

import pytest
import torch
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit
from torch_loom.compiler.tangents import tangent_positions, without_tangents

from compile_models import GPT

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


class LogitsAndLoss(torch.nn.Module):
    """GPT returning (logits, loss), as bench/models.GPT does."""

    def __init__(self):
        super().__init__()
        self.gpt = GPT()

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _train(model, idx, tgt, compiled, steps=3):
    model = copy.deepcopy(model).to("loom")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4)
    run = torch.compile(model, backend="loom") if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        _, loss = run(idx.to("loom"), tgt.to("loom"))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: t.detach().cpu() for n, t in model.state_dict().items()}


def test_unused_logits_get_no_zero_gradient_and_training_matches_eager():
    torch.manual_seed(0)
    model = LogitsAndLoss()
    idx, tgt = torch.randint(0, 32, (2, 12)), torch.randint(0, 32, (2, 12))
    eager_losses, eager_state = _train(model, idx, tgt, False)
    compiler.reset_counters()
    earlier = {p["tag"] for p in compiler.counters()["programs"]}  # of other tests, still alive
    losses, state = _train(model, idx, tgt, True)
    c = compiler.counters()
    assert c["graphs_fallen_back"] == 0
    # the logits' tangent was dropped from the backward graph, not filled with zeros
    assert c["zero_tangents_eliminated"] == 1 and c["zero_tangents_materialized"] == 0
    backward = [p for p in c["programs"] if p["tag"].startswith("backward")
                and p["tag"] not in earlier]
    ran = [p for p in backward if p["calls"]]
    assert len(ran) == 1 and ran[0]["calls"] == 3
    # the variant that ran lacks the add of the logits' tangent
    assert ran[0]["launches"] < max(p["launches"] for p in backward)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=1e-4,
                               atol=1e-5)
    for name, t in state.items():
        torch.testing.assert_close(t, eager_state[name], rtol=1e-4, atol=1e-5, msg=name)


def test_backpropagating_every_output_runs_the_full_backward():
    torch.manual_seed(0)
    model = LogitsAndLoss().to("loom")
    idx, tgt = torch.randint(0, 32, (2, 12)).to("loom"), torch.randint(0, 32, (2, 12)).to("loom")
    compiler.reset_counters()
    logits, loss = torch.compile(model, backend="loom")(idx, tgt)
    (loss + 0.5 * logits.square().mean()).backward()
    got = {n: p.grad.cpu() for n, p in model.named_parameters()}
    assert compiler.counters()["zero_tangents_eliminated"] == 0
    model.zero_grad(set_to_none=True)
    logits, loss = model(idx, tgt)
    (loss + 0.5 * logits.square().mean()).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad.cpu(), rtol=1e-4, atol=1e-6, msg=n)


def _sigmoid_and_sum(a, w):
    y = torch.sigmoid(a * w)
    return y, (a * w).sum()


def test_a_zero_the_graph_must_read_is_passed_as_zeros():
    a = torch.randn(5, 7, device="loom", requires_grad=True)
    w = torch.randn(5, 7, device="loom", requires_grad=True)
    compiler.reset_counters()
    _, s = torch.compile(_sigmoid_and_sum, backend="loom")(a, w)
    s.backward()
    # sigmoid's backward reads the tangent: materialized, as autograd would
    assert compiler.counters()["zero_tangents_materialized"] == 1
    torch.testing.assert_close(a.grad, w.detach())
    torch.testing.assert_close(w.grad, a.detach())


def test_eliminating_a_zero_follows_linear_ops_and_keeps_results_that_are_zero():
    def f(t, x, w):
        return (t.t() * 2.0 + (x @ w)).sum(0), t.neg()

    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(
        torch.randn(3, 4), torch.randn(4, 2), torch.randn(2, 3))
    for node in gm.graph.nodes:  # name the first input as a backward graph's tangent
        if node.op == "placeholder":
            node.target = node.name = "tangents_1"
            break
    assert tangent_positions(gm) == [0]
    # the second result is the zero itself, and the add's result is laid out
    # as the transposed zero, not as the product: neither can go
    assert without_tangents(gm, (0,)) is None

    def g(t, x, w):
        return (t.view(4, 3).neg() * 2.0 + x @ w).sum(0)

    gm = torch.fx.experimental.proxy_tensor.make_fx(g, tracing_mode="fake")(
        torch.randn(12), torch.randn(4, 2), torch.randn(2, 3))
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            node.target = node.name = "tangents_1"
            break
    reduced = without_tangents(gm, (0,))
    assert reduced is not None
    ops = [n.target for n in reduced.graph.nodes if n.op == "call_function"]
    assert ops == [torch.ops.aten.mm.default, torch.ops.aten.sum.dim_IntList]
    x, w = torch.randn(4, 2), torch.randn(2, 3)
    torch.testing.assert_close(reduced(None, x, w), (x @ w).sum(0))
