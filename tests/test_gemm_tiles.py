"""Matrix products whose plans take the tilings at the edges of the GEMM's
blocking: tiles as tall as C that pack their own B panels (at most 288 rows,
C at least 32 column panels wide, an A too large for column tiles), a
transposed A packed by its tile, four row panels per pass (tiles of 36, 72
and 144 rows, a partial last tile), float32 words or bfloat16 k-pairs (odd k
included), and tiles as wide as C (17 to 48 column panels) that pack their
own A, the row panels shared out evenly. Values against the CPU, and the
same bits with LOOM_NUM_THREADS=1 and 2."""
import pytest
import torch

from conftest import digest_with_threads

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

# (m, n, k, A stored transposed, B stored transposed)
SHAPES = [
    (263, 993, 800, False, False),   # tall tiles, partial last row and column panel
    (288, 961, 800, True, False),    # 24 row panels, 31 column panels, transposed A
    (256, 1000, 1500, True, False),  # a weight gradient's dY^T @ X
    (256, 1024, 700, False, True),   # a linear layer's X @ W^T
    (289, 993, 800, False, False),   # one row panel too many: row tiles
    (1000, 250, 777, True, False),   # transposed A by its tile: 36-row tiles
    (1500, 100, 300, True, False),   # 72-row tiles, a group of four and one of two
    (2500, 40, 300, True, False),    # 144-row tiles
    (1000, 1000, 300, False, False), # tiles as wide as C, each packing its A
    (301, 513, 600, True, False),    # 17 column panels, a transposed A
]


# bfloat16 weight gradients' dY^T @ X: (m, n, k)
BF16_SHAPES = [(1000, 250, 777), (1024, 1024, 300), (100, 40, 1101), (2500, 40, 300)]

# bfloat16 products of row-major operands in tiles as wide as C: (m, n, k);
# a partial last row panel, odd k
BF16_WIDE = [(1024, 1024, 1024), (1025, 777, 513)]


def _operand(rows, cols, transposed, gen, dtype=torch.float32):
    if transposed:
        return torch.randn(cols, rows, generator=gen).to(dtype).t()
    return torch.randn(rows, cols, generator=gen).to(dtype)


@pytest.mark.parametrize("m,n,k,ta,tb", SHAPES)
def test_product_matches_cpu(m, n, k, ta, tb):
    gen = torch.Generator().manual_seed(m * 7 + n)
    a, b = _operand(m, k, ta, gen), _operand(k, n, tb, gen)
    bias = torch.randn(n, generator=gen)
    want = (a.double() @ b.double()).float()
    got = (a.to("loom") @ b.to("loom")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * k ** 0.5)
    cpu = torch.addmm(bias, a, b, beta=2.0, alpha=0.5)
    got = torch.addmm(bias.to("loom"), a.to("loom"), b.to("loom"), beta=2.0, alpha=0.5).cpu()
    torch.testing.assert_close(got, cpu, rtol=1e-4, atol=1e-4 * k ** 0.5)


@pytest.mark.parametrize("m,n,k,ta", [s + (True,) for s in BF16_SHAPES] +
                         [s + (False,) for s in BF16_WIDE])
def test_bf16_matches_cpu(m, n, k, ta):
    gen = torch.Generator().manual_seed(m + (1 if ta else 2) * n + k)
    a = _operand(m, k, ta, gen, torch.bfloat16)
    b = _operand(k, n, False, gen, torch.bfloat16)
    want = a.double() @ b.double()
    got = (a.to("loom") @ b.to("loom")).cpu()
    assert got.dtype == torch.bfloat16
    # sums in fp32, one bf16 rounding of the result
    torch.testing.assert_close(got.double(), want, rtol=2 ** -7, atol=1e-4 * k ** 0.5)


SCRIPT = r"""
import hashlib, torch
torch.manual_seed(0)
shapes = %r
digest = hashlib.sha256()
for m, n, k, ta, tb in shapes:
    a = torch.randn(k, m).t() if ta else torch.randn(m, k)
    b = torch.randn(n, k).t() if tb else torch.randn(k, n)
    r = a.to("loom") @ b.to("loom")
    digest.update(r.cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
for m, n, k in %r:
    a, b = torch.randn(k, m).bfloat16().t(), torch.randn(k, n).bfloat16()
    r = a.to("loom") @ b.to("loom")
    digest.update(r.cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
for m, n, k in %r:
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    r = a.to("loom") @ b.to("loom")
    digest.update(r.cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", digest.hexdigest())
""" % (SHAPES, BF16_SHAPES, BF16_WIDE)


def test_thread_count_does_not_change_bits():
    assert digest_with_threads(SCRIPT, 2) == digest_with_threads(SCRIPT, 1)
