"""Elementwise ops on one-element tensors on loom, bit for bit against the
CPU: type promotion between the operands' dtypes, Python scalars, 0-d and
(1, 1) operands, NaN and -0.0, in-place and out=, a one-element view at an
offset. Nothing may fall back to the CPU."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8, torch.bool]
VALUES = [2.5, -0.0, float("nan"), -7.0]
BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum,
          lambda a, b: torch.add(a, b, alpha=3)]


def one(value, dtype, shape=(1,)):
    t = torch.tensor(value, dtype=torch.float64)
    if not dtype.is_floating_point:
        t = torch.nan_to_num(t, nan=3.0).abs()
    return t.to(dtype).reshape(shape)


def same(actual, expected):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = actual.cpu(), expected
    if e.dtype.is_floating_point:
        a, e = a.double(), e.double()
        assert torch.equal(torch.isnan(a), torch.isnan(e))
        assert torch.equal(torch.signbit(a), torch.signbit(e))
        a, e = torch.nan_to_num(a), torch.nan_to_num(e)
    assert torch.equal(a, e), (actual, expected)


def run_both(fn, *args):
    """fn on CPU args and on loom copies; None where the CPU raises (loom
    must raise the same type)."""
    dev = [a.to("loom") if isinstance(a, torch.Tensor) else a for a in args]
    try:
        expected = fn(*args)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            fn(*dev)
            torch.loom.synchronize()
        return
    same(fn(*dev), expected)


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("da", DTYPES, ids=str)
@pytest.mark.parametrize("db", DTYPES, ids=str)
def test_binary_one_element_promotion(op, da, db):
    for i, v in enumerate(VALUES):
        run_both(op, one(v, da), one(VALUES[(i + 1) % len(VALUES)], db))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scalar", [3, -1.25, float("nan"), True])
def test_one_element_with_scalars(dtype, scalar):
    for v in VALUES:
        run_both(lambda a: a + scalar, one(v, dtype))
        run_both(lambda a: scalar * a, one(v, dtype))
        run_both(lambda a: torch.sub(a, scalar, alpha=2), one(v, dtype))
        run_both(lambda a: torch.where(a > 0, a, scalar), one(v, dtype))


@pytest.mark.parametrize("shapes", [((1,), ()), ((), (1,)), ((1, 1), (1,)), ((), ()),
                                    ((1, 1, 1), (1, 1))])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32),
                                    (torch.float32, torch.float64),
                                    (torch.float16, torch.float32), (torch.int32, torch.float32),
                                    (torch.float32, torch.int64)], ids=str)
def test_one_element_broadcast_shapes(shapes, dtypes):
    a, b = one(1.75, dtypes[0], shapes[0]), one(-0.5, dtypes[1], shapes[1])
    for op in BINARY:
        run_both(op, a, b)
    run_both(lambda x, y: torch.where(x > y, x, y), a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64],
                         ids=str)
def test_one_element_in_place_and_out(dtype):
    for other in (one(2.0, dtype), one(0.5, torch.float32), 4):
        if not dtype.is_floating_point and isinstance(other, torch.Tensor) and \
                other.dtype.is_floating_point:
            continue  # the CPU refuses a float result into an integer tensor
        a = one(-3.0, dtype)
        d = a.to("loom")
        o = other.to("loom") if isinstance(other, torch.Tensor) else other
        a.add_(other, alpha=2)
        d.add_(o, alpha=2)
        same(d, a)
        a.mul_(a)  # operand and output the same element
        d.mul_(d)
        same(d, a)
        out_c, out_d = torch.empty(1, dtype=torch.float64), torch.empty(1, dtype=torch.float64,
                                                                        device="loom")
        torch.sub(a, other, out=out_c)
        torch.sub(d, o, out=out_d)
        same(out_d, out_c)


def test_one_element_views_at_an_offset():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5.5
    d = base.to("loom")
    for idx in [(slice(1, 2), slice(2, 3)), (slice(2, 3), slice(3, 4)), (0, slice(1, 2))]:
        run_both(lambda x: x[idx] + x[idx].reshape(1, -1), base)
        run_both(lambda x: x[idx] * 2.5, base)
    x = base.clone()
    x[1:2, 2:3] += base[2:3, 0:1]
    y = d.clone()
    y[1:2, 2:3] += d[2:3, 0:1]
    same(y, x)


@pytest.mark.parametrize("shape", [(1,), (3, 5)])
def test_sub_refuses_a_bool_operand(shape):
    x = torch.full(shape, 2.5)
    for fn in (lambda a: a - True, lambda a: torch.sub(a, False, alpha=2),
               lambda a: a.clone().sub_(True), lambda a: torch.rsub(a, True)):
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            fn(x)
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            fn(x.to("loom"))
            torch.loom.synchronize()
