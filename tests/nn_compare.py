"""What the nn op tests share: the float dtypes, the tolerances against the
CPU, and the cpu/loom pairs of leaves they compare."""
import torch


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# Our kernels compute in double and round once; the CPU rounds some
# intermediates in the low-precision types, so allow a few of their ulps.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
       torch.float16: dict(rtol=4e-3, atol=4e-3)}


def close(actual, expected, dtype, scale=1.0):
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    torch.testing.assert_close(actual.cpu(), expected, **tol)


def pair(t, requires_grad=True):
    """The same tensor on cpu and on loom, as leaves."""
    c = t.detach().clone().requires_grad_(requires_grad)
    d = t.detach().to("loom").requires_grad_(requires_grad)
    return c, d


def grads(out, inputs, grad):
    return torch.autograd.grad(out, inputs, grad, allow_unused=True)
