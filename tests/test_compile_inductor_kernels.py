"""What the C++ kernels Inductor generates for loom graphs do with boolean
masks: a mask saved for the backward (a ReLU's, a comparison's) is written
and read back with loom's mask store and load, and the backward computes
exactly what eager computes, for every vector width and tail length."""

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
