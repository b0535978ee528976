"""Batch norm's training statistics for bfloat16 and float16 inputs with
16-bit parameters, as the CPU forms them (kernels/nn/norm_batch.c): for
bfloat16 the mean and the sum of squares are rounded to bfloat16 and the
variance divided there, for float16 the statistics are float; either way the
output is normalized with the saved (rounded) mean and invstd. The saved
statistics, the running statistics and the output are the CPU's bits."""

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()), reason="loom device not built")


def _case(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = (torch.randn(shape, generator=g) * 4 + 1).to(dtype)
    w = torch.randn(c, generator=g).to(dtype)
    b = torch.randn(c, generator=g).to(dtype)
    rm = torch.randn(c, generator=g).to(dtype)
    rv = (torch.rand(c, generator=g) + 0.5).to(dtype)
    return x, w, b, rm, rv


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,eps", [((2, 1), 1e-5), ((1, 25, 5), 0.6), ((4, 3, 5, 5), 1e-5),
                                       ((3, 7, 9), 1e-3)])
def test_training_statistics_are_the_cpus(dtype, shape, eps):
    x, w, b, rm, rv = _case(shape, dtype, len(shape) * 10 + shape[1])
    rm_c, rv_c = rm.clone(), rv.clone()
    rm_d, rv_d = rm.to("loom"), rv.to("loom")
    cpu = torch.native_batch_norm(x, w, b, rm_c, rv_c, True, 0.5, eps)
    dev = torch.native_batch_norm(x.to("loom"), w.to("loom"), b.to("loom"), rm_d, rv_d, True,
                                  0.5, eps)
    for c, d in zip(cpu, dev):
        assert d.dtype == c.dtype
        assert torch.equal(d.cpu(), c)
    assert torch.equal(rm_d.cpu(), rm_c)
    assert torch.equal(rv_d.cpu(), rv_c)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gradients_follow_the_saved_statistics(dtype):
    """The two-sample channel of a bfloat16 batch, whose exact input gradient
    is zero: loom's is the CPU's (both derive from the rounded statistics)."""
    x, w, b, rm, rv = _case((2, 3), dtype, 5)
    out = []
    for device in ("cpu", "loom"):
        xs = [t.to(device).requires_grad_() for t in (x, w, b)]
        y = torch.nn.functional.batch_norm(xs[0], None, None, xs[1], xs[2], training=True)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        out.append(torch.autograd.grad(y, xs, gy.to(device)))
    for c, d in zip(*out):
        torch.testing.assert_close(d.cpu(), c, atol=1e-5, rtol=0)
