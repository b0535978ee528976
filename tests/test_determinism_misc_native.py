"""The kernels of the margin losses, the pairwise distances (cdist, pdist),
embedding's max_norm renorm, logcumsumexp, histc/histogram and frexp,
forward and backward where they have one, give
bitwise identical results with LOOM_NUM_THREADS=1 and 2: every launch is
large enough to be split between the threads, and nothing may fall back
to the CPU."""
import pytest
import torch

from conftest import digest_with_threads

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

SCRIPT = r"""
import torch.nn.functional as F
torch.manual_seed(0)
def grads(y, *xs):
    return torch.autograd.grad(y, xs, torch.randn(y.shape, dtype=y.dtype).to("loom"))
for dtype in (torch.float32, torch.float64):
    # multi_margin_loss: 600 samples of 120 classes (about 136 per launch chunk)
    x = torch.randn(600, 120, dtype=dtype).to("loom").requires_grad_()
    y = torch.randint(0, 120, (600,)).to("loom")
    w = (torch.rand(120, dtype=dtype) + 0.5).to("loom")
    for p, weight, red in ((1, None, "none"), (2, w, "none"), (1, w, "mean"), (2, None, "sum")):
        loss = F.multi_margin_loss(x, y, p=p, margin=0.6, weight=weight, reduction=red)
        add(loss, *grads(loss, x))
    # multilabel_margin_loss: 160 samples of 40 classes (10 per chunk)
    x = torch.randn(160, 40, dtype=dtype).to("loom").requires_grad_()
    t = torch.randint(0, 40, (160, 40))
    t[torch.rand(160, 40) < 0.2] = -1
    t = t.to("loom")
    for red in ("none", "mean", "sum"):
        loss = F.multilabel_margin_loss(x, t, reduction=red)
        add(loss, *grads(loss, x))
    # cdist's direct form and pdist, forward and backward
    a = torch.randn(2, 150, 24, dtype=dtype).to("loom").requires_grad_()
    b = torch.randn(2, 90, 24, dtype=dtype).to("loom").requires_grad_()
    c = torch.randn(120, 40, dtype=dtype).to("loom").requires_grad_()
    for p in (0.0, 1.0, 1.5, 2.0, 3.0, float("inf")):
        d = torch.cdist(a, b, p=p, compute_mode="donot_use_mm_for_euclid_dist")
        add(d, *grads(d, a, b))
        e = F.pdist(c, p=p)
        add(e, *grads(e, c))
    # embedding with max_norm: 20000 rows renormed in place
    weight = (torch.randn(20000, 16, dtype=dtype) * 3).to("loom")
    idx = torch.randint(0, 20000, (8000,)).to("loom")
    add(F.embedding(idx, weight, max_norm=1.5, norm_type=2.5), weight)
    # logcumsumexp along each dim of a 3-d tensor
    z = (torch.randn(40, 300, 30, dtype=dtype) * 10).to("loom")
    for dim in (0, 1, 2):
        add(torch.logcumsumexp(z, dim))
    # histc and histogram over 600K elements (10 blocks); frexp
    v = (torch.randn(600_000, dtype=dtype) * 2).to("loom")
    wt = torch.rand(600_000, dtype=dtype).to("loom")
    add(torch.histc(v, 70, -3, 3), torch.histc(v, 50))
    add(*torch.histogram(v, 40, weight=wt))
    add(*torch.histogram(v, torch.tensor([-4.0, -1.0, 0.0, 0.25, 3.0], dtype=dtype).to("loom"),
                         weight=wt, density=True))
    add(*torch.frexp(v * 1e5))
print("DIGEST", h.hexdigest())
"""


def digest(threads):
    return digest_with_threads(SCRIPT, threads)


def test_thread_count_does_not_change_bits():
    assert digest(2) == digest(1)
