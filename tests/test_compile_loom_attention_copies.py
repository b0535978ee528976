"""A GPT-style block (fused qkv product, split into strided heads, causal
attention) trains compiled with backend="loom" with its attention over
contiguous copies of the heads (compiler/attention_contiguous.py): losses
and parameters equal loom eager's bit for bit over three AdamW steps, in
float32 and under bfloat16 autocast; the copies are taken, and the
attention's results reach the rest of the program in the traced layout."""

import pytest
import torch

from test_compile_loom_attention_contiguous import _train
from torch_loom import compiler
from torch_loom.compiler import attention, attention_contiguous, jit

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_over_contiguous_heads_trains_as_eager(dtype, packed, monkeypatch):
    # float32 heads are not copied by default (no gain): copied here, for their bits
    monkeypatch.setattr(attention_contiguous, "DTYPES", {torch.float32, torch.bfloat16})
    monkeypatch.setattr(attention, "ENABLED", packed)
    eager_losses, eager_params = _train(False, dtype, compiled=False)
    copied = []
    real = attention_contiguous._contiguous

    def spy(args, positions):
        out = real(args, positions)
        copied.append(sum(not args[i].is_contiguous() and out[i].is_contiguous()
                          for i in positions))
        return out

    monkeypatch.setattr(attention_contiguous, "_contiguous", spy)
    compiler.reset_counters()
    losses, params = _train(False, dtype, compiled=True)
    c = compiler.counters()
    assert c["graphs_compiled"] >= 2 and c["graphs_fallen_back"] == 0
    # each block's forward and backward, over copies at every call
    assert c["attention_contiguous"] == 4
    assert c["attention_packed"] == (2 if packed else 0)
    assert len(copied) == 3 * 4 and min(copied) >= 3
    assert losses == eager_losses
    assert losses[-1] < losses[0]
    for i, (p, q) in enumerate(zip(params, eager_params)):
        assert torch.equal(p, q), f"parameter {i}"


def test_results_come_back_in_the_traced_layout():
    """Over contiguous copies the attention's output is [B, H, T, d] in
    memory; the graph traced it [B, T, H, d] (its operands' layout over the
    views): the call gives the traced strides, the values unchanged."""
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    qkv = torch.randn(2, 8, 3 * 32, generator=torch.Generator().manual_seed(0))
    qkv = qkv.to(torch.bfloat16).to("loom")
    q, k, v = (z.view(2, 8, 4, 8).transpose(1, 2) for z in qkv.split(32, dim=2))
    want = op(q, k, v, is_causal=True)
    layouts = ((0, (tuple(want[0].shape), want[0].stride())),
               (1, (tuple(want[1].shape), want[1].stride())))
    assert not q.is_contiguous() and want[0].stride() != (256, 64, 8, 1)
    got = attention_contiguous.contiguous_attention(op, (0, 1, 2), layouts, q, k, v,
                                                    is_causal=True)
    assert got[0].stride() == want[0].stride() and got[1].stride() == want[1].stride()
    assert torch.equal(got[0].cpu(), want[0].cpu()) and torch.equal(got[1].cpu(), want[1].cpu())
