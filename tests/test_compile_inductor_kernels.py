"""What the C++ kernels Inductor generates for loom graphs do with boolean
masks: a mask saved for the backward (a ReLU's, a comparison's) is written
and read back with loom's mask store and load, and the backward computes
exactly what eager computes, for every vector width and tail length; and
how their loop nests with reductions split across loom's workers."""

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _no_cpu_fallback(no_fallback):
    yield


def _relu_grad(x):
    return F.relu(x * 2)


@pytest.mark.parametrize("dtype, numel", [(torch.float32, 4096 + 7), (torch.float64, 1000 + 5),
                                          (torch.bfloat16, 2048 + 3)])
def test_saved_relu_masks_are_written_with_the_mask_store(dtype, numel):
    """Inductor's VecMask::store to bool goes lane by lane through a generic
    conversion (70x the ReLU's own time for float32), and VecMask::from back
    lane by lane; loom's kernels use loom_store_mask and loom_load_mask. The
    gradient through the saved mask equals eager's, including the tail
    lanes."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    x = torch.randn(numel, dtype=dtype).to("loom")
    x[::5] = 0  # the mask's boundary: relu'(0) = 0
    xc = x.detach().clone().requires_grad_()
    xe = x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    g = torch.randn(numel, dtype=dtype).to("loom")

    def step(fn, t):
        y = fn(t)
        y.backward(g)
        return y.detach()

    got, codes = run_and_get_code(lambda: step(torch.compile(_relu_grad), xc))
    code = "\n".join(codes)
    assert "bool* out_ptr" in code, code  # the graph saves a mask for the backward
    assert "loom_store_mask(" in code, code
    assert "loom_load_mask<" in code, code  # the backward reads the mask back
    want = step(_relu_grad, xe)
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(xc.grad.cpu(), xe.grad.cpu(), rtol=0, atol=0)


def _nests(code: str):
    """(launch range, largest constant loop bound) of each loop nest of the
    generated loom kernels in `code`."""
    import re

    out = []
    for body, rng in re.findall(r"static void loom_nest_\d+\((.*?)extern \"C\" int64_t "
                                r"loom_range_\d+\(const loom_scalar\* loom_s\)\n\{\n\s*return "
                                r"([^;]*);", code, re.S):
        bounds = [int(b) for b in re.findall(r"x\d+<static_cast<int64_t>\((\d+)L\)", body)]
        out.append((rng, max(bounds, default=0)))
    return out


def _channel_moments(x, g):
    """Per-channel sums over the rows of a channels-last tensor, computed on
    the fly (batch norm's statistics and gradient sums as generated code:
    batch norm itself is a library call on loom)."""
    return (x * g).sum(dim=(0, 2, 3)), (x * x).sum(dim=(0, 2, 3))


def test_channel_sums_of_channels_last_tensor_are_split_by_channels():
    """Per-channel sums over a channels-last input: Inductor puts its few
    vectors of channels in the outer loop and would split the row loop (a
    parallel reduction, which loom's kernels never run: their sums must not
    depend on the threads). The nests split the channel vectors across the
    launch instead of running as one chunk, and the sums are close to the
    float64 ones."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    shape = (32, 32, 32, 32)  # two vectors of channels, far fewer than the rows
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    g = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    torch._dynamo.reset()
    compiled = torch.compile(_channel_moments)
    got, codes = run_and_get_code(compiled, x.to("loom"), g.to("loom"))
    nests = _nests("\n".join(codes))
    rows = 32 * 32 * 32
    assert any(bound >= rows for _, bound in nests), nests  # the sums over rows are generated
    # no nest over all rows in one chunk
    assert all(rng != "1" for rng, bound in nests if bound >= rows), nests
    for a, want in zip(got, _channel_moments(x.double(), g.double())):
        torch.testing.assert_close(a.cpu().double(), want, rtol=1e-5, atol=1e-3)
