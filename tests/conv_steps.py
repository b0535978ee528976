"""Helpers of the convolution tests: a training pass of one convolution and
the loom kernels a piece of work launches."""
import torch
import torch.nn.functional as F


def kernel_counts(fn):
    """{kernel name: launches} of the loom work fn queues, after it ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.loom.synchronize()
    return {e.key: e.count for e in prof.key_averages()}


def conv_step(x, w, b, dy, padding):
    """conv2d's output and, for the cotangent dy, x's and w's gradients."""
    xd = x.detach().requires_grad_()
    wd = w.detach().requires_grad_()
    y = F.conv2d(xd, wd, b, padding=padding)
    y.backward(dy)
    return y, xd.grad, wd.grad
