"""The bf16 weight gradient of 2-d windows over few channels (a stem's 3
channels by 7x7) on AVX512-BF16 CPUs: the window's columns are folded into
the channels of a copy of the image (C * kw of them, 16 to 32) and the
channels-last kernel sums a window one column wide (LOOM_CONV_FOLDED).
Each result is the float32 sum of its terms rounded to bfloat16 once, in
the folded layout's channel order put back as (O, C, kh, kw), and its bits
do not depend on the thread count."""

import pytest
import torch
import torch.nn.functional as F

from conftest import gemm_variant_here
from test_conv_bf16_nhwc import conv_bits_do_not_depend_on_threads, rand, rounded_once_of_sums

# (N, C, H, W), (O, kh, kw), conv2d's keywords
CASES = [
    ((2, 3, 32, 32), (64, 7, 7), dict(stride=2, padding=3)),                # the stem
    ((1, 8, 12, 12), (64, 3, 3), dict(padding=1)),                          # 24 channels
    ((2, 4, 15, 13), (72, 5, 5), dict(stride=(1, 2), padding=(2, 1), dilation=(1, 2))),
    ((1, 3, 20, 18), (96, 7, 7), dict(stride=(2, 1), padding=(3, 0))),     # no columns of padding
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_folded_weight_gradient_rounds_once(case, no_fallback):
    (n, c, h, w), (o, kh, kw), kwargs = case
    x, wt = rand(n, c, h, w, seed=1), rand(o, c, kh, kw, seed=2)
    wl = wt.to("loom").requires_grad_()
    y = F.conv2d(x.to("loom"), wl, **kwargs)
    gy = rand(*y.shape, seed=4)
    y.backward(gy.to("loom"))
    wd = wt.double().requires_grad_()
    F.conv2d(x.double(), wd, **kwargs).backward(gy.double())
    wa = wt.double().abs().requires_grad_()
    F.conv2d(x.double().abs(), wa, **kwargs).backward(gy.double().abs())
    assert wl.grad.shape == wt.shape and wl.grad.dtype == torch.bfloat16
    rounded_once_of_sums(wl.grad.cpu(), wd.grad, wa.grad, "weight gradient")


def test_stem_takes_the_channels_last_kernel(loom):
    from torch.profiler import ProfilerActivity, profile

    if not gemm_variant_here("avx512bf16"):
        pytest.skip("no AVX512-BF16 GEMM here: bf16 convolutions take the col path")
    x = rand(2, 3, 32, 32, seed=1).to("loom")
    w = rand(64, 3, 7, 7, seed=2).to("loom").requires_grad_()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        F.conv2d(x, w, stride=2, padding=3).sum().backward()
        loom.synchronize()
    names = [e.name for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert "conv_nhwc.weight_grad" in names, names


def test_bits_do_not_depend_on_threads():
    conv_bits_do_not_depend_on_threads(CASES)
