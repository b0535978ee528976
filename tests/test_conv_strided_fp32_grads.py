"""Gradients of fp32 strided convolutions (3x3/2, 1x1/2) on the implicit
and col paths, against the CPU: the weight gradient that packs dy image by
image as it lies (no (O, N, L) copy of it) where an image has 256
positions or more, and the input gradient whose col2im adds neighbouring
images' planes together, a block at a time. Both ISAs, and bits that do
not depend on the thread count."""
import pytest
import torch
import torch.nn.functional as F
from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python
from conv_steps import kernel_counts

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

# (batch, in, out, height, width, kernel, stride, padding, groups): 256
# positions an image (one k block each), 504 (a full block and a part),
# a 1x1/2 window over 360, groups over 289, a batch of one image over 400
# (dy's single matrix), and 64 positions (dy copied to (O, N, L) as before)
CASES = [(8, 32, 64, 32, 32, 3, 2, 1, 1), (3, 8, 24, 47, 41, 3, 2, 1, 1),
         (2, 12, 20, 40, 36, 1, 2, 0, 1), (2, 16, 32, 34, 34, 3, 2, 1, 2),
         (1, 8, 16, 40, 40, 3, 2, 1, 1), (20, 16, 32, 16, 16, 3, 2, 1, 1)]
IDS = ["256", "504", "1x1", "groups", "batch1", "64"]


def _inputs(case, seed=0):
    n, c, o, h, w, k, s, p, g = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=gen)
    wt = torch.randn(o, c // g, k, k, generator=gen)
    y = F.conv2d(x, wt, stride=s, padding=p, groups=g)
    dy = torch.randn(y.shape, generator=gen)
    return x, wt, dy


def _grads(case, x, wt, dy, mask=(True, True)):
    _, _, _, _, _, k, s, p, g = case
    return torch.ops.aten.convolution_backward(dy, x, wt, None, [s, s], [p, p], [1, 1], False,
                                               [0, 0], g, [*mask, False])[:2]


def _close(got, ref):
    # sums of N * L products (up to 8192): a few fp32 roundings of the largest
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=2e-6 * ref.abs().max().item())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_strided_gradients_match_the_cpu(case):
    x, wt, dy = _inputs(case)
    gi, gw = _grads(case, x.double(), wt.double(), dy.double())
    lx, lw, ldy = x.to("loom"), wt.to("loom"), dy.to("loom")
    lgi, lgw = _grads(case, lx, lw, ldy)
    _close(lgi.double(), gi)
    _close(lgw.double(), gw)
    # alone, the weight gradient finds no (O, N, L) copy of dy that the
    # input gradient's flat col GEMM made
    _close(_grads(case, lx, lw, ldy, (False, True))[1].double(), gw)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_weight_grad_packs_dy_as_it_lies(case):
    # The implicit weight gradient, and no copy of dy before it where an
    # image's positions fill a k block.
    x, wt, dy = _inputs(case)
    lx, lw, ldy = x.to("loom"), wt.to("loom"), dy.to("loom")
    _, _, _, _, _, k, s, p, g = case

    def wgrad():
        torch.ops.aten.convolution_backward(ldy, lx, lw, None, [s, s], [p, p], [1, 1], False,
                                            [0, 0], g, [False, True, False])

    counts = kernel_counts(wgrad)
    assert counts.get("conv.implicit.weight_grad") == 1, counts
    positions = dy.shape[2] * dy.shape[3]
    copies = sum(v for key, v in counts.items() if key.startswith("copy"))
    assert copies == (0 if positions >= 256 else 1), counts


_RUN = """
import torch, torch.nn.functional as F
outs = []
for case in CASES:
    n, c, o, hi, wi, k, s, p, g = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, hi, wi, generator=gen)
    wt = torch.randn(o, c // g, k, k, generator=gen)
    dy = torch.randn(F.conv2d(x, wt, stride=s, padding=p, groups=g).shape, generator=gen)
    args = (dy.to("loom"), x.to("loom"), wt.to("loom"), None, [s, s], [p, p], [1, 1], False,
            [0, 0], g)
    r = torch.ops.aten.convolution_backward(*args, [True, True, False])
    alone = torch.ops.aten.convolution_backward(*args, [False, True, False])[1]
    outs.append((x, wt, dy, case, r[0].cpu(), r[1].cpu(), alone.cpu()))
"""


def test_bits_do_not_depend_on_the_thread_count():
    code = f"CASES = {CASES!r}\n" + _RUN + """
for *_, gi, gw, alone in outs:
    add(gi, gw, alone)
print("DIGEST", h.hexdigest())
"""
    assert digest_with_threads(code, 1) == digest_with_threads(code, 3)


def test_generic_kernels_match_the_cpu():
    code = f"CASES = {CASES!r}\n" + _RUN + """
for x, wt, dy, (n, c, o, hi, wi, k, s, p, g), gi, gw, alone in outs:
    ref = torch.ops.aten.convolution_backward(dy.double(), x.double(), wt.double(), None, [s, s],
                                              [p, p], [1, 1], False, [0, 0], g,
                                              [True, True, False])
    for got, want in ((gi, ref[0]), (gw, ref[1]), (alone, ref[1])):
        torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6 * want.abs().max().item())
print("MATCHED", len(outs))
"""
    out = run_python(DIGEST_PREAMBLE + code,
                     env={"LOOM_CPU_FEATURES": "generic", "LOOM_NUM_THREADS": "2",
                          "LOOM_FALLBACK": "error"}).stdout
    assert f"MATCHED {len(CASES)}" in out, out
