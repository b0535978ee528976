"""A model that makes its attention heads contiguous itself (``q, k, v =
q.contiguous(), ...`` after splitting a fused qkv product, as many GPT
implementations do) trains compiled with backend="loom" as in eager, in
float32 and under bfloat16 autocast, with the CPU fallback off: the
compiled attention backward writes its gradients into the product's slices
only where the heads are views of it (compiler/attention.py), never
through a copy in between."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


class Block(nn.Module):
    def __init__(self, contiguous: bool, d: int = 64, heads: int = 4):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads, self.contiguous = heads, contiguous

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.contiguous:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


def _train(contiguous: bool, dtype, compiled: bool):
    torch.manual_seed(0)
    model = nn.Sequential(Block(contiguous), Block(contiguous)).to("loom")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = torch.compile(model, backend="loom") if compiled else model
    losses = []
    for i in range(3):
        x = torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(i)).to("loom")
        with torch.autocast("loom", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
            loss = run(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("contiguous", [False, True], ids=["views", "contiguous"])
def test_attention_heads_made_contiguous_train_as_eager(contiguous, dtype):
    eager_losses, eager_params = _train(contiguous, dtype, compiled=False)
    compiler.reset_counters()
    losses, params = _train(contiguous, dtype, compiled=True)
    c = compiler.counters()
    assert c["graphs_compiled"] >= 2 and c["graphs_fallen_back"] == 0
    if not contiguous and dtype is torch.float32:
        assert c["attention_packed"] == 2  # the heads are the product's views
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses),
                               rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]
    for i, (p, q) in enumerate(zip(params, eager_params)):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=f"parameter {i}")
