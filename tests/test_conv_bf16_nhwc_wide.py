"""bf16 3x3 convolutions on the channels-last kernels at ResNet's wide
images, shrunk in channels and batch: rows several register blocks long,
items of positions that cut rows, and the padding left out of each tap's
products by the column range of its block (each edge block reads the
padding at one end only). Forward, input gradient and weight gradient are
each the float32 sum of their terms rounded to bfloat16 once, their bits
do not depend on the thread count, and with the CPU features capped below
AVX512-BF16 the other path gives the same rounded-once results."""

import pytest

from test_conv_bf16_nhwc import (cases_pass_without_avx512bf16, conv_bits_do_not_depend_on_threads,
                                 conv_rounds_once)

# (N, C, H, W), O, conv2d's keywords
CASES = [
    ((1, 32, 6, 56), 32, dict(padding=1)),                    # four blocks of 14 a row
    ((2, 32, 9, 28), 64, dict(padding=1)),                    # items cutting rows
    ((1, 64, 5, 31), 32, dict(padding=(1, 2))),               # two columns of padding
    ((1, 32, 8, 40), 32, dict(padding=(2, 1), dilation=(2, 1))),
    ((1, 32, 12, 56), 64, dict(stride=2, padding=1)),         # phase planes
    ((1, 32, 7, 45), 32, dict(padding=(1, 0))),               # no columns of padding
]
IDS = [str(i) for i in range(len(CASES))]


def check(case):
    (n, c, h, w), o, kwargs = case
    conv_rounds_once((n, c, h, w), (o, c, 3, 3), kwargs)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_wide_images_round_once(case, no_fallback):
    check(case)


def test_wide_images_round_once_without_avx512bf16():
    cases_pass_without_avx512bf16("test_conv_bf16_nhwc_wide")


def test_wide_bits_do_not_depend_on_threads():
    conv_bits_do_not_depend_on_threads(((shape, (o, 3, 3), kwargs) for shape, o, kwargs in CASES))
