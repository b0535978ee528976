"""The bf16 channels-last weight gradient ("conv_nhwc.weight_grad") of
windows of every tap count its rounding handles: each out-channel's
in-channels by taps, summed in float32, are rounded and written in the
weight's (O, C, kh, kw) order, by whole vectors of 32 elements blended
from pairs of taps for windows of up to 16 taps and element by element
beyond. Each result is the float32 sum of its terms rounded to bfloat16
once (an element written to its neighbour's place is off by far more),
its bits do not depend on the thread count, and with the CPU features
capped below AVX512-BF16 the other path gives the same rounded-once
results."""

import pytest
import torch
import torch.nn.functional as F

from conftest import gemm_variant_here
from test_conv_bf16_nhwc import (cases_pass_without_avx512bf16, conv_bits_do_not_depend_on_threads,
                                 conv_rounds_once)

# (N, C, H, W), (O, kh, kw), conv2d's keywords: taps 2, 3, 3, 9, 15, 16, 16, 20
CASES = [
    ((2, 64, 10, 10), (64, 1, 2), dict(padding=(0, 1))),
    ((2, 64, 10, 10), (72, 1, 3), dict(padding=(0, 1))),       # out-channels past a block
    ((2, 64, 9, 9), (64, 3, 1), dict(padding=(1, 0))),
    ((2, 96, 7, 7), (72, 3, 3), dict(padding=1)),              # three in-channel blocks
    ((2, 64, 10, 10), (64, 3, 5), dict(padding=(1, 2))),
    ((2, 64, 12, 12), (64, 4, 4), dict(padding=(2, 1))),
    ((2, 96, 9, 9), (72, 4, 4), dict(stride=2, padding=1)),    # phase planes
    ((1, 64, 9, 9), (80, 4, 5), dict(padding=2)),              # past 16 taps
]
IDS = [f"{o}x{c}x{kh}x{kw}" for (_, c, _, _), (o, kh, kw), _ in CASES]


def check(case):
    (n, c, h, w), (o, kh, kw), kwargs = case
    conv_rounds_once((n, c, h, w), (o, c, kh, kw), kwargs)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_window_weight_gradients_round_once(case, no_fallback):
    check(case)


def test_windows_reach_the_channels_last_weight_gradient(loom):
    # Else the cases above would check another path's rounding.
    from torch.profiler import ProfilerActivity, profile

    if not gemm_variant_here("avx512bf16"):
        pytest.skip("no AVX512-BF16 GEMM here: bf16 convolutions take the col path")
    for (n, c, h, w), (o, kh, kw), kwargs in CASES:
        x = torch.ones(n, c, h, w, dtype=torch.bfloat16, device="loom")
        wt = torch.ones(o, c, kh, kw, dtype=torch.bfloat16, device="loom").requires_grad_()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            F.conv2d(x, wt, **kwargs).sum().backward()
            loom.synchronize()
        names = [e.name for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        assert "conv_nhwc.weight_grad" in names, ((o, c, kh, kw), names)


def test_window_weight_gradients_round_once_without_avx512bf16():
    cases_pass_without_avx512bf16("test_conv_bf16_wgrad_windows")


def test_window_weight_gradient_bits_do_not_depend_on_threads():
    conv_bits_do_not_depend_on_threads(CASES)
