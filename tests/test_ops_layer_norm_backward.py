"""Layer norm's and RMS norm's backward on loom over many rows: the input
gradient and the weight/bias gradients come from one pass over the rows in
chunks whose column sums are combined in chunk order. Against the CPU, and
against a float64 reference computed from the same inputs (loom's error
no larger than a small multiple of the CPU's own), every mask, rows longer
than the staging buffer of the 16-bit types, no rows, and bitwise
independence of the thread count."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads
from nn_compare import close

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

OP = torch.ops.aten.native_layer_norm_backward
# shapes (rows, row length): one chunk, many chunks with a short last one,
# short rows, rows longer than the 16-bit types' staging buffer
SHAPES = [(5, 33), (2048, 256), (301, 64), (5000, 8), (3, 9000)]


def inputs(m, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 2 + 0.5).to(dtype)
    dy = torch.randn(m, n, generator=g).to(dtype)
    w = torch.randn(n, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    return x, dy, w, b


def backward(x, dy, w, b, mask=None, device="cpu"):
    n = x.shape[-1]
    if mask is None:  # the CPU's op refuses a bias gradient without a bias
        mask = (True, w is not None, b is not None)
    x, dy = x.to(device), dy.to(device)
    w = None if w is None else w.to(device)
    b = None if b is None else b.to(device)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
    return [None if t is None else t.cpu() for t in OP(dy, x, [n], mean, rstd, w, b, list(mask))]


def reference(x, dy, w, b):
    """float64 gradients from the same (rounded) inputs."""
    d = lambda t: None if t is None else t.double()
    return backward(d(x), d(dy), d(w), d(b))


def error(a, ref):
    return (a.double() - ref).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("m,n", SHAPES, ids=str)
@pytest.mark.parametrize("affine", ["weight_bias", "weight"])
def test_layer_norm_backward_matches_cpu_and_float64(dtype, m, n, affine):
    x, dy, w, b = inputs(m, n, dtype)
    if affine == "weight":
        b = None
    got = backward(x, dy, w, b, device="loom")
    cpu = backward(x, dy, w, b)
    ref = reference(x, dy, w, b)
    names = ["dx", "dw", "db"]
    for name, a, c, r in zip(names, got, cpu, ref):
        if c is None:
            assert a is None, name
            continue
        assert a.dtype == c.dtype and a.shape == c.shape, name
        # The parameter gradients sum m rows: their rounding grows with m,
        # and the CPU sums 16-bit ones less exactly than loom (its error
        # against float64 is 20x loom's at 2048 rows), so those are held to
        # the reference alone.
        if name == "dx":
            close(a, c, dtype, scale=2.0)
        elif dtype in (torch.float32, torch.float64):
            close(a, c, dtype, scale=2.0 * max(1.0, m ** 0.5 / 4))
        if dtype == torch.float64:
            continue  # the reference is the CPU's own result
        # no less exact than the CPU, beyond a few units of the dtype's rounding
        ulp = torch.finfo(dtype).eps * max(1.0, r.abs().max().item())
        assert error(a, r) <= 2 * error(c, r) + 4 * ulp, (name, error(a, r), error(c, r))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_backward_masks_give_the_same_bits(dtype):
    # the parameter gradients alone, the input gradient alone and all three
    # together come from the same sums in the same order
    x, dy, w, b = inputs(700, 96, dtype, seed=1)
    full = backward(x, dy, w, b, device="loom")
    params = backward(x, dy, w, b, (False, True, True), device="loom")
    only_dx = backward(x, dy, w, b, (True, False, False), device="loom")
    only_db = backward(x, dy, w, b, (False, False, True), device="loom")
    assert params[0] is None and only_dx[1] is None and only_dx[2] is None
    assert torch.equal(params[1], full[1]) and torch.equal(params[2], full[2])
    assert torch.equal(only_dx[0], full[0])
    assert only_db[1] is None and torch.equal(only_db[2], full[2])


def test_layer_norm_backward_mixed_dtypes():
    # bf16 rows with a float32 weight (float32 statistics), as mixed
    # precision runs them; the float32 parameter gradients against float64
    # (the CPU's are off by up to 2.9 of 73 here: it sums in bf16)
    x, dy, _, _ = inputs(640, 128, torch.bfloat16, seed=2)
    w = torch.randn(128)
    b = torch.randn(128)
    got = backward(x, dy, w, b, device="loom")
    cpu = backward(x, dy, w, b)
    ref = reference(x, dy, w, b)
    assert [t.dtype for t in got] == [t.dtype for t in cpu]
    close(got[0], cpu[0], torch.bfloat16, scale=2.0)
    for a, r in zip(got[1:], ref[1:]):
        torch.testing.assert_close(a.double(), r, rtol=1e-5, atol=1e-5)


def test_layer_norm_backward_no_rows():
    x = torch.randn(0, 16)
    w, b = torch.randn(16), torch.randn(16)
    dy = torch.randn(0, 16)
    got = backward(x, dy, w, b, device="loom")
    assert got[0].shape == (0, 16)
    assert torch.equal(got[1], torch.zeros(16)) and torch.equal(got[2], torch.zeros(16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_backward_many_rows(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(900, 160, generator=g) + 0.3).to(dtype)
    w = torch.randn(160, generator=g).to(dtype)
    dy = torch.randn(900, 160, generator=g).to(dtype)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    xd, wd = x.to("loom").requires_grad_(), w.to("loom").requires_grad_()
    gc = torch.autograd.grad(F.rms_norm(xc, (160,), wc), (xc, wc), dy)
    gd = torch.autograd.grad(F.rms_norm(xd, (160,), wd), (xd, wd), dy.to("loom"))
    close(gd[0], gc[0], dtype, scale=2.0)
    close(gd[1], gc[1], dtype, scale=2.0 * 900 ** 0.5 / 4)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    ref = torch.autograd.grad(F.rms_norm(xr, (160,), wr), (xr, wr), dy.double())
    for a, c, r in zip(gd, gc, ref):
        ulp = torch.finfo(dtype).eps * max(1.0, r.abs().max().item())
        assert error(a.cpu(), r) <= 2 * error(c, r) + 4 * ulp


def test_layer_norm_backward_thread_count_independent():
    code = """
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for m, n in ((2048, 256), (301, 64), (3, 9000)):
            x = torch.randn(m, n, generator=g).to(dtype).to("loom").requires_grad_()
            w = torch.randn(n, generator=g).to(dtype).to("loom").requires_grad_()
            b = torch.randn(n, generator=g).to(dtype).to("loom").requires_grad_()
            dy = torch.randn(m, n, generator=g).to(dtype).to("loom")
            add(*torch.autograd.grad(F.layer_norm(x, (n,), w, b), (x, w, b), dy))
            add(*torch.autograd.grad(F.rms_norm(x, (n,), w), (x, w), dy))
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 2)
