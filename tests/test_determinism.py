"""Elementwise ops, reductions, scans, scatters, matmul and convolutions
(forward and gradients) give bitwise identical results with
LOOM_NUM_THREADS=1 and 2, and across runs."""
import hashlib

import pytest
import torch

from conftest import digest_with_threads

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

SCRIPT = r"""
import hashlib, torch
torch.manual_seed(0)
x = torch.randn(3_000_001).to("loom")  # parts of 128K (loom/kernels/reduce.h)
m = torch.randn(700, 3000).to("loom")
h = torch.randn(3000, 70, dtype=torch.float64).to("loom")
results = [
    x.sum(), x.mean(), x.var(), x.norm(), x.logsumexp(0), x.amax(), x.argmin(),
    m.sum(0), m.sum(1), m.std(1), m.half().sum(0), m.bfloat16().mean(1),
    h.sum(0), h.prod(1), m.cumsum(1), (x * 3 + 1).exp(), torch.sigmoid(m),
    torch.zeros(10).to("loom").index_add_(0, torch.randint(0, 10, (5000,)).to("loom"),
                                          torch.randn(5000).to("loom")),
    torch.zeros(10).to("loom").scatter_add_(0, torch.randint(0, 10, (5000,)).to("loom"),
                                            torch.randn(5000).to("loom")),
]
img = torch.randn(2, 32, 20, 20).to("loom").requires_grad_()
ker = torch.randn(48, 32, 3, 3).to("loom").requires_grad_()
wino = torch.nn.functional.conv2d(img, ker, padding=1)  # Winograd
strided = torch.nn.functional.conv2d(img, ker, stride=2, padding=1)  # implicit GEMM
(wino.square().sum() + strided.square().sum()).backward()
results += [m @ m.T, wino, strided, img.grad, ker.grad]
# bf16: the implicit GEMMs on AMX tiles where the CPU has them
bimg = torch.randn(2, 64, 14, 14).bfloat16().to("loom").requires_grad_()
bker = torch.randn(80, 64, 3, 3).bfloat16().to("loom").requires_grad_()
bsame = torch.nn.functional.conv2d(bimg, bker, padding=1)
bstrided = torch.nn.functional.conv2d(bimg, bker, stride=2, padding=1)
(bsame.float().square().sum() + bstrided.float().square().sum()).backward()
results += [bsame, bstrided, bimg.grad, bker.grad]
# bf16 over 4096 positions or more: the channels-last kernels on AMX tiles
nimg = torch.randn(4, 64, 66, 65).bfloat16().to("loom").requires_grad_()
nker = torch.randn(72, 64, 3, 3).bfloat16().to("loom").requires_grad_()
nsame = torch.nn.functional.conv2d(nimg[:2], nker, padding=1)
nstrided = torch.nn.functional.conv2d(nimg, nker, stride=2, padding=1)
(nsame.float().square().sum() + nstrided.float().square().sum()).backward()
results += [nsame, nstrided, nimg.grad, nker.grad]
# bf16 attention while decoding; float32 products as bf16 ("medium"/"high")
dq, dk, dv = (torch.randn(3, 2, n, 40).bfloat16().to("loom") for n in (2, 900, 900))
results.append(torch.nn.functional.scaled_dot_product_attention(dq, dk, dv))
for precision in ("medium", "high"):
    torch.set_float32_matmul_precision(precision)
    results.append(m[:300] @ m.T[:, :200])
torch.set_float32_matmul_precision("highest")
digest = hashlib.sha256()
for r in results:
    digest.update(r.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", digest.hexdigest())
"""


def digest(threads):
    return digest_with_threads(SCRIPT, threads)


def test_thread_count_does_not_change_bits():
    one = digest(1)
    assert digest(2) == one
    assert digest(2) == one
