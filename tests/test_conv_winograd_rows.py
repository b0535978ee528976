"""Winograd 3x3 stride-1 convolutions over NCHW tensors read the image and dy
in place by rows: the forward, the input gradient (the flipped weight's
forward) and the weight gradient launch no "conv.pad", and give the bits of
the channels-last path (which reads the same values through the same
transforms; the C tests hold both to the padded planes' bits), and the
CPU's values."""
import pytest
import torch
import torch.nn.functional as F
from conv_steps import conv_step as _step, kernel_counts as _kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last


# (batch, in, out, height, width, padding): even and odd sizes (half tiles
# at the right and bottom), rows of more than 16 tiles (runs cut at 16
# lanes), channels not a multiple of 16, more than one pass of 128 input
# channels, two groups of output panels, the 8x8 images of a ResNet's last
# stage; padding 0 (10x12 outputs: 240 of the dense grid's 256) and 2,
# where 11x11 outputs (242 of 384) leave only the input gradient (the
# flipped forward, padded by 0) to Winograd
SHAPES = [(4, 32, 32, 16, 16, 1), (3, 21, 19, 13, 11, 1), (2, 136, 24, 12, 12, 1),
          (2, 32, 104, 12, 12, 1), (1, 32, 48, 6, 70, 1), (3, 24, 24, 8, 8, 1),
          (2, 32, 32, 12, 14, 0), (2, 32, 32, 9, 9, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nchw_winograd_reads_rows_in_place_with_channels_last_bits(shape):
    n, c, o, h, wd, p = shape
    g = torch.Generator().manual_seed(sum(shape) + 1)
    x = torch.randn(n, c, h, wd, generator=g)
    w = torch.randn(o, c, 3, 3, generator=g)
    b = torch.randn(o, generator=g)
    dy = torch.randn(n, o, h + 2 * p - 2, wd + 2 * p - 2, generator=g)
    nchw = {}
    counts = _kernel_counts(lambda: nchw.update(r=_step(
        x.to("loom"), w.to("loom"), b.to("loom"), dy.to("loom"), p)))
    cl = _step(x.contiguous(memory_format=CL).to("loom"),
               w.contiguous(memory_format=CL).to("loom"), b.to("loom"),
               dy.contiguous(memory_format=CL).to("loom"), p)
    both = p != 2  # the forward, the input gradient and the weight gradient
    assert counts.get("conv.winograd.forward") == (2 if both else 1), counts
    assert counts.get("conv.winograd.weight_grad") == (1 if both else None), counts
    assert "conv.pad" not in counts, counts
    ref = _step(x, w, b, dy, p)
    for i, (got, other, r) in enumerate(zip(nchw["r"], cl, ref)):
        assert got.is_contiguous()
        if both or i == 1:  # the passes both layouts run by Winograd
            assert torch.equal(got.cpu(), other.cpu())
        torch.testing.assert_close(got.cpu(), r, rtol=1e-4, atol=1e-4)


def test_row_views_and_mixed_layouts():
    """An NCHW view with gaps (a crop of a wider image) is read through its
    strides; an NCHW image beside a channels-last dy takes the planes for
    the weight gradient: the same values either way (the forward's and the
    input gradient's bits)."""
    g = torch.Generator().manual_seed(7)
    big = torch.randn(2, 24, 15, 21, generator=g)
    x = big[:, :, 1:13, 3:18]  # rows and planes apart
    assert x.stride(3) == 1 and not x.is_contiguous()
    w = torch.randn(16, 24, 3, 3, generator=g)
    dy = torch.randn(2, 16, 12, 15, generator=g)
    ref = _step(x, w, None, dy, 1)
    base = _step(x.contiguous().to("loom"), w.to("loom"), None, dy.to("loom"), 1)
    for dyf in (torch.contiguous_format, CL):
        got = {}
        counts = _kernel_counts(lambda: got.update(r=_step(
            big.to("loom")[:, :, 1:13, 3:18], w.to("loom"), None,
            dy.contiguous(memory_format=dyf).to("loom"), 1)))
        # the crop read in place by rows: no pad of x for the forward; a
        # channels-last dy beside it: x and dy padded for the weight gradient
        assert counts.get("conv.pad", 0) == (0 if dyf is torch.contiguous_format else 2), counts
        # the weight gradient from the planes sums its tiles in other blocks
        # than on the dense grid of the images read in place
        for i, (a, bb, r) in enumerate(zip(got["r"], base, ref)):
            if i < 2 or dyf is torch.contiguous_format:
                assert torch.equal(a.cpu(), bb.cpu())
            torch.testing.assert_close(a.cpu(), r, rtol=1e-4, atol=1e-4)


def test_small_resnet_step_pads_only_where_winograd_does_not_run():
    """A ResNet block's NCHW training step: its 3x3 stride-1 convolutions pad
    nothing; its gradients match the CPU's."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 16, 12, 12, generator=g)
    w1 = torch.randn(16, 16, 3, 3, generator=g) * 0.2
    w2 = torch.randn(16, 16, 3, 3, generator=g) * 0.2

    def block(x, w1, w2):
        return F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1).square().mean()

    ps = [t.to("loom").requires_grad_() for t in (x, w1, w2)]
    counts = _kernel_counts(lambda: block(*ps).backward())
    assert counts.get("conv.winograd.weight_grad") == 2, counts
    assert "conv.pad" not in counts, counts
    cs = [t.clone().requires_grad_() for t in (x, w1, w2)]
    block(*cs).backward()
    for a, r in zip(ps, cs):
        torch.testing.assert_close(a.grad.cpu(), r.grad, rtol=1e-4, atol=1e-5)
