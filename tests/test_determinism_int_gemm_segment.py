"""Integer matrix products (gemm.int), igamma/igammac and segment_reduce
(forward and backward) give bitwise identical results with
LOOM_NUM_THREADS=1 and 2: every launch is large enough to be split between
the threads, and nothing may fall back to the CPU."""
import pytest
import torch

from conftest import digest_with_threads

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

SCRIPT = r"""
import torch
torch.manual_seed(0)
for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
    a = torch.randint(-100, 100, (120, 200)).to(dtype).to("loom")
    b = torch.randint(-100, 100, (200, 150)).to(dtype).to("loom")
    c = torch.randint(-100, 100, (120, 150)).to(dtype).to("loom")
    add(torch.mm(a, b), torch.addmm(c, a, b, beta=3, alpha=5), torch.mv(a, b[:, 0]),
        torch.bmm(a.view(6, 20, 200), b.expand(6, 200, 150)))
for dtype in (torch.float32, torch.float64):
    x = (torch.rand(50_000, dtype=dtype) * 30).to("loom")
    y = (torch.rand(50_000, dtype=dtype) * 30).to("loom")
    add(torch.igamma(x, y), torch.igammac(x, y))
    lengths = torch.randint(0, 20, (100,))
    data = torch.randn(int(lengths.sum()), 600, dtype=dtype).to("loom").requires_grad_()
    for reduce in ("sum", "mean", "max", "min", "prod"):
        out = torch.segment_reduce(data, reduce, lengths=lengths.to("loom"), initial=1.5)
        g = torch.randn(out.shape, dtype=dtype).to("loom")
        add(out, *torch.autograd.grad(out, data, g))
print("DIGEST", h.hexdigest())
"""


def digest(threads):
    return digest_with_threads(SCRIPT, threads)


def test_thread_count_does_not_change_bits():
    assert digest(2) == digest(1)
