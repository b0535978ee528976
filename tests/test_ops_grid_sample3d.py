"""3-d grid sampling (F.grid_sample of 5-d inputs, aten::grid_sampler_3d)
on loom against the CPU, bit for bit: bilinear and nearest, zeros /
border / reflection padding, align_corners both ways, grid points inside
and outside the volume, float32 and float64, the input's and the grid's
gradients (and the grid's alone), strided inputs, bad arguments, and
bitwise thread-count independence."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(dtype, mode, padding):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6, generator=g, dtype=dtype)
    grid = torch.rand(2, 3, 4, 5, 3, generator=g, dtype=dtype) * 2.6 - 1.3  # some points outside
    for align in (False, True):
        for inp in (x, x.transpose(2, 4).contiguous().transpose(2, 4)):  # and a strided input
            xc, gc = inp.clone().requires_grad_(), grid.clone().requires_grad_()
            xl, gl = inp.to("loom").requires_grad_(), grid.to("loom").requires_grad_()
            yc = F.grid_sample(xc, gc, mode=mode, padding_mode=padding, align_corners=align)
            yl = F.grid_sample(xl, gl, mode=mode, padding_mode=padding, align_corners=align)
            assert yl.stride() == yc.stride()
            torch.testing.assert_close(yl.detach().cpu(), yc.detach(), rtol=0, atol=0)
            go = torch.randn(yc.shape, generator=g, dtype=dtype)
            yc.backward(go)
            yl.backward(go.to("loom"))
            torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=0, atol=0)
            torch.testing.assert_close(gl.grad.cpu(), gc.grad, rtol=0, atol=0)
    # the grid's gradient alone (the input needs none)
    gl = grid.to("loom").requires_grad_()
    yl = F.grid_sample(x.to("loom"), gl, mode=mode, padding_mode=padding, align_corners=False)
    gc = grid.clone().requires_grad_()
    yc = F.grid_sample(x, gc, mode=mode, padding_mode=padding, align_corners=False)
    yl.sum().backward()
    yc.sum().backward()
    torch.testing.assert_close(gl.grad.cpu(), gc.grad, rtol=0, atol=0)


def test_errors():
    x = torch.randn(1, 2, 3, 4, 5)
    grid = torch.rand(1, 2, 2, 2, 3)
    bad = [lambda d: F.grid_sample(x.to(d), grid[..., :2].to(d), align_corners=False),
           lambda d: F.grid_sample(x.to(d), grid.to(d), mode="bicubic", align_corners=False),
           lambda d: F.grid_sample(x.to(d), grid[:, :1].reshape(1, 2, 2, 3).to(d),
                                   align_corners=False)]
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
    x = torch.randn(4, 8, 6, 7, 8, dtype=dtype).to("loom").requires_grad_()
    grid = (torch.rand(4, 5, 6, 7, 3, dtype=dtype) * 2.4 - 1.2).to("loom").requires_grad_()
    for mode in ("bilinear", "nearest"):
        y = F.grid_sample(x, grid, mode=mode, padding_mode="reflection", align_corners=False)
        gx, gg = torch.autograd.grad(y, (x, grid), torch.randn(y.shape, dtype=dtype).to("loom"))
        for r in (y, gx, gg):
            h.update(r.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", h.hexdigest())
"""


def test_thread_count_does_not_change_bits():
    assert digest_with_threads(SCRIPT, 2) == digest_with_threads(SCRIPT, 1)
