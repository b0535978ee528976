"""bf16 2-d convolutions on the channels-last kernels (loom/kernels/conv_nhwc.h)
at the small images where their register blocks meet the edges: the
forward, the stride-1 input gradient (the flipped forward) and the strided
one (phases from one copy of dy) leave out the products of the copy's
padding, and register blocks hold the output positions of one row only.
Each result is the float32 sum of its terms rounded to bfloat16 once (a
term left out or added twice is off by far more), and its bits do not
depend on the thread count (the items, and so the blocks, do)."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads, gemm_variant_here, run_python

# (N, C, H, W), (O, kh, kw), conv2d's keywords
CASES = [
    ((2, 64, 7, 7), (64, 3, 3), dict(padding=1)),               # ResNet's last stage
    ((2, 32, 14, 14), (48, 3, 3), dict(padding=1)),             # blocks of 7 positions
    ((1, 32, 5, 9), (32, 3, 3), dict(padding=1)),               # a row's run cut by items
    ((2, 64, 14, 14), (64, 3, 3), dict(stride=2, padding=1)),   # phases of the input gradient
    ((1, 32, 9, 9), (32, 3, 3), dict(padding=2, dilation=2)),   # taps two apart
    ((1, 32, 6, 10), (32, 3, 3), dict(padding=2)),              # corners reading one pixel
    ((1, 32, 8, 10), (32, 3, 5), dict(padding=(0, 2))),         # no rows of padding
    ((1, 32, 9, 11), (40, 5, 5), dict(padding=2)),              # two columns of padding
]


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 2 - 1).to(torch.bfloat16)


def rounded_once_of_sums(actual, exact, abs_sums, what):
    """`actual` (bfloat16) is `exact` rounded once, give or take float32
    summation error (2^-16 of the sum of the terms' magnitudes)."""
    a, e = actual.double(), exact.double()
    mag = torch.maximum(a.abs(), e.abs()).clamp_min(2.0 ** -126)
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - 7)
    bad = (a - e).abs() > 0.5 * ulp + abs_sums * 2.0 ** -16
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {bad.numel()} off"


def conv_rounds_once(x_shape, w_shape, kwargs):
    """conv2d's output and gradients on loom, each the float32 sum of its
    terms rounded once."""
    x, wt, b = rand(*x_shape, seed=1), rand(*w_shape, seed=2), rand(w_shape[0], seed=3)
    xl = x.to("loom").requires_grad_()
    wl = wt.to("loom").requires_grad_()
    y = F.conv2d(xl, wl, b.to("loom"), **kwargs)
    gy = rand(*y.shape, seed=4)
    y.backward(gy.to("loom"))
    xd, wd = x.double().requires_grad_(), wt.double().requires_grad_()
    exact = F.conv2d(xd, wd, b.double(), **kwargs)
    exact.backward(gy.double())
    xa, wa = x.double().abs().requires_grad_(), wt.double().abs().requires_grad_()
    sums = F.conv2d(xa, wa, b.double().abs(), **kwargs)
    sums.backward(gy.double().abs())
    rounded_once_of_sums(y.detach().cpu(), exact.detach(), sums.detach(), "output")
    rounded_once_of_sums(xl.grad.cpu(), xd.grad, xa.grad, "input gradient")
    rounded_once_of_sums(wl.grad.cpu(), wd.grad, wa.grad, "weight gradient")


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_small_images_round_once(case, no_fallback):
    (n, c, h, w), (o, kh, kw), kwargs = case
    conv_rounds_once((n, c, h, w), (o, c, kh, kw), kwargs)


def test_channels_last_kernels_run(loom):
    # The cases above reach the channels-last kernels on an AVX512-BF16 or
    # AMX CPU (elsewhere bf16 takes the col path and there is nothing here
    # to check).
    from torch.profiler import ProfilerActivity, profile

    if not gemm_variant_here("avx512bf16"):
        pytest.skip("no AVX512-BF16 GEMM here: bf16 convolutions take the col path")
    x = rand(2, 64, 7, 7, seed=1).to("loom").requires_grad_()
    w = rand(64, 64, 3, 3, seed=2).to("loom").requires_grad_()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        F.conv2d(x, w, padding=1).sum().backward()
        loom.synchronize()
    names = [e.name for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert names.count("conv_nhwc.forward") >= 2, names  # forward and input gradient
    assert "conv_nhwc.weight_grad" in names, names


def conv_bits_do_not_depend_on_threads(cases):
    """conv2d's output and both gradients over `cases` ((N, C, H, W),
    (O, kh, kw), conv2d's keywords; random bf16 operands, dy of ones) have
    the same bits at 1 and 3 threads."""
    code = """
    import torch, torch.nn.functional as F
    cases = %r
    for i, ((n, c, rows, cols), (o, kh, kw), kwargs) in enumerate(cases):
        g = torch.Generator().manual_seed(i)
        x = (torch.rand(n, c, rows, cols, generator=g) * 2 - 1).bfloat16().to("loom").requires_grad_()
        wt = (torch.rand(o, c, kh, kw, generator=g) * 2 - 1).bfloat16().to("loom").requires_grad_()
        y = F.conv2d(x, wt, **kwargs)
        y.backward(torch.ones_like(y))
        add(y, x.grad, wt.grad)
    print("DIGEST", h.hexdigest())
    """ % (list(cases),)
    assert digest_with_threads(code, 1) == digest_with_threads(code, 3)


def cases_pass_without_avx512bf16(module):
    """`module`'s check(case) holds for each of its CASES in a child whose
    CPU features stop below AVX512-BF16 (the path of CPUs without it)."""
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import torch, torch_loom
torch.loom.set_fallback_mode("error")
from {module} import CASES, check
for case in CASES:
    check(case)
print("OK")
"""
    proc = run_python(code, env={"LOOM_CPU_FEATURES": "avx512"})
    assert "OK" in proc.stdout, proc.stdout + proc.stderr


def test_bits_do_not_depend_on_threads():
    # Items (and so register blocks) of fewer positions with more workers;
    # which products each output adds, and in what order, stays the same.
    conv_bits_do_not_depend_on_threads(CASES)
