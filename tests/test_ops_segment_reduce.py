"""segment_reduce on loom against the CPU, bit for bit (the kernel combines
each segment's elements in the CPU's order in the dtype): sum, mean, max,
min, prod; lengths and offsets; initial; axis 0 and inner axes with N-d
lengths; empty segments, NaN; the backward of every reduction; argument
errors; nothing on the CPU fallback for float32/float64."""
import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def to_loom(kw):
    return {k: (v.to("loom") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def check(data, reduce, grad=True, **kw):
    """Forward and backward on loom equal the CPU's bits."""
    x = data.clone().requires_grad_(grad)
    expected = torch.segment_reduce(x, reduce, **kw)
    lx = data.to("loom").requires_grad_(grad)
    got = torch.segment_reduce(lx, reduce, **to_loom(kw))
    assert got.device.type == "loom"
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    if grad:
        g = torch.randn(expected.shape, dtype=data.dtype, generator=torch.Generator().manual_seed(1))
        (gx,) = torch.autograd.grad(expected, x, g)
        (lgx,) = torch.autograd.grad(got, lx, g.to("loom"))
        torch.testing.assert_close(lgx.cpu(), gx, rtol=0, atol=0, equal_nan=True)


def segment_data(dtype, n=40, inner=(300,), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n,) + inner, generator=g, dtype=dtype)
    x[3] = 0  # zeros for prod's backward
    x.view(n, -1)[5, ::7] = x.view(n, -1)[6, ::7]  # ties for max/min's backward
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_lengths_and_offsets_axis0(reduce, dtype, no_fallback):
    x = segment_data(dtype)
    lengths = torch.tensor([3, 0, 7, 1, 12, 0, 17])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    check(x, reduce, lengths=lengths)
    check(x, reduce, offsets=offsets)
    check(x, reduce, lengths=lengths.int(), initial=0.5)
    check(x[:, 0], reduce, lengths=lengths)  # 1-d data


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_inner_axis_with_nd_lengths(reduce, no_fallback):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 2, 9, 5, generator=g, dtype=torch.float64)
    lengths = torch.tensor([[2, 0, 3, 4], [9, 0, 0, 0]]).expand(3, 2, 4).contiguous()
    check(x, reduce, lengths=lengths, axis=2)
    offsets = torch.cat([torch.zeros(3, 2, 1, dtype=torch.long), lengths.cumsum(-1)], -1)
    check(x, reduce, offsets=offsets, axis=2, initial=2.0)


def test_nan_and_empty_segments(no_fallback):
    x = torch.tensor([1.0, float("nan"), 3.0, 2.0, 5.0, -1.0])
    lengths = torch.tensor([2, 0, 4])
    for reduce in REDUCTIONS:
        check(x, reduce, lengths=lengths, grad=False)
        check(x, reduce, lengths=lengths, initial=-4.0, grad=False)


def test_offsets_not_starting_at_zero(no_fallback):
    x = segment_data(torch.float32, n=20, inner=(3,))
    for reduce in REDUCTIONS:
        check(x, reduce, offsets=torch.tensor([2, 5, 5, 11]))


def test_unsafe_skips_the_length_checks(no_fallback):
    x = segment_data(torch.float32, n=10, inner=(4,))
    check(x, "sum", lengths=torch.tensor([3, 7]), unsafe=True)


def test_bad_arguments_raise_naming_the_op():
    x = torch.randn(6, 2, device="loom")
    with pytest.raises(RuntimeError, match="segment_reduce"):
        torch.segment_reduce(x, "median", lengths=torch.tensor([6], device="loom"))
    with pytest.raises(RuntimeError, match="negative"):
        torch.segment_reduce(x, "sum", lengths=torch.tensor([7, -1], device="loom"))
    with pytest.raises(RuntimeError, match="sum to data.size"):
        torch.segment_reduce(x, "sum", lengths=torch.tensor([2, 3], device="loom"))
    with pytest.raises(RuntimeError, match="segment_reduce"):
        torch.segment_reduce(x, "sum", offsets=torch.tensor([0, 4, 9], device="loom"))
    with pytest.raises(RuntimeError, match="segment_reduce"):
        torch.segment_reduce(x, "sum", offsets=torch.tensor([0, 4, 2], device="loom"))
    with pytest.raises(RuntimeError, match="last dimension of lengths"):
        torch.segment_reduce(x, "sum", lengths=torch.tensor([6], device="loom"), axis=1)


def test_half_runs_on_the_cpu_counted():
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    x = torch.randn(6, 3).half()
    got = torch.segment_reduce(x.to("loom"), "sum", lengths=torch.tensor([2, 4]).to("loom"))
    torch.testing.assert_close(got.cpu(), torch.segment_reduce(x, "sum", lengths=torch.tensor([2, 4])))
    assert torch.loom.fallback_ops().get("aten::segment_reduce", 0) >= 1
