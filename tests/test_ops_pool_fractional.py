"""Fractional max pooling (F.fractional_max_pool2d/3d) on loom against the
CPU given the same random samples, bit for bit: values, indices and the
input's gradient; batched and unbatched, kernel and output sizes, ties
and NaN inputs, float32 and float64, out= variants, bad arguments, and
bitwise thread-count independence."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CASES = [(2, (2, 3, 9, 10), (2, 3), (4, 5)), (2, (3, 9, 10), (3, 2), (7, 8)),
         (2, (2, 3, 9, 10), 2, (8, 9)), (2, (1, 2, 17, 5), (4, 1), (6, 5)),
         (3, (2, 3, 6, 9, 10), (2, 2, 3), (3, 4, 5)), (3, (3, 6, 9, 10), 2, (4, 7, 8))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("dims,shape,k,size", CASES, ids=str)
def test_against_cpu(dtype, dims, shape, k, size):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    x[..., 0, 0] = x[..., 0, 1]  # ties: the first stays
    x.view(-1)[7] = float("nan")  # NaN wins its windows
    n = shape[0] if len(shape) == dims + 2 else 1
    samples = torch.rand(n, shape[-dims - 1], dims, generator=g, dtype=dtype)
    fn = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d
    xc, xl = x.clone().requires_grad_(), x.to("loom").requires_grad_()
    yc, ic = fn(xc, k, output_size=size, return_indices=True, _random_samples=samples)
    yl, il = fn(xl, k, output_size=size, return_indices=True, _random_samples=samples.to("loom"))
    assert yl.stride() == yc.stride() and il.dtype == torch.int64
    torch.testing.assert_close(yl.detach().cpu(), yc.detach(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(il.cpu(), ic)
    go = torch.randn(yc.shape, generator=g, dtype=dtype)
    yc.backward(go)
    yl.backward(go.to("loom"))
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=0, atol=0)


def test_out_variants_and_errors():
    x = torch.randn(2, 3, 9, 10)
    s = torch.rand(2, 3, 2)
    o, i = torch.empty(0, device="loom"), torch.empty(0, dtype=torch.long, device="loom")
    torch.ops.aten.fractional_max_pool2d.output(x.to("loom"), [2, 2], [5, 6], s.to("loom"),
                                                output=o, indices=i)
    yc, ic = torch._C._nn.fractional_max_pool2d(x, [2, 2], [5, 6], s)
    assert torch.equal(o.cpu(), yc) and torch.equal(i.cpu(), ic)
    go = torch.randn(2, 3, 5, 6)
    gi = torch.empty(0, device="loom")
    torch.ops.aten.fractional_max_pool2d_backward.grad_input(go.to("loom"), x.to("loom"), [2, 2],
                                                             [5, 6], i, grad_input=gi)
    assert torch.equal(gi.cpu(), torch.ops.aten.fractional_max_pool2d_backward(go, x, [2, 2], [5, 6], ic))
    x3, s3 = torch.randn(1, 2, 5, 6, 7), torch.rand(1, 2, 3)
    bad = [lambda d: torch._C._nn.fractional_max_pool2d(x.to(d), [2, 2], [9, 6], s.to(d)),
           lambda d: torch._C._nn.fractional_max_pool2d(x[0, 0].to(d), [2, 2], [5, 6], s.to(d)),
           lambda d: torch._C._nn.fractional_max_pool3d(x3.to(d), [2, 2, 2], [3, 3, 7], s3.to(d)),
           lambda d: torch._C._nn.fractional_max_pool3d(x3.to(d), [2, 2, 2], [3, 3], s3.to(d))]
    for fn in bad:
        with pytest.raises(Exception) as cpu_err:
            fn("cpu")
        with pytest.raises(type(cpu_err.value)):
            fn("loom")


SCRIPT = r"""
import hashlib, torch, torch.nn.functional as F
torch.manual_seed(0)
h = hashlib.sha256()
for dtype in (torch.float32, torch.float64):
    x = torch.randn(4, 16, 40, 36, dtype=dtype).to("loom").requires_grad_()
    s = torch.rand(4, 16, 2, dtype=dtype).to("loom")
    x3 = torch.randn(2, 16, 12, 14, 10, dtype=dtype).to("loom").requires_grad_()
    s3 = torch.rand(2, 16, 3, dtype=dtype).to("loom")
    for y, t in ((F.fractional_max_pool2d(x, 3, output_size=(25, 20), _random_samples=s), x),
                 (F.fractional_max_pool3d(x3, 2, output_size=(9, 10, 7), _random_samples=s3), x3)):
        g, = torch.autograd.grad(y, t, torch.randn(y.shape, dtype=dtype).to("loom"))
        for r in (y, g):
            h.update(r.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", h.hexdigest())
"""


def test_thread_count_does_not_change_bits():
    assert digest_with_threads(SCRIPT, 2) == digest_with_threads(SCRIPT, 1)
