"""Adaptive eager, GEMM epilogues: the elementwise launches queued right
after a matrix product that read its result run on each output tile as the
GEMM finishes it (one "gemm.compute_epilogue" launch), with the bytes of
the launches one by one, every intermediate still written.

Programs run with the stream held (test_fusion.py's `held`), so that they
are queued whole when the executor reaches them. The executor forms these
groups only under LOOM_FUSE_EPILOGUE=1 (off by default: they measured
slower on the bench's MLP blocks); the tests here turn it on."""

import pytest
import torch
import torch.nn.functional as F

from test_fusion import held, raw, same_bytes

fusion = torch.loom.fusion


@pytest.fixture(autouse=True)
def epilogues_on(monkeypatch):
    torch.loom.synchronize()
    monkeypatch.setenv("LOOM_FUSE_EPILOGUE", "1")
    yield
    torch.loom.synchronize()

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _inputs(m, k, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(k, n, generator=g) / k ** 0.5
    row = torch.randn(n, generator=g)  # broadcast along rows (a bias)
    col = torch.randn(m, 1, generator=g)  # broadcast along columns
    full = torch.randn(m, n, generator=g)
    return [t.to(dtype).to("loom") for t in (x, w, row, col, full)]


def _program(kind, x, w, row, col, full):
    """A product followed by elementwise steps; returns every tensor made."""
    c = torch.mm(x, w)
    if kind == "bias_gelu":
        h = c + row
        return [h, F.gelu(h)]
    if kind == "silu_gate":  # the product second in a mul, an operand first
        s = F.silu(full)
        return [s, s * c]
    if kind == "chain":  # column broadcast, operand - value (swapped), tanh, relu
        a = c * col
        b = full - a
        t = torch.tanh(b)
        return [a, b, t, torch.relu(t)]
    if kind == "in_place":  # steps in place on the product
        c.add_(row)
        torch.sigmoid_(c)
        return [c]
    if kind == "residual":  # x + (W2 h + b2), as the MLP block ends
        return [full + (c + row)]
    if kind == "backward":  # gelu's backward with the product as the gradient
        return [torch.ops.aten.gelu_backward(c, full)]
    raise AssertionError(kind)


KINDS = ["bias_gelu", "silu_gate", "chain", "in_place", "residual", "backward"]
SHAPES = [(256, 64, 256), (100, 48, 200), (16, 96, 640), (300, 32, 8)]


def poison(m, n, dtype):
    """Leaves NaN in the blocks the allocator hands out next for [m, n]
    tensors, so that an output a run fails to write cannot hold the right
    values by chance (left there by an earlier run)."""
    junk = [torch.full((m, n), float("nan"), dtype=dtype, device="loom") for _ in range(8)]
    torch.loom.synchronize()
    del junk


def _run(kind, shape, dtype, seed, keep):
    """The program's outputs on the CPU; its loom tensors go to `keep`, so
    that a later run's outputs take other memory."""
    x, w, row, col, full = _inputs(*shape, dtype, seed)
    poison(shape[0], shape[2], dtype)
    with held():
        out = _program(kind, x, w, row, col, full)
    keep += out
    return [t.cpu() for t in out]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_epilogue_bitwise_equal_unfused(no_fallback, kind, dtype):
    for i, shape in enumerate(SHAPES):
        keep = []
        with fusion.mode(0):
            ref = _run(kind, shape, dtype, i, keep)
        with fusion.mode(1):
            got = _run(kind, shape, dtype, i, keep)
        assert same_bytes(ref, got), (kind, shape, dtype)


def _profile_names(fn):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.loom.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        out = fn()
        torch.loom.synchronize()
    return out, [e.name for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def test_epilogue_is_one_kernel_and_counted(no_fallback):
    x, w, row, _, full = _inputs(256, 64, 256, torch.float32, 7)

    keep = []

    def program():
        with held():
            h = torch.mm(x, w) + row
            y = F.gelu(h) * full
        keep.extend([h, y])
        return [h.cpu(), y.cpu()]

    with fusion.mode(0):
        ref = program()
    poison(256, 256, torch.float32)
    before = fusion.counters()
    got, names = _profile_names(program)
    after = fusion.counters()
    assert same_bytes(ref, got)
    fused = [n for n in names if n.startswith("fused(")]
    assert len(fused) == 1, names
    assert "mm" in fused[0] and all(op in fused[0] for op in ("add", "gelu", "mul")), fused[0]
    assert not [n for n in names if n in ("gemm.compute", "pointwise.apply")], names
    assert after["groups"] - before["groups"] == 1
    assert after["ops_fused"] - before["ops_fused"] == 4
    assert after["bytes_cached"] - before["bytes_cached"] == 3 * 256 * 256 * 4


def test_intermediate_read_later_is_written(no_fallback):
    """The intermediate another op reads after the group (a reduction, which
    cannot be a step) holds its values: every step's output is stored."""
    x, w, row, _, full = _inputs(128, 64, 384, torch.float32, 3)

    keep = []

    def program():
        poison(128, 384, torch.float32)
        with held():
            h = torch.mm(x, w) + row
            g = torch.tanh(h)
            s = h.sum(dim=1)  # reads h after the group
            t = h.t() * 2  # through another element map
        keep.extend([h, g, s, t])
        return [h.cpu(), g.cpu(), s.cpu(), t.cpu()]

    with fusion.mode(0):
        ref = program()
    before = fusion.counters()
    with fusion.mode(1):
        got = program()
    after = fusion.counters()
    assert same_bytes(ref, got)
    assert after["ops_fused"] - before["ops_fused"] >= 3


def test_steps_that_do_not_fit_are_left_out(no_fallback):
    """A step over another element map of the product (its transpose), a
    constant operand, an op with parameters and a step writing into the
    product's input run unfused, with the same bytes."""
    x, w, row, _, full = _inputs(96, 96, 96, torch.float32, 5)

    def program():
        a = x.clone()
        with held():
            c = torch.mm(a, w)
            d = c.t() + full  # another map of C
            e = torch.mm(a, w) * 0.5  # a constant
            f = F.leaky_relu(torch.mm(a, w), 0.1)  # a parameter
            g = torch.mm(a, w)
            a.add_(g)  # writes the product's A
        return [c.cpu(), d.cpu(), e.cpu(), f.cpu(), g.cpu(), a.cpu()]

    with fusion.mode(0):
        ref = program()
    poison(96, 96, torch.float32)
    with fusion.mode(1):
        assert same_bytes(ref, program())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_epilogue_under_verify(no_fallback, dtype):
    """LOOM_FUSE=verify runs the product and its steps one by one too and
    compares the bytes (a difference fails the download)."""
    keep = []
    with fusion.mode(0):
        ref = _run("chain", (256, 64, 256), dtype, 11, keep)
    before = fusion.counters()
    with fusion.mode("verify"):
        got = _run("chain", (256, 64, 256), dtype, 11, keep)
    after = fusion.counters()
    assert same_bytes(ref, got)
    assert after["verified"] > before["verified"]


def test_mlp_block_matches_unfused(no_fallback):
    """The benchmark's blocks, not held: the executor waits briefly for the
    steps of a large product and takes them as they come."""
    g = torch.Generator().manual_seed(0)
    t, d = 512, 128
    x, w1, w3 = (torch.randn(t, d, generator=g).to("loom"),
                 (torch.randn(d, 4 * d, generator=g) / d ** 0.5).to("loom"),
                 (torch.randn(d, 4 * d, generator=g) / d ** 0.5).to("loom"))
    w2 = (torch.randn(4 * d, d, generator=g) / (2 * d)).to("loom")
    b1, b2 = torch.randn(4 * d, generator=g).to("loom"), torch.randn(d, generator=g).to("loom")

    def blocks():
        y = x + (torch.mm(F.gelu(torch.mm(x, w1) + b1), w2) + b2)
        z = x + torch.mm(F.silu(torch.mm(x, w1)) * torch.mm(x, w3), w2)
        return [raw(y), raw(z)]

    with fusion.mode(0):
        ref = blocks()
    for mode in (1, "verify"):
        with fusion.mode(mode):
            assert all(torch.equal(a, b) for a, b in zip(ref, blocks()))


def test_epilogues_off_by_default(no_fallback, monkeypatch):
    """Without LOOM_FUSE_EPILOGUE=1 a product and its steps run as their own
    launches, with the same bytes."""
    torch.loom.synchronize()
    monkeypatch.delenv("LOOM_FUSE_EPILOGUE")
    x, w, row, _, full = _inputs(256, 64, 256, torch.float32, 7)

    def program():
        with held():
            h = torch.mm(x, w) + row
            y = F.gelu(h) * full
        return [h.cpu(), y.cpu()]

    with fusion.mode(0):
        ref = program()
    got, names = _profile_names(program)
    assert same_bytes(ref, got)
    assert "gemm.compute" in names, names
    assert not [n for n in names if n.startswith("fused(") and "mm" in n], names
