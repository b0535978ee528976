"""Winograd 3x3 stride-1 convolutions over images read in place (NCHW by
rows, channels last, views with gaps) take a dense grid of tiles: every
image's tiles back to back, blocks of 32 spanning images, so small images
fill them. The forward and the input gradient (the flipped weight's
forward) give the bits of the phase planes' grid, where each image's tiles
start a block; the weight gradient sums the same products in other blocks.
All three match the CPU, for any thread count, and under the generic
kernels."""
import pytest
import torch
import torch.nn.functional as F
from conftest import digest_with_threads
from conv_steps import conv_step as _step, generic_kernels_match_the_cpu
from conv_steps import kernel_counts as _kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last

# (batch, in, out, height, width, padding): 8x8 (16 tiles per image: two
# images a block), 13x11 (42 tiles, half tiles at the right and bottom),
# batch 1 of 36 tiles, 10x10 without padding (the input gradient padded by
# 2) and with padding 2, more than one pass of 128 input channels
SHAPES = [(4, 24, 40, 8, 8, 1), (3, 21, 19, 13, 11, 1), (1, 32, 48, 12, 12, 1),
          (5, 16, 20, 10, 10, 0), (3, 20, 28, 10, 10, 2), (2, 136, 24, 12, 12, 1)]


def _inputs(shape, bias=True):
    n, c, o, h, w, p = shape
    g = torch.Generator().manual_seed(sum(shape) + 5)
    x = torch.randn(n, c, h, w, generator=g)
    wt = torch.randn(o, c, 3, 3, generator=g)
    b = torch.randn(o, generator=g) if bias else None
    dy = torch.randn(n, o, h + 2 * p - 2, w + 2 * p - 2, generator=g)
    return x, wt, b, dy


def _on_loom(x, wt, b, dy, layout):
    """The operands on loom: NCHW, channels last, or x a crop of a wider
    image (rows and planes apart)."""
    dev = [t.to("loom") if t is not None else None for t in (x, wt, b, dy)]
    if layout == "cl":
        dev = [t.contiguous(memory_format=CL) if t is not None and t.dim() == 4 else t
               for t in dev]
    if layout == "gap":
        wide = torch.zeros(x.shape[0], x.shape[1], x.shape[2] + 3, x.shape[3] + 5)
        wide[:, :, 2:2 + x.shape[2], 1:1 + x.shape[3]] = x
        dev[0] = wide.to("loom")[:, :, 2:2 + x.shape[2], 1:1 + x.shape[3]]
        assert dev[0].stride(3) == 1 and not dev[0].is_contiguous()
    return dev


@pytest.mark.parametrize("layout", ["nchw", "cl", "gap"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dense_grid_matches_the_cpu_without_planes(shape, layout):
    x, wt, b, dy = _inputs(shape, bias=shape[0] != 1)
    got = {}
    counts = _kernel_counts(lambda: got.update(r=_step(*_on_loom(x, wt, b, dy, layout),
                                                       shape[5])))
    # every Winograd pass reads its images in place: nothing is padded
    assert counts.get("conv.winograd.forward", 0) >= 1, counts
    assert "conv.pad" not in counts, counts
    ref = _step(x, wt, b, dy, shape[5])
    for a, r in zip(got["r"], ref):
        torch.testing.assert_close(a.cpu(), r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 24, 40, 8, 8, 1), (3, 21, 19, 13, 11, 1)], ids=str)
def test_input_gradient_has_the_planes_grid_bits(shape):
    """x channels last beside an NCHW dy: the weight gradient cannot read
    both in place, so the input gradient's flipped forward reads dy's
    padded planes (each image's tiles from a block's start), which it then
    shares; with both NCHW it reads dy in place on the dense grid. The
    same bits either way."""
    x, wt, _, dy = _inputs(shape, bias=False)
    p = shape[5]
    dense, planes = {}, {}
    c1 = _kernel_counts(lambda: dense.update(r=_step(x.to("loom"), wt.to("loom"), None,
                                                     dy.to("loom"), p)))
    c2 = _kernel_counts(lambda: planes.update(r=_step(
        x.contiguous(memory_format=CL).to("loom"), wt.to("loom"), None, dy.to("loom"), p)))
    assert "conv.pad" not in c1, c1
    assert c2.get("conv.pad", 0) >= 1, c2
    assert c2.get("conv.winograd.forward") == c1.get("conv.winograd.forward") == 2, (c1, c2)
    assert torch.equal(dense["r"][1].cpu(), planes["r"][1].cpu())
    ref = _step(x, wt, None, dy, p)
    for a, b, r in zip(dense["r"], planes["r"], ref):
        torch.testing.assert_close(a.cpu(), r, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(b.cpu(), r, rtol=1e-4, atol=1e-4)


_CASES = """
import torch
import torch.nn.functional as F
g = torch.Generator().manual_seed(11)
outs = []
for n, c, o, ih, iw, p in [(9, 24, 40, 8, 8, 1), (5, 21, 19, 13, 11, 1), (3, 32, 16, 16, 16, 1)]:
    x = torch.randn(n, c, ih, iw, generator=g)
    wt = torch.randn(o, c, 3, 3, generator=g)
    b = torch.randn(o, generator=g)
    dy = torch.randn(n, o, ih + 2 * p - 2, iw + 2 * p - 2, generator=g)
    for cl in (False, True):
        fmt = torch.channels_last if cl else torch.contiguous_format
        xd = x.to("loom").contiguous(memory_format=fmt).requires_grad_()
        wd = wt.to("loom").contiguous(memory_format=fmt).requires_grad_()
        y = F.conv2d(xd, wd, b.to("loom"), padding=p)
        y.backward(dy.to("loom").contiguous(memory_format=fmt))
        outs.append((x, wt, b, dy, p, y, xd.grad, wd.grad))
"""

_DIGEST = _CASES + """
for *_, y, gx, gw in outs:
    add(y, gx, gw)
print("DIGEST", h.hexdigest())
"""


def test_dense_grid_bits_do_not_depend_on_the_thread_count():
    assert digest_with_threads(_DIGEST, 1) == digest_with_threads(_DIGEST, 3)


def test_generic_kernels_on_the_dense_grid_match_the_cpu():
    generic_kernels_match_the_cpu(_CASES, 6)
