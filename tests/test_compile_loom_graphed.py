"""mode="reduce-overhead" on the loom backend with several models of one
class in a process: Dynamo gives them one graph (their parameters are its
inputs), and each replays a capture of its own parameters, never another
model's (compiler/graphed.py)."""

import pytest
import torch
import torch.nn as nn

from torch_loom.compiler import graphed, jit

pytestmark = pytest.mark.skipif(not jit.available(), reason="needs a C compiler")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)  # a buffer the graph mutates
        return self.fc2(torch.relu(self.fc1(x)))


def test_two_models_of_one_class_replay_their_own_parameters(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    models = [_Net().to("loom") for _ in range(3)]
    before = {id(m): {k: v.cpu().clone() for k, v in m.state_dict().items()} for m in models}
    compiled = [torch.compile(m, backend="loom", mode="reduce-overhead") for m in models]
    x = torch.randn(4, 16).to("loom")
    start = graphed.counters()
    with torch.no_grad():
        for _ in range(4):
            for m, cm in zip(models, compiled):
                got = cm(x)
                want = m.fc2(torch.relu(m.fc1(x)))
                assert torch.equal(got.cpu(), want.cpu())
    end = graphed.counters()
    assert end["captures"] - start["captures"] == 3  # one per model's parameters
    assert end["replays"] - start["replays"] >= 3 * 3
    for m in models:  # no model's parameters were written with another's
        for k, v in m.state_dict().items():
            if k == "calls":
                assert v.item() == 4
            else:
                assert torch.equal(v.cpu(), before[id(m)][k]), k
    assert torch.loom.fallback_ops() == {}


def test_captures_per_graph_are_bounded(monkeypatch, no_fallback):
    torch._dynamo.reset()
    monkeypatch.setattr(graphed, "MAX_CAPTURES", 1)
    torch.manual_seed(0)
    models = [_Net().to("loom") for _ in range(2)]
    compiled = [torch.compile(m, backend="loom", mode="reduce-overhead") for m in models]
    x = torch.randn(4, 16).to("loom")
    start = graphed.counters()
    with torch.no_grad():
        for _ in range(3):
            for m, cm in zip(models, compiled):
                assert torch.equal(cm(x).cpu(), m.fc2(torch.relu(m.fc1(x))).cpu())
    end = graphed.counters()
    assert end["captures"] - start["captures"] == 1
    assert end["fallbacks"] > start["fallbacks"]  # the second model runs as compiled
