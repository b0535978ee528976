"""Reflection and replication padding (F.pad "reflect" / "replicate") on
loom against the CPU, bit for bit: 1, 2 and 3 padded dims, batched and
unbatched, asymmetric and negative pads, non-contiguous inputs, 16-bit
and integer dtypes, gradients, out= variants and bad pads."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CASES = [  # (input shape, pads)
    ((2, 3, 9), (3, 2)), ((3, 9), (0, 4)),
    ((2, 3, 6, 7), (1, 2, 3, 0)), ((3, 6, 7), (2, 2, 2, 2)),
    ((1, 2, 4, 5, 6), (1, 2, 0, 3, 2, 1)), ((2, 4, 5, 6), (1, 1, 1, 1, 1, 1)),
]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
def test_padding_matches_cpu(mode, case, dtype):
    shape, pads = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    for view in [lambda t: t, lambda t: t.transpose(0, -1).contiguous().transpose(0, -1)]:
        xc = view(x).detach().clone().requires_grad_()
        xl = view(x.to("loom")).detach().requires_grad_()
        yc, yl = F.pad(xc, pads, mode=mode), F.pad(xl, pads, mode=mode)
        assert torch.equal(yl.detach().cpu(), yc.detach())
        go = torch.randn(yc.shape, generator=g).to(dtype)
        yc.backward(go)
        yl.backward(go.to("loom"))
        assert torch.equal(xl.grad.cpu(), xc.grad)   # gradients add in the CPU's order


def test_integers_crops_out_and_errors():
    x = torch.arange(60, dtype=torch.int32).reshape(3, 4, 5)
    for mode in ["reflect", "replicate"]:
        assert torch.equal(F.pad(x.to("loom"), (2, 3, 1, 2), mode=mode).cpu(),
                           F.pad(x, (2, 3, 1, 2), mode=mode))
    y = torch.randn(2, 3, 8)
    assert torch.equal(F.pad(y.to("loom"), (-2, 3), mode="replicate").cpu(),
                       F.pad(y, (-2, 3), mode="replicate"))
    out = torch.empty(0, device="loom")
    torch.ops.aten.reflection_pad2d.out(y.to("loom"), [1, 1, 2, 2], out=out)
    assert torch.equal(out.cpu(), torch.ops.aten.reflection_pad2d(y, [1, 1, 2, 2]))
    for bad in [lambda d: F.pad(torch.ones(1, 2, 4, device=d), (4, 0), mode="reflect"),
                lambda d: F.pad(torch.ones(1, 2, 4, 4, device=d), (1, 1, 5, 1), mode="reflect"),
                lambda d: torch.ops.aten.replication_pad2d(torch.ones(2, device=d), [1, 1, 1, 1])]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")
