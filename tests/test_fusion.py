"""Adaptive eager (torch.loom.fusion): elementwise launches queued on a
stream run as fused groups, with the bytes of unfused execution.

Programs are run with the current stream held (a host callback that waits),
so that the whole program is queued when the executor reaches it and groups
form whatever the machine's speed; everything they read is uploaded before
the hold and downloaded after it (a download would wait for the held
stream)."""

import contextlib
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_loom import _C

from conftest import REPO_ROOT

fusion = torch.loom.fusion


@contextlib.contextmanager
def held():
    """Queues what the block enqueues until it ends."""
    _C._hold_stream(torch.loom.current_stream())
    try:
        yield
    finally:
        _C._release_held_streams()


def raw(t: torch.Tensor) -> torch.Tensor:
    """The bytes of `t`'s elements, in logical order."""
    c = t.detach().cpu().contiguous()
    return c.reshape(-1).view(torch.uint8) if c.dtype != torch.bool else c.reshape(-1)


def same_bytes(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(raw(x), raw(y)) for x, y in zip(a, b)
    )


# ---- random programs -----------------------------------------------------------------

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SHAPES = [(8192,), (96, 130), (3, 64, 77), (2, 8200), (20000,), (128, 96), (40, 5)]

UNARY = [
    torch.sin, torch.tanh, torch.sigmoid, torch.relu, F.gelu, F.silu, torch.neg, torch.abs,
    lambda t: torch.sqrt(t.abs()), lambda t: torch.exp(t.clamp(-5, 5)),
    lambda t: F.gelu(t, approximate="tanh"),
]
BINARY = [
    torch.add, torch.mul, torch.sub, lambda a, b: a / (abs(b) + 1),
    lambda a, b: torch.maximum(a, b) if torch.is_tensor(b) else a.clamp_min(b),
]
INPLACE = [
    lambda t, o: t.add_(o), lambda t, o: t.mul_(o), lambda t, o: t.clamp_(-1.5, 1.5),
    lambda t, o: t.sigmoid_(), lambda t, o: t.sub_(o, alpha=0.5),
]


def _other(env, t, k):
    """An operand for `t`: a tensor of the program broadcastable to it (a
    row of its last dim included), else a number."""
    fits = [o for o in env if o.dtype == t.dtype and _broadcasts(o.shape, t.shape)]
    return fits[k % len(fits)] if fits and k % 5 else 0.75


def _broadcasts(src, dst) -> bool:
    try:
        return torch.broadcast_shapes(src, dst) == tuple(dst)
    except RuntimeError:
        return False


def run_program(steps, shape, dtype, seed):
    """Runs `steps` (tuples of small ints chosen by hypothesis) on loom with
    the stream held; returns every tensor the program made or changed."""
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(shape, generator=g) * 2 for _ in range(2)] + [torch.randn(shape[-1:], generator=g)]
    env = [t.to(dtype).to("loom") for t in inputs]
    with held():
        for kind, i, j, k in steps:
            t = env[i % len(env)]
            kind %= 11
            if kind == 0:
                env.append(UNARY[j % len(UNARY)](t))
            elif kind == 1:
                env.append(BINARY[j % len(BINARY)](t, _other(env, t, k)))
            elif kind == 2:  # a cast, and back
                other = FLOATS[j % len(FLOATS)]
                env.append(t.to(other))
                env.append(env[-1].to(dtype) if k % 2 else env[-1].to(dtype) * 1.0)
            elif kind == 3 and t.dim() >= 2:  # a transposed view, made contiguous
                env.append(t.transpose(0, -1).contiguous())
            elif kind == 4 and t.dim() >= 1 and t.shape[-1] > 1:  # in place on a strided slice
                t[..., :: 2 + j % 2].mul_(1.5 if k % 2 else -1.0)
            elif kind == 5 and t.is_contiguous():  # in place on the whole tensor
                INPLACE[j % len(INPLACE)](t, _other(env, t, k))
            elif kind == 6:
                env.append(torch.full_like(t, float(k % 7) - 3.0))
            elif kind == 7:  # broadcast: a row of the last dim against the tensor
                env.append(t * env[2] + env[2] if env[2].dtype == t.dtype and _broadcasts(env[2].shape, t.shape)
                           else t + 1)
            elif kind == 8:
                env.append(torch.where(t > 0, t, t * 0.1))
            elif kind == 9 and t.dim() >= 1:  # a row reduction: layer norm over the last dim
                w = env[2] if env[2].dtype == t.dtype and env[2].shape == t.shape[-1:] else None
                env.append(F.layer_norm(t, t.shape[-1:], w, w if k % 2 else None, eps=1e-5))
            elif t.dim() >= 1:  # softmax / log_softmax over the last dim, between pointwise ops
                env.append((F.log_softmax if j % 2 else F.softmax)(t * 0.5, dim=-1) + 1.0)
    return [t.cpu() for t in env]


step = st.tuples(*[st.integers(0, 30)] * 4)


# A fallback inside a hold would wait for the held stream: no_fallback
# makes it an error instead.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=30, deadline=None, suppress_health_check=SLOW_OK, database=None)
@given(steps=st.lists(step, min_size=2, max_size=12), shape=st.sampled_from(SHAPES),
       dtype=st.sampled_from(FLOATS), seed=st.integers(0, 2**16))
def test_random_programs_bitwise_equal_unfused(no_fallback, steps, shape, dtype, seed):
    with fusion.mode(0):
        ref = run_program(steps, shape, dtype, seed)
    with fusion.mode(1):
        got = run_program(steps, shape, dtype, seed)
    assert same_bytes(ref, got)


@settings(max_examples=8, deadline=None, suppress_health_check=SLOW_OK, database=None)
@given(steps=st.lists(step, min_size=3, max_size=10), shape=st.sampled_from(SHAPES[:6]),
       seed=st.integers(0, 2**16))
def test_random_programs_under_verify(no_fallback, steps, shape, seed):
    """verify compares every group with its unfused run in the driver; a
    difference would be raised at the download."""
    with fusion.mode(0):
        ref = run_program(steps, shape, torch.float32, seed)
    before = fusion.counters()
    with fusion.mode("verify"):
        got = run_program(steps, shape, torch.float32, seed)
    after = fusion.counters()
    assert same_bytes(ref, got)
    # every group compared, but those over memory with gaps (strided views),
    # whose bytes between elements may belong to other tensors
    done = after["verified"] + after["verify_skipped"] - before["verified"] - before["verify_skipped"]
    assert done == after["groups"] - before["groups"]


def test_chain_forms_one_group():
    x = torch.randn(50000, device="loom")
    with fusion.mode(0):
        with held():
            ref = torch.tanh(torch.sin(x * 3 + 1)).mul_(2).sub_(x)
        ref = ref.cpu()
    before = fusion.counters()
    with held():
        y = torch.tanh(torch.sin(x * 3 + 1)).mul_(2).sub_(x)
    got = y.cpu()
    after = fusion.counters()
    assert torch.equal(raw(ref), raw(got))
    assert after["groups"] - before["groups"] == 1
    assert after["ops_fused"] - before["ops_fused"] == 6
    assert after["bytes_cached"] > before["bytes_cached"]


def test_integer_chain_and_error_names_the_op():
    """An integer division by zero inside a group fails with the op's
    message, as unfused; the launches around it still run."""
    a = torch.arange(20000, device="loom")
    with fusion.mode(1):
        b = a * 3
        c = b + 1
        torch.loom.synchronize()
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            c // torch.zeros_like(c)
        assert torch.equal(c.cpu(), torch.arange(20000) * 3 + 1)


def test_mode_api():
    before = fusion.get_mode()
    with fusion.mode("verify"):
        assert fusion.get_mode() == "verify"
        with fusion.mode(False):
            assert fusion.get_mode() == "0"
    assert fusion.get_mode() == before
    with pytest.raises(ValueError, match="torch.loom.fusion"):
        fusion.set_mode("sometimes")
    counters = torch.loom.fusion_counters()
    assert set(counters) >= {"groups", "ops_fused", "bytes_not_written", "compiled_regions"}


def test_env_selects_the_mode():
    code = "import torch, torch_loom; print(torch.loom.fusion.get_mode())"
    env = dict(os.environ, LOOM_FUSE="verify")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True).stdout.split()
    assert out[-1] == "verify"


# ---- every kernel that declares itself elementwise, at any grain ---------------------

def _pointwise_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(70, 73, generator=g).to("loom")
    col = torch.randn(70, 1, generator=g).to("loom")
    # op, kind, params, out dtype, inputs: sin; gelu; add with a broadcast
    # column and alpha; mul of a transposed view into bf16
    sin, add, mul, gelu = 14, 69, 71, 39  # loom_pw_op values (loom/kernels/pointwise.h)
    assert _C._fuse_elementwise_kernels()  # the names exist on this driver
    return [
        ([torch.empty_like(x), x], [sin, 0, 0.0, 0.0, 0.0, 0.0]),
        ([torch.empty_like(x), x], [gelu, 0, 0.0, 0.0, 0.0, 0.0]),
        ([torch.empty_like(x), x, col.expand(70, 73)], [add, 0, 0.5, 0.0, 0.0, 0.0]),
        ([torch.empty(73, 70, device="loom", dtype=torch.bfloat16), x.t(), x.t()],
         [mul, 0, 0.0, 0.0, 0.0, 0.0]),
    ]


def _grain_cases(name):
    if name == "pointwise.apply":
        return _pointwise_cases()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(70, 73, generator=g).to("loom")
    if name == "copy.strided":  # a cast through a transposed view, a plain copy
        return [([torch.empty(73, 70, device="loom", dtype=torch.float16), x.t()], []),
                ([torch.empty_like(x), x], [])]
    if name == "fill.strided":
        return [([x.t().clone()[:, ::2]], [1.25])]
    if name == "pointwise.special":  # i0; Chebyshev T of a broadcast degree into bf16
        n = torch.randint(0, 12, (70, 1), generator=g).float().to("loom")
        return [([torch.empty_like(x), x.t().contiguous().t()], [0, 0, 0.0, 0.0, 0.0, 0.0]),
                ([torch.empty(70, 73, device="loom", dtype=torch.bfloat16), x, n.expand(70, 73)],
                 [21, 0, 0.0, 0.0, 0.0, 0.0])]
    return None


def _scalars(tensors, scalars, name):
    # pointwise.apply (and pointwise.special) take one constant slot per input after their six
    return (scalars + [0.0] * (len(tensors) - 1)
            if name in ("pointwise.apply", "pointwise.special") else scalars)


def _pw_check_ops():
    # The op codes _pointwise_cases assumes, checked against the ops that
    # launch them (a renumbered enum must not leave the test comparing
    # something else).
    x = torch.randn(70, 73).to("loom")
    col = torch.randn(70, 1).to("loom")
    for (tensors, scalars), want in zip(_pointwise_cases()[:3],
                                        [torch.sin(x), F.gelu(x), torch.add(x, col, alpha=0.5)]):
        tensors = [torch.empty_like(x), x] + ([col.expand(70, 73)] if len(tensors) == 3 else [])
        _C._launch_kernel("pointwise.apply", tensors, _scalars(tensors, scalars, "pointwise.apply"),
                          x.numel(), 1 << 20)
        assert torch.equal(tensors[0].cpu(), want.cpu())


@pytest.mark.parametrize("name", _C._fuse_elementwise_kernels())
def test_declared_kernel_bytes_do_not_depend_on_the_grain(name):
    cases = _grain_cases(name)
    assert cases is not None, f"{name} declares LOOM_KERNEL_ELEMENTWISE: give it cases here"
    if name == "pointwise.apply":
        _pw_check_ops()
    for tensors, scalars in cases:
        out = tensors[0]
        results = []
        for grain in [out.numel(), 1, 3, 64, 1000, 4093]:
            out.zero_()
            _C._launch_kernel(name, tensors, _scalars(tensors, scalars, name), out.numel(), grain)
            results.append(raw(out).clone())
        assert all(torch.equal(results[0], r) for r in results[1:]), f"{name} {scalars}"


ROW_KERNELS = ["norm.layer_forward", "softmax.forward"]


def _row_cases(name):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(70, 73, generator=g) * 3).to("loom")
    w, b = torch.randn(73, generator=g).to("loom"), torch.randn(73, generator=g).to("loom")
    if name == "norm.layer_forward":  # x, w, b, y, mean, rstd; n, eps, rms
        outs = [torch.empty_like(x), torch.empty(70, 1, device="loom"), torch.empty(70, 1, device="loom")]
        return [([x, w, b] + outs, [73, 1e-5, 0], outs), ([x, w, b] + outs, [73, 1e-6, 1], outs)]
    if name == "softmax.forward":  # in, out; dim, take_log
        y, h = torch.empty_like(x), x.to(torch.bfloat16)
        yh = torch.empty_like(h)
        return [([x, y], [1, 0], [y]), ([x, y], [1, 1], [y]), ([h, yh], [1, 0], [yh])]
    return None


@pytest.mark.parametrize("name", ROW_KERNELS)
def test_row_kernel_bytes_do_not_depend_on_the_grain(name):
    """The kernels with a row map (kernels/declarations.c) give each row the
    same bytes however the rows are split."""
    for tensors, scalars, outs in _row_cases(name):
        results = []
        for grain in [70, 1, 3, 7, 64]:
            for o in outs:
                o.zero_()
            _C._launch_kernel(name, tensors, scalars, 70, grain)
            results.append([raw(o).clone() for o in outs])
        assert all(torch.equal(a, b) for r in results[1:] for a, b in zip(results[0], r)), scalars


def _ln_program(x, res, w, b, scale):
    h = F.layer_norm(x + res, x.shape[-1:], w, b)
    h = torch.tanh(h * scale) * 2.0 + x
    h = torch.softmax(h, dim=-1) * 3.0
    return torch.sigmoid(F.layer_norm(h, x.shape[-1:]) - 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_reductions_join_the_group(no_fallback, dtype):
    """Layer norm and softmax over the last dim run inside the group of the
    pointwise ops around them, chunked by whole rows, with the bytes of
    running them one by one (and under verify)."""
    g = torch.Generator().manual_seed(3)
    rows, d = 96, 130
    x, res = (torch.randn(rows, d, generator=g).to(dtype).to("loom") for _ in range(2))
    w, b, scale = (torch.randn(d, generator=g).to(dtype).to("loom") for _ in range(3))
    results = {}
    for mode in (0, 1, "verify"):
        before = fusion.counters()
        with fusion.mode(mode):
            with held():
                y = _ln_program(x, res, w, b, scale)
            results[mode] = y.cpu()
        after = fusion.counters()
        if mode == 1:
            groups = after["groups"] - before["groups"]
            # add, layer_norm, mul, tanh, mul, add, softmax, mul, layer_norm, sub, sigmoid
            assert groups == 1 and after["ops_fused"] - before["ops_fused"] == 11, (groups, after)
        if mode == "verify":
            assert after["verified"] > before["verified"]
    assert torch.equal(raw(results[0]), raw(results[1]))
    assert torch.equal(raw(results[0]), raw(results["verify"]))


def _scaled_ln_program(x, res, w, b, scale, shift):
    h = F.layer_norm(x + res, x.shape[-1:], w, b)
    h = h * (1 + scale) + shift
    h = F.gelu(h) * torch.sigmoid(h)
    return res + 0.5 * F.layer_norm(h + x, x.shape[-1:])


@pytest.mark.parametrize("mode", [1, "verify"])
def test_small_op_over_freed_statistics_runs_ahead(no_fallback, mode):
    """`1 + scale` after a layer norm gets the memory of its mean or rstd,
    freed at once (the 2 MiB intermediates come from their own segments, the
    vector and the statistics from the small blocks' pool): it runs ahead of
    the group's chunks, and the statistics copied in after them leave its
    bytes, so the members after it join the same group with the bytes of
    running them one by one."""
    g = torch.Generator().manual_seed(5)
    rows, d = 1024, 512
    x, res = (torch.randn(rows, d, generator=g).to("loom") for _ in range(2))
    w, b, scale, shift = (torch.randn(d, generator=g).to("loom") for _ in range(4))
    with fusion.mode(0):
        expected = _scaled_ln_program(x, res, w, b, scale, shift).cpu()
    before = fusion.counters()
    with fusion.mode(mode):
        with held():
            y = _scaled_ln_program(x, res, w, b, scale, shift)
        got = y.cpu()
    after = fusion.counters()
    assert torch.equal(raw(got), raw(expected))
    if mode == 1:
        # add, layer_norm, (1 + scale run ahead), mul, add, gelu, sigmoid, mul, add,
        # layer_norm, mul, add
        assert after["groups"] - before["groups"] == 1, (before, after)
        assert after["ops_fused"] - before["ops_fused"] == 12, (before, after)
    else:
        assert after["verified"] > before["verified"]


def test_row_reduction_over_another_dim_is_not_a_member():
    """A softmax over dim 0 walks columns: it runs on its own, between the
    groups, with the same bytes."""
    x = torch.randn(128, 96, device="loom")
    out = {}
    for mode in (0, 1):
        before = fusion.counters()
        with fusion.mode(mode):
            with held():
                y = torch.softmax(torch.sin(x) * 2.0, dim=0) + 1.0
            out[mode] = y.cpu()
        after = fusion.counters()
    assert after["ops_fused"] - before["ops_fused"] == 2  # sin, mul; the add follows the softmax
    assert torch.equal(raw(out[0]), raw(out[1]))


# ---- a training step ----------------------------------------------------------------------

def test_gpt_training_step_fuses_and_matches_unfused(no_fallback):
    from examples import gpt

    cfg = gpt.ModelConfig(n_layer=2, d_model=128, n_head=2, context=32)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 40, (4, 32), generator=g).to("loom")
    y = torch.randint(0, 40, (4, 32), generator=g).to("loom")

    def steps(mode):
        model = gpt.make_model(40, cfg, "loom", seed=0)
        opt = gpt.make_optimizer(model, lr=1e-2)
        with fusion.mode(mode):
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                _, loss = model(x, y)
                loss.backward()
                with held():  # the optimizer's whole step queued at once
                    opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    ref = steps(0)
    before = fusion.counters()
    got = steps(1)
    after = fusion.counters()
    assert same_bytes(ref, got)
    assert after["groups"] > before["groups"]
    assert after["ops_fused"] - before["ops_fused"] >= 2 * (after["groups"] - before["groups"])


def test_profiler_shows_a_group_as_one_kernel_naming_its_members():
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(50000, device="loom")
    torch.loom.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with held():
            torch.sigmoid(torch.cos(x) * 2)
        torch.loom.synchronize()
    device = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    fused = [e for e in device if e.name.startswith("fused(")]
    assert len(fused) == 1, [e.name for e in device]
    assert all(op in fused[0].name for op in ("cos", "mul", "sigmoid")), fused[0].name
    assert not [e for e in device if e.name == "pointwise.apply"]
