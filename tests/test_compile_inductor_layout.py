"""How Inductor lays out and launches a convolutional network's training
step on loom, read from the code it generates: the convolutions keep the
layout eager code gives them (no channels-last conversion and no copies
around loom's convolution, whatever Inductor's cuDNN-tuned heuristics would
choose), and the batch norm, ReLU and residual kernels between them are
vectorized loop nests split across loom's workers, never run as one chunk
and never waiting for the stream."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture(autouse=True)
def _no_cpu_fallback(no_fallback):
    yield


class _Block(nn.Module):
    """A residual block wide enough (72 channels) that Inductor's layout
    heuristics would convert it to channels-last on a GPU."""

    def __init__(self, cin=8, c=72):
        super().__init__()
        self.conv0 = nn.Conv2d(cin, c, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        x = F.relu(self.bn0(self.conv0(x)))
        x = F.relu(self.bn1(self.conv1(x)) + x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


_CONV_SIZES = re.compile(
    r"assert_size_stride\(\w+, \(([\d, ]+)\), \(([\d, ]+)\), "
    r"'torch\.ops\.aten\.convolution(?:_backward)?\.default'\)")
_KERNEL = re.compile(r"loom_cpp_kernel\(async_compile, '\w+', '(\w*)', '(\w*)', r'''(.*?)'''\)", re.S)


def _ints(text):
    return [int(v) for v in text.replace(" ", "").split(",") if v]


def _contiguous(sizes):
    strides, step = [], 1
    for s in reversed(sizes):
        strides.append(step)
        step *= max(s, 1)
    return strides[::-1]


def _step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


def test_cnn_training_keeps_conv_layouts_and_splits_its_kernels_across_workers():
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = _Block().to("loom")
    eager = _Block().to("loom")
    eager.load_state_dict(model.state_dict())
    x, y = torch.randn(2, 8, 6, 6).to("loom"), torch.randint(0, 5, (2,)).to("loom")
    loss, codes = run_and_get_code(_step, torch.compile(model), x, y)
    code = "\n".join(codes)
    assert len(codes) == 2  # forward and backward

    # Convolutions (forward and both gradients) in the contiguous layout.
    convs = _CONV_SIZES.findall(code)
    assert len(convs) >= 4, code
    for sizes, strides in convs:
        sizes, strides = _ints(sizes), _ints(strides)
        if len(sizes) == 4:
            assert strides == _contiguous(sizes), (sizes, strides)
    assert "channels_last" not in code

    # The generated kernels: vectorized, each loop nest split across the
    # workers (launch range over channels or more), none waiting for the
    # stream.
    kernels = _KERNEL.findall(code)
    assert kernels, code
    assert "torch.loom.synchronize()" not in code
    norms = 0
    for _kinds, nests, source in kernels:
        assert set(nests) == {"p"}, nests  # no nest runs as one chunk
        if "Welford" not in source and "batch_norm" not in source:
            continue
        assert "at::vec::Vectorized<float>" in source
        ranges = [int(r) for r in re.findall(r"return static_cast<int64_t>\((\d+)L\);", source)]
        norms += 1
        assert max(ranges, default=1) >= 72, ranges  # split by channel (or finer)
    assert norms >= 2

    ref = _step(eager, x, y)
    torch.testing.assert_close(loss.cpu(), ref.cpu(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)
