"""Winograd 3x3 stride-1 convolutions over channels-last tensors read the
image and dy in place: the forward, the input gradient (the flipped
weight's forward) and the weight gradient launch no "conv.pad", and give
the bits of the NCHW path, which reads the padded planes (the same values
through the same transforms), and the CPU's values."""
import pytest
import torch
from conv_steps import conv_step as _step, kernel_counts as _kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last


# (batch, in, out, height, width, padding): even and odd sizes (half tiles
# at the right and bottom), channels not a multiple of 16, more than one
# pass of 128 input channels, two groups of output panels, rows of several
# tile blocks; padding 0 (10x12 outputs: 240 of the dense grid's 256) and
# 2, where 11x11 outputs (242 of 384) leave only the input gradient (the
# flipped forward, padded by 0) to Winograd
SHAPES = [(4, 32, 32, 16, 16, 1), (3, 21, 19, 13, 11, 1), (2, 136, 24, 12, 12, 1),
          (2, 32, 104, 12, 12, 1), (1, 32, 48, 6, 70, 1), (2, 32, 32, 12, 14, 0),
          (2, 32, 32, 9, 9, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_channels_last_winograd_reads_in_place_with_nchw_bits(shape):
    n, c, o, h, wd, p = shape
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(n, c, h, wd, generator=g)
    w = torch.randn(o, c, 3, 3, generator=g)
    b = torch.randn(o, generator=g)
    dy = torch.randn(n, o, h + 2 * p - 2, wd + 2 * p - 2, generator=g)
    nchw = _step(x.to("loom"), w.to("loom"), b.to("loom"), dy.to("loom"), p)
    cl = {}
    counts = _kernel_counts(lambda: cl.update(r=_step(
        x.contiguous(memory_format=CL).to("loom"), w.contiguous(memory_format=CL).to("loom"),
        b.to("loom"), dy.contiguous(memory_format=CL).to("loom"), p)))
    # padding 0 and 1: the forward, the input gradient and the weight gradient
    both = p != 2
    assert counts.get("conv.winograd.forward") == (2 if both else 1), counts
    assert counts.get("conv.winograd.weight_grad") == (1 if both else None), counts
    assert "conv.pad" not in counts, counts
    ref = _step(x, w, b, dy, p)
    for i, (got, base, r) in enumerate(zip(cl["r"], nchw, ref)):
        assert got.is_contiguous(memory_format=CL)
        if both or i == 1:  # the passes both layouts run by Winograd
            assert torch.equal(got.cpu(), base.cpu())
        torch.testing.assert_close(got.cpu(), r, rtol=1e-4, atol=1e-4)


def test_channels_last_views_and_mixed_layouts_read_in_place():
    """A channels-last view with gaps (a slice of a wider image) is read
    through its strides; a channels-last image beside an NCHW dy takes the
    planes for the weight gradient: the same values either way (the
    forward's and the input gradient's bits)."""
    g = torch.Generator().manual_seed(5)
    big = torch.randn(2, 24, 14, 19, generator=g).contiguous(memory_format=CL)
    x = big[:, :, 1:13, 2:17]  # channels-last strides, rows and columns apart
    assert x.stride(1) == 1 and not x.is_contiguous(memory_format=CL)
    w = torch.randn(16, 24, 3, 3, generator=g)
    dy = torch.randn(2, 16, 12, 15, generator=g)
    for dyf in (CL, torch.contiguous_format):
        got = _step(x.to("loom"), w.to("loom"), None, dy.contiguous(memory_format=dyf).to("loom"), 1)
        base = _step(x.contiguous().to("loom"), w.to("loom"), None, dy.to("loom"), 1)
        ref = _step(x, w, None, dy.contiguous(memory_format=dyf), 1)
        # the weight gradient from the planes (beside an NCHW dy) sums its
        # tiles in other blocks than on the dense grid of images read in place
        for i, (a, bb, r) in enumerate(zip(got, base, ref)):
            if i < 2 or dyf is CL:
                assert torch.equal(a.cpu(), bb.cpu())
            torch.testing.assert_close(a.cpu(), r, rtol=1e-4, atol=1e-4)
