"""A small MLP with LayerNorm, trained with cross-entropy and SGD/AdamW on
loom, follows the same trajectory as on the CPU."""
import copy

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

NN_OPS = ("_softmax", "_log_softmax", "_log_softmax_backward_data",
          "_softmax_backward_data", "native_layer_norm",
          "native_layer_norm_backward", "nll_loss_forward", "nll_loss_backward")


class MLP(torch.nn.Module):
    def __init__(self, d_in=20, hidden=32, classes=7):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def train(model, device, opt_name, steps=8):
    torch.manual_seed(1)
    xs = torch.randn(steps, 16, 20)
    ys = torch.randint(0, 7, (steps, 16))
    model = model.to(device)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
           if opt_name == "sgd" else torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = []
    for i in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[i].to(device)), ys[i].to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_mlp_layernorm_cross_entropy_matches_cpu(opt_name):
    torch.manual_seed(0)
    model = MLP()
    before = dict(torch.loom.fallback_ops()) if hasattr(torch.loom, "fallback_ops") else {}
    lc, mc = train(copy.deepcopy(model), "cpu", opt_name)
    ld, md = train(copy.deepcopy(model), "loom", opt_name)
    torch.testing.assert_close(torch.tensor(ld), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    assert ld[-1] < ld[0]
    for (n, a), (_, b) in zip(md.named_parameters(), mc.named_parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5, msg=n)
    if hasattr(torch.loom, "fallback_ops"):
        after = dict(torch.loom.fallback_ops())
        fell_back = [op for op in after if after[op] != before.get(op, 0)
                     and op.split(".")[0] in NN_OPS]
        assert not fell_back, fell_back
