"""A 3x3 stride-1 convolution's backward on loom, asked for both gradients:
where the input gradient (the flipped weight's Winograd forward) and the
weight gradient both run Winograd, the weight gradient reads dy from the
planes the input gradient padded rather than padding dy again. The
gradients must be the bits each gives alone, equal the CPU's, and dy must be
padded once (two "conv.pad" launches: dy's and the image's) where the
passes cannot read it in place (dy's columns apart); NCHW or channels last,
both passes read dy and the image in place (no "conv.pad" at all)."""
import pytest
import torch
from conv_steps import kernel_counts as _kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


def _backward(dy, x, w, mask):
    return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                               [0, 0], 1, mask)


# (batch, in, out, height, width): even and odd sizes (a half tile at the
# right and bottom), widths whose tile rows end in the planes' last column
SHAPES = [(4, 32, 32, 16, 16), (3, 16, 24, 13, 11), (2, 20, 17, 9, 14), (2, 32, 48, 8, 31)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last, "strided"],
                         ids=["nchw", "cl", "strided_dy"])
def test_conv_backward_both_gradients_share_dy_planes(shape, fmt):
    n, c, o, h, wd = shape
    g = torch.Generator().manual_seed(sum(shape))
    mf = torch.contiguous_format if fmt == "strided" else fmt
    x = torch.randn(n, c, h, wd, generator=g).contiguous(memory_format=mf)
    w = torch.randn(o, c, 3, 3, generator=g).contiguous(memory_format=mf)
    dy = torch.randn(n, o, h, wd, generator=g).contiguous(memory_format=mf)
    xl, wl, dyl = x.to("loom"), w.to("loom"), dy.to("loom")
    if fmt == "strided":  # dy's columns apart: neither pass reads it in place
        dyl = torch.stack([dyl, dyl], -1)[..., 0]
        assert dyl.stride(3) == 2
    both = {}
    counts = _kernel_counts(lambda: both.update(r=_backward(dyl, xl, wl, [True, True, False])))
    gi, gw, _ = both["r"]
    gi_alone = _backward(dyl, xl, wl, [True, False, False])[0]
    gw_alone = _backward(dyl, xl, wl, [False, True, False])[1]
    assert torch.equal(gi.cpu(), gi_alone.cpu())
    assert torch.equal(gw.cpu(), gw_alone.cpu())
    ref_gi, ref_gw, _ = _backward(dy, x, w, [True, True, False])
    for got, ref in ((gi, ref_gi), (gw, ref_gw)):
        assert got.stride() == ref.stride()
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4)
    if counts.get("conv.winograd.forward") and counts.get("conv.winograd.weight_grad"):
        assert counts.get("conv.pad", 0) == (2 if fmt == "strided" else 0), counts
