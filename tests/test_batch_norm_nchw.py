"""float32 batch norm over NCHW input on loom (kernels/nn/norm_batch.c and its
plane loops, norm_batch_rows.inc): training forward and backward against a
float64 CPU reference, as close as the CPU's own float32 batch norm; rows
of odd lengths, one sample, large planes far from zero, non-finite values;
the same bits for any thread count and on the generic ISA path."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python

aten = torch.ops.aten


def _inputs(shape, scale=1.0, offset=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = torch.randn(*shape, generator=g) * scale + offset
    dy = torch.randn(*shape, generator=g)
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
    return x, dy, w, b, rm, rv


def _run(x, dy, w, b, rm, rv):
    """Training forward and backward: (y, mean, invstd, rm, rv, dx, dw, db)."""
    rm, rv = rm.clone(), rv.clone()
    y, mean, invstd = aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)
    dx, dw, db = aten.native_batch_norm_backward(dy, x, w, rm, rv, mean, invstd, True, 1e-5,
                                                 [True, True, True])
    return [t.cpu().double() for t in (y, mean, invstd, rm, rv, dx, dw, db)]


def _err(got, want):
    return ((got - want).abs() / (want.abs() + 1)).max().item()


# (N, C, H, W): rows of H*W that are whole vectors, tails, shorter than a
# vector; one sample; planes of several blocks (4096 values each) and a row
# longer than a block
SHAPES = [(4, 3, 8, 8), (3, 5, 7, 5), (1, 4, 3, 11), (2, 3, 1, 1), (5, 2, 67, 61),
          (2, 2, 96, 97), (32, 8, 16, 16)]


@pytest.mark.parametrize("shape", SHAPES)
def test_training_forward_and_backward_are_the_float64_results(shape, no_fallback):
    ins = _inputs(shape, scale=3.0, offset=1.0)
    got = _run(*(t.to("loom") for t in ins))
    want = _run(*(t.double() for t in ins))
    cpu = _run(*ins)  # the CPU's float32 batch norm: the error to be no worse than
    for k, (a, ref, c) in enumerate(zip(got, want, cpu)):
        tol = max(4 * _err(c, ref), 2e-6 if k < 5 else 2e-5)
        assert _err(a, ref) <= tol, (k, _err(a, ref), _err(c, ref))


@pytest.mark.parametrize("offset", [1e3, -3e4])
def test_statistics_stay_accurate_far_from_zero(offset, no_fallback):
    # a plane of 2**18 values whose mean is far from zero against its spread,
    # with an outlier first (the shift the one-pass sums start from)
    x, dy, w, b, rm, rv = _inputs((16, 3, 128, 128), scale=0.5, offset=offset, seed=1)
    x[0, :, 0, 0] += 40.0
    ins = (x, dy, w, b, rm, rv)
    got, want, cpu = _run(*(t.to("loom") for t in ins)), _run(*(t.double() for t in ins)), _run(*ins)
    # the statistics within float's rounding of float64's
    for k in (1, 2, 3, 4):
        assert _err(got[k], want[k]) <= 2.5e-7, (k, _err(got[k], want[k]))
    # the outputs and gradients no worse than the CPU's float32
    for k in (0, 5, 6, 7):
        assert _err(got[k], want[k]) <= 2 * _err(cpu[k], want[k]) + 1e-6, \
            (k, _err(got[k], want[k]), _err(cpu[k], want[k]))


def test_non_finite_values_give_the_cpus_statistics(no_fallback):
    x, dy, w, b, rm, rv = _inputs((2, 4, 5, 7))
    x[0, 0, 0, 0] = float("inf")   # first value of its channel
    x[1, 1, 2, 3] = float("-inf")
    x[0, 2, 1, 1] = float("nan")
    got = _run(*(t.to("loom") for t in (x, dy, w, b, rm, rv)))
    cpu = _run(x, dy, w, b, rm, rv)
    for a, c in zip(got, cpu):
        torch.testing.assert_close(a, c, equal_nan=True, rtol=1e-5, atol=1e-5)


def test_module_training_steps_match_the_cpu(no_fallback):
    torch.manual_seed(4)
    bn_cpu = torch.nn.BatchNorm2d(6)
    bn = torch.nn.BatchNorm2d(6).to("loom")
    for step in range(3):
        x = torch.randn(3, 6, 9, 13) * (step + 1) + step
        xl = x.to("loom").requires_grad_()
        xc = x.clone().requires_grad_()
        yl, yc = bn(xl), bn_cpu(xc)
        (yl * yl).sum().backward()
        (yc * yc).sum().backward()
        torch.testing.assert_close(yl.cpu(), yc, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.running_mean.cpu(), bn_cpu.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), bn_cpu.running_var)


_DIGEST = """
import torch
aten = torch.ops.aten
g = torch.Generator().manual_seed(5)
for shape in [(8, 24, 19, 21), (3, 5, 70, 70), (1, 7, 3, 3)]:
    c = shape[1]
    x = (torch.randn(*shape, generator=g) * 2 + 3).to("loom")
    dy = torch.randn(*shape, generator=g).to("loom")
    w, b, rm = (torch.randn(c, generator=g).to("loom") for _ in range(3))
    rv = (torch.rand(c, generator=g) + 0.5).to("loom")
    y, m, i = aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)
    add(y, m, i, rm, rv)
    add(*aten.native_batch_norm_backward(dy, x, w, rm, rv, m, i, True, 1e-5, [True, True, True]))
print("DIGEST", h.hexdigest())
"""


def test_bits_do_not_depend_on_the_thread_count_or_the_isa_path():
    one = digest_with_threads(_DIGEST, 1)
    assert digest_with_threads(_DIGEST, 3) == one
    generic = run_python(DIGEST_PREAMBLE + _DIGEST, env={"LOOM_CPU_FEATURES": "generic",
                                                         "LOOM_NUM_THREADS": "2"}).stdout
    assert [l for l in generic.splitlines() if l.startswith("DIGEST")] == [one]
