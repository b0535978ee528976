"""float32 reductions compiled by Inductor for loom are the ones CPU Inductor
generates: vectorized, with Inductor's cascade summation over long
reductions, and as accurate against float64 as CPU Inductor's.

The reductions are batch-norm-backward-like sums over N*H*W = 32768 terms
per channel with a large common mean (cancellation)."""

import pytest
import torch
from torch._inductor.utils import run_and_get_code

N, C, H, W = 32, 32, 32, 32


def _channel_sums(x, g):
    # The two sums of batch norm's weight/bias gradient.
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    return g.sum(dim=(0, 2, 3)), (g * (x - mean)).sum(dim=(0, 2, 3))


def _inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, C, H, W, generator=gen) + 10.0
    g = torch.randn(N, C, H, W, generator=gen) + 3.0
    return x, g


def _compiled(device, x, g):
    torch._dynamo.reset()
    fn = torch.compile(_channel_sums)
    outs, codes = run_and_get_code(fn, x.to(device), g.to(device))
    return [o.cpu() for o in outs], "\n".join(codes)


def _rel_err(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()


@pytest.fixture(scope="module")
def results():
    # Module-scoped, so it runs before the per-test fixture that restores the
    # fallback mode: it restores the mode itself.
    mode = torch.loom.get_fallback_mode()
    torch.loom.set_fallback_mode("error")
    try:
        x, g = _inputs()
        ref = _channel_sums(x.double(), g.double())
        cpu, _ = _compiled("cpu", x, g)
        loom, loom_code = _compiled("loom", x, g)
    finally:
        torch.loom.set_fallback_mode(mode)
    return ref, cpu, loom, loom_code


def test_loom_reduction_kernel_is_vectorized_with_cascade_sum(results):
    *_, code = results
    assert "loom_entry_" in code
    assert "at::vec::Vectorized<float>" in code
    # Sums over more than 4096 terms go through Inductor's cascade helper.
    assert "cascade_sum_combine(" in code
    assert "CascadeSumHelper<at::vec::Vectorized<float>" in code


def test_loom_reduction_as_accurate_as_cpu_inductor(results):
    ref, cpu, loom, _ = results
    for r, c, l in zip(ref, cpu, loom):
        err_cpu, err_loom = _rel_err(c, r), _rel_err(l, r)
        assert err_loom <= 2 * err_cpu + 1e-7, (err_loom, err_cpu)
        # The same per-channel code on the same data: the same bits.
        assert torch.equal(l, c)
    # The plain sum has no error from a rounded mean to carry.
    assert _rel_err(loom[0], ref[0]) < 1e-6
