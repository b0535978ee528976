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


_GENERIC_CHECK = """
for x, wt, b, dy, p, y, gx, gw in outs:
    xc, wc = x.clone().requires_grad_(), wt.clone().requires_grad_()
    yc = F.conv2d(xc, wc, b, padding=p)
    yc.backward(dy)
    for got, ref in ((y, yc), (gx, xc.grad), (gw, wc.grad)):
        torch.testing.assert_close(got.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-4)
print("MATCHED", len(outs))
"""


def generic_kernels_match_the_cpu(cases, count):
    """Runs `cases` (code filling `outs` with (x, w, b, dy, padding, y on
    loom, its x and w gradients)) under the generic kernels on 2 threads,
    and checks every result against the CPU's."""
    from conftest import DIGEST_PREAMBLE, run_python

    out = run_python(DIGEST_PREAMBLE + cases + _GENERIC_CHECK,
                     env={"LOOM_CPU_FEATURES": "generic", "LOOM_NUM_THREADS": "2",
                          "LOOM_FALLBACK": "error"}).stdout
    assert f"MATCHED {count}" in out, out
