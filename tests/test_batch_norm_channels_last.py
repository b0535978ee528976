"""Batch norm on channels-last input (kernels/nn/norm_batch_nhwc.c): the
rows of N*H*W with their channels contiguous are normalised as they lie, in
chunks fixed by the shape. The CPU's values and output layouts, training and
eval, forward and backward, running statistics over several steps, bits that
do not depend on the thread count or on the ISA path, and no layout copies."""

import pytest
import torch
import torch.nn.functional as F

import textwrap

from conftest import DIGEST_PREAMBLE, digest_with_threads, run_python

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()), reason="loom device not built")

CL = torch.channels_last

# Odd channel counts; one chunk of rows, and several (a chunk holds about
# 16K elements and at least 64 rows).
SHAPES = [(2, 3, 5, 7), (2, 17, 3, 3), (4, 3, 48, 50), (2, 17, 40, 41), (3, 69, 20, 21),
          (2, 64, 16, 17)]


def _case(shape, seed=0, dtype=torch.float32, pdtype=None):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = (torch.randn(*shape, generator=g) * 3 + 1).to(dtype).contiguous(memory_format=CL)
    pdtype = pdtype or dtype
    w = (torch.randn(c, generator=g)).to(pdtype)
    b = (torch.randn(c, generator=g)).to(pdtype)
    rm = torch.randn(c, generator=g).to(pdtype)
    rv = (torch.rand(c, generator=g) + 0.5).to(pdtype)
    dy = torch.randn(*shape, generator=g).to(dtype).contiguous(memory_format=CL)
    return x, w, b, rm, rv, dy


def _run(dev, x, w, b, rm, rv, dy, training, steps=1):
    """Forward (steps times, moving the running statistics) and backward on
    `dev`: the output, the three gradients and the running statistics."""
    x = x.to(dev).requires_grad_()
    w = w.to(dev).requires_grad_()
    b = b.to(dev).requires_grad_()
    rm, rv = rm.to(dev), rv.to(dev)
    for _ in range(steps):
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-5)
    y.backward(dy.to(dev))
    return y, x.grad, w.grad, b.grad, rm, rv


def _check_like_cpu(got, want, rtol, atol):
    names = ["output", "grad_input", "grad_weight", "grad_bias", "running_mean", "running_var"]
    for name, g, c in zip(names, got, want):
        assert g.device.type == "loom", name
        assert g.is_contiguous(memory_format=CL) == c.is_contiguous(memory_format=CL), name
        assert g.is_contiguous() == c.is_contiguous(), name
        torch.testing.assert_close(g.cpu(), c, rtol=rtol, atol=atol, msg=name)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_backward_are_the_cpus(shape, training):
    case = _case(shape, seed=shape[1] + shape[2])
    got = _run("loom", *case, training, steps=3)
    want = _run("cpu", *case, training, steps=3)
    assert got[0].is_contiguous(memory_format=CL) and not got[0].is_contiguous()
    assert got[1].is_contiguous(memory_format=CL)
    _check_like_cpu(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype,pdtype", [(torch.bfloat16, torch.bfloat16),
                                          (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
@pytest.mark.parametrize("training", [True, False])
def test_16bit_inputs_are_the_cpus(dtype, pdtype, training):
    case = _case((2, 17, 40, 41), seed=5, dtype=dtype, pdtype=pdtype)
    got = _run("loom", *case, training, steps=2)
    want = _run("cpu", *case, training, steps=2)
    for g, c in zip(got, want):
        assert g.dtype == c.dtype
    _check_like_cpu(got, want, rtol=2e-2, atol=5e-2)


@pytest.mark.usefixtures("no_fallback")
def test_only_the_gradients_asked_for():
    x, w, b, rm, rv, dy = _case((2, 17, 40, 41), seed=3)
    for training in (True, False):
        args = [t.to("loom") for t in (dy, x, w, rm, rv)]
        want_args = [dy, x, w, rm, rv]
        if training:
            _, sm, si = torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        else:
            sm = si = None
        for mask in ([True, False, False], [False, True, True], [False, False, True]):
            got = torch.ops.aten.native_batch_norm_backward(
                *args, None if sm is None else sm.to("loom"), None if si is None else si.to("loom"),
                training, 1e-5, mask)
            want = torch.ops.aten.native_batch_norm_backward(*want_args, sm, si, training, 1e-5,
                                                             mask)
            for g, c, m in zip(got, want, mask):
                assert (g is not None) == m
                if m:
                    torch.testing.assert_close(g.cpu(), c, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("no_fallback")
def test_gradient_in_another_layout_and_other_channels_last_strides():
    # a gradient that is not channels-last (an expanded one, from a sum)
    x, w, b, rm, rv, _ = _case((2, 17, 40, 41), seed=7)
    xl = x.to("loom").requires_grad_()
    F.batch_norm(xl, None, None, w.to("loom"), b.to("loom"), training=True).square().sum().backward()
    xc = x.clone().requires_grad_()
    F.batch_norm(xc, None, None, w, b, training=True).square().sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    # channels-last with other strides (a slice) and 3-d / 5-d inputs keep the
    # general path and the CPU's layouts
    big = torch.randn(2, 9, 12, 14).contiguous(memory_format=CL)
    cases = [big[:, 1:8, ::2, 1:], torch.randn(3, 6, 17).transpose(1, 2).contiguous().transpose(1, 2),
             torch.randn(2, 5, 4, 3, 6).contiguous(memory_format=torch.channels_last_3d)]
    for t in cases:
        c = t.shape[1]
        got = F.batch_norm(t.to("loom"), None, None, torch.ones(c, device="loom"), None,
                           training=True)
        want = F.batch_norm(t, None, None, torch.ones(c), None, training=True)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def _device_kernels(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.loom.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("training", [True, False])
def test_channels_last_runs_natively_without_copies(training):
    x, w, b, rm, rv, dy = (t.to("loom") for t in _case((2, 17, 40, 41), seed=9))
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    torch.loom.synchronize()

    def step():
        F.batch_norm(x, rm, rv, w, b, training=training).backward(dy)

    names = _device_kernels(step)
    assert "copy.strided" not in names, names
    assert "norm.batch_forward" not in names and "norm.batch_backward" not in names, names
    for k in ("norm.batch_nhwc_finish", "norm.batch_nhwc_apply", "norm.batch_nhwc_grad_sums",
              "norm.batch_nhwc_grad_finish", "norm.batch_nhwc_dx"):
        assert k in names, (k, names)
    assert ("norm.batch_nhwc_stats" in names) == training, names
    # NCHW input keeps its kernels
    xn = x.detach().contiguous()
    names = _device_kernels(lambda: F.batch_norm(xn, rm, rv, w, b, training=training))
    assert "norm.batch_forward" in names and "norm.batch_nhwc_apply" not in names, names


# Several chunks of rows, an odd channel count, training and eval.
_DIGEST_CODE = """
import torch, torch.nn.functional as F
g = torch.Generator().manual_seed(11)
for shape in [(3, 69, 20, 21), (4, 3, 48, 50)]:
    c = shape[1]
    x = (torch.randn(*shape, generator=g) * 3 + 1).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(*shape, generator=g).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    for training in (True, False):
        xl = x.to("loom").requires_grad_()
        wl, bl = w.to("loom").requires_grad_(), b.to("loom").requires_grad_()
        rm, rv = torch.zeros(c, device="loom"), torch.ones(c, device="loom")
        y = F.batch_norm(xl, rm, rv, wl, bl, training=training, momentum=0.2)
        y.backward(dy.to("loom"))
        add(y, xl.grad, wl.grad, bl.grad, rm, rv)
print("DIGEST", h.hexdigest())
"""


@pytest.fixture(scope="module")
def digest_3_threads():
    return digest_with_threads(_DIGEST_CODE, 3)


def test_bits_do_not_depend_on_the_thread_count(digest_3_threads):
    assert digest_with_threads(_DIGEST_CODE, 1) == digest_3_threads


def test_generic_path_gives_the_same_bits(digest_3_threads):
    # Each channel's sums add its rows in the same order on every ISA path,
    # without fused multiply-adds: the generic loops give the AVX-512 bits.
    proc = run_python(DIGEST_PREAMBLE + textwrap.dedent(_DIGEST_CODE),
                      env={"LOOM_NUM_THREADS": "3", "LOOM_FALLBACK": "error",
                           "LOOM_CPU_FEATURES": "generic"})
    got = [line for line in proc.stdout.splitlines() if line.startswith("DIGEST")]
    assert got == [digest_3_threads], proc.stdout + proc.stderr


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("keep_masked", [False, True])
def test_fused_relu_is_the_unfused_sequence_bit_for_bit(with_residual, keep_masked):
    # loom::batch_norm_relu (for the compiler) on channels-last input: the
    # unfused channels-last ops' bits, in the input's layout, without copies
    aten = torch.ops.aten
    x, w, b, rm, rv, dy = (t.to("loom") for t in _case((2, 17, 40, 41), seed=13))
    r = torch.randn(2, 17, 40, 41).contiguous(memory_format=CL).to("loom") if with_residual else None
    rm0 = rm.clone()
    fwd = lambda: torch.ops.loom.batch_norm_relu(x, w, b, rm, rv, r, 0.1, 1e-5)  # noqa: E731
    names = _device_kernels(fwd)
    assert "copy.strided" not in names and "norm.batch_nhwc_apply" in names, names
    y, mean, invstd, new_rm, new_rv = fwd()
    ref = aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    expect = torch.relu(ref[0] + r if with_residual else ref[0])
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert torch.equal(y.cpu(), expect.cpu())
    for got, want in zip((mean, invstd, new_rm, new_rv), ref[1:]):
        assert torch.equal(got.cpu(), want.cpu())
    assert torch.equal(rm.cpu(), rm0.cpu())  # read, not moved in place
    bwd = lambda: torch.ops.loom.batch_norm_relu_backward(dy, y, x, w, mean, invstd, keep_masked)  # noqa: E731
    names = _device_kernels(bwd)
    assert "copy.strided" not in names and "norm.batch_nhwc_dx" in names, names
    got = bwd()
    masked = aten.threshold_backward(dy, y, 0)
    want = aten.native_batch_norm_backward(masked, x, w, None, None, mean, invstd, True, 1e-5,
                                           [True, True, True])
    assert got[0].is_contiguous(memory_format=CL)
    for g, c in zip(got, list(want) + ([masked] if keep_masked else [])):
        assert torch.equal(g.cpu(), c.cpu())
    assert len(got) == 3 + keep_masked


def _far_case(offset, seed):
    # channels-last input far from zero against its spread, and a gradient
    # that follows x (so the input gradient's projection term is large)
    g = torch.Generator().manual_seed(seed)
    shape, c = (8, 16, 32, 32), 16
    x = (torch.randn(*shape, generator=g) * 0.5 + offset).contiguous(memory_format=CL)
    dy = (torch.randn(*shape, generator=g) + 2 * (x - offset)).contiguous(memory_format=CL)
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    rm = offset + torch.randn(c, generator=g) * 0.1
    rv = torch.rand(c, generator=g) * 0.2 + 0.2
    r = torch.randn(*shape, generator=g).contiguous(memory_format=CL)
    return x, dy, w, b, rm, rv, r


def _err(got, want):
    return ((got.cpu().double() - want).abs() / (want.abs() + 1)).max().item()


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("offset", [1e3, -3e4, 3e4])
@pytest.mark.parametrize("training", [True, False])
def test_outputs_and_gradients_stay_accurate_far_from_zero(offset, training):
    x, dy, w, b, rm, rv, _ = _far_case(offset, seed=21)
    case = (x, w, b, rm, rv, dy)
    got = _run("loom", *case, training)
    assert got[0].is_contiguous(memory_format=CL) and got[1].is_contiguous(memory_format=CL)
    want = _run("cpu", *(t.double() for t in case), training)
    # the CPU's float32 on the same values laid out NCHW (its more accurate
    # layout): the error to be no worse than
    cpu = _run("cpu", x.contiguous(), w, b, rm, rv, dy.contiguous(), training)
    for k, name in enumerate(["output", "grad_input", "grad_weight", "grad_bias"]):
        e, ec = _err(got[k], want[k].detach()), _err(cpu[k], want[k].detach())
        assert e <= 1.25 * ec + 1e-6, (name, e, ec)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("offset", [-3e4, 3e4])
@pytest.mark.parametrize("with_residual", [False, True])
def test_fused_relu_stays_accurate_far_from_zero(offset, with_residual):
    # loom::batch_norm_relu shares the apply and dx loops. The gradient is
    # masked by loom's own output for every reference (a mask taken from
    # another rounding of y would flip near zero).
    x, dy, w, b, rm, rv, r = _far_case(offset, seed=22)
    r = r if with_residual else None
    args = [t.to("loom") for t in (x, w, b, rm, rv)]
    y, mean, invstd, _, _ = torch.ops.loom.batch_norm_relu(
        *args, None if r is None else r.to("loom"), 0.1, 1e-5)
    dx = torch.ops.loom.batch_norm_relu_backward(dy.to("loom"), y, args[0], args[1], mean, invstd,
                                                 False)[0]
    assert y.is_contiguous(memory_format=CL) and dx.is_contiguous(memory_format=CL)
    masked = torch.where(y.cpu() > 0, dy, torch.zeros(()))

    def ref(x, w, b, r, g):
        xx = x.clone().requires_grad_()
        z = F.batch_norm(xx, None, None, w, b, training=True, eps=1e-5)
        z.backward(g)
        return torch.relu(z.detach() + r if r is not None else z.detach()), xx.grad

    want = ref(*(None if t is None else t.double() for t in (x, w, b, r, masked)))
    cpu = ref(*(None if t is None else t.contiguous() for t in (x, w, b, r, masked)))
    for name, g, c, f in zip(["output", "grad_input"], (y, dx), cpu, want):
        e, ec = _err(g, f), _err(c, f)
        assert e <= 1.25 * ec + 1e-6, (name, e, ec)
