"""Small images read in place (7x7, 11x11, 4x4, 6x6) take Winograd where its
dense grid fits them, though the planes' grid would not (kernels/conv/
conv_plan.c: winograd_dense_fits): the forward and the input gradient at
3/4 of the tiles' outputs the images', the weight gradient at 5/6. The
results match the CPU under both kernel sets, and do not depend on the
thread count."""
import pytest
import torch
from conftest import digest_with_threads
from conv_steps import conv_step as _step, generic_kernels_match_the_cpu
from conv_steps import kernel_counts as _kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last

# (batch, in, out, size, whether the weight gradient is Winograd's): 7x7
# at batch 8 (392 of 512 outputs: not the weight gradient), 11x11 (968 of
# 1152), 4x4 (every tile full), 6x6 at batch 6 (the last block part empty)
SHAPES = [(8, 32, 48, 7, False), (8, 24, 40, 11, True), (8, 20, 28, 4, True),
          (6, 24, 16, 6, True)]


def _inputs(shape):
    n, c, o, s, _ = shape
    g = torch.Generator().manual_seed(n * 1000 + c * 10 + s)
    return (torch.randn(n, c, s, s, generator=g), torch.randn(o, c, 3, 3, generator=g),
            torch.randn(o, generator=g), torch.randn(n, o, s, s, generator=g))


@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_small_images_take_winograd_and_match_the_cpu(shape, cl):
    x, wt, b, dy = _inputs(shape)
    dev = [t.to("loom") for t in (x, wt, b, dy)]
    if cl:
        dev = [t.contiguous(memory_format=CL) if t.dim() == 4 else t for t in dev]
    got = {}
    counts = _kernel_counts(lambda: got.update(r=_step(*dev, 1)))
    # the forward and the input gradient's flipped forward, images in place
    assert counts.get("conv.winograd.forward", 0) == 2, counts
    assert "conv.pad" not in counts, counts
    assert ("conv.winograd.weight_grad" in counts) == shape[4], counts
    ref = _step(x, wt, b, dy, 1)
    for a, r in zip(got["r"], ref):
        torch.testing.assert_close(a.cpu(), r, rtol=1e-4, atol=1e-4)


_CASES = """
import torch
import torch.nn.functional as F
g = torch.Generator().manual_seed(5)
outs = []
for n, c, o, s in [(8, 32, 48, 7), (8, 24, 40, 11), (8, 20, 28, 4), (6, 24, 16, 6)]:
    x, wt = torch.randn(n, c, s, s, generator=g), torch.randn(o, c, 3, 3, generator=g)
    b, dy = torch.randn(o, generator=g), torch.randn(n, o, s, s, generator=g)
    for fmt in (torch.contiguous_format, torch.channels_last):
        xd = x.to("loom").contiguous(memory_format=fmt).requires_grad_()
        wd = wt.to("loom").contiguous(memory_format=fmt).requires_grad_()
        y = F.conv2d(xd, wd, b.to("loom"), padding=1)
        y.backward(dy.to("loom").contiguous(memory_format=fmt))
        outs.append((x, wt, b, dy, 1, y, xd.grad, wd.grad))
"""


def test_small_images_bits_do_not_depend_on_the_thread_count():
    code = _CASES + """
for *_, y, gx, gw in outs:
    add(y, gx, gw)
print("DIGEST", h.hexdigest())
"""
    assert digest_with_threads(code, 1) == digest_with_threads(code, 3)


def test_generic_kernels_on_small_images_match_the_cpu():
    generic_kernels_match_the_cpu(_CASES, 8)
