"""Elementwise ops on loom against the CPU: every listed dtype the CPU
supports for the op, functional / in-place / out=, broadcasting,
non-contiguous inputs, scalar operands, and bad input raising what the CPU
raises. Nothing may fall back to the CPU."""
import math

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]
TOL = {torch.float32: dict(rtol=2e-5, atol=2e-5),
       torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def make(shape, dtype, low=-3.0, high=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    lo = 0 if dtype == torch.uint8 else max(int(low) * 10, -100)
    hi = max(min(int(high) * 10, 100), lo + 2)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def check(fn, *args, dtype=None, exact=False, **kw):
    """fn on CPU args and on their loom copies gives the same result (and the
    same exception type)."""
    dev = [a.to("loom") if isinstance(a, torch.Tensor) else a for a in args]
    try:
        expected = fn(*args, **kw)
    except Exception as e:  # the loom op must raise the same type
        with pytest.raises(type(e)):
            fn(*dev, **kw)
            torch.loom.synchronize()
        return
    actual = fn(*dev, **kw)
    outs = (actual, expected) if not isinstance(expected, tuple) else (actual, expected)
    a, e = outs
    if isinstance(e, tuple):
        for x, y in zip(a, e):
            _close(x, y, exact)
    else:
        _close(a, e, exact)


def _close(actual, expected, exact):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if exact or not expected.dtype.is_floating_point:
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **TOL[expected.dtype])


UNARY_FLOAT = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
               "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
               "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "reciprocal", "lgamma",
               "digamma", "sinc", "angle"]
UNARY_KEEP = ["abs", "neg", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "square",
              "relu", "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "signbit",
              "nan_to_num", "isposinf", "isneginf"]
DOMAIN = {"log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "log1p": (-0.5, 5),
          "sqrt": (0.1, 5), "rsqrt": (0.1, 5), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9),
          "atanh": (-0.9, 0.9), "acosh": (1.1, 5), "erfinv": (-0.9, 0.9), "reciprocal": (0.5, 3)}


@pytest.mark.parametrize("name", UNARY_FLOAT + UNARY_KEEP)
@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_unary(name, dtype):
    low, high = DOMAIN.get(name, (-3, 3))
    x = make((5, 33), dtype, low, high)
    fn = getattr(torch, name)
    check(fn, x)
    check(fn, x.t())  # non-contiguous
    if dtype.is_floating_point and name in UNARY_FLOAT + ["abs", "neg", "floor", "relu"]:
        check(lambda t: getattr(t.clone(), name + "_")(), x)   # in place
        check(lambda t: fn(t, out=torch.empty(0, dtype=t.dtype, device=t.device)), x)


@pytest.mark.parametrize("fn", [torch.sin, torch.cos], ids=lambda f: f.__name__)
def test_sin_cos_over_their_range(fn):
    # float32 sin and cos run in double arithmetic up to |x| = 2^17 and take
    # the C library past it: near the CPU's values everywhere, 16-bit
    # floats, views and in-place forms included.
    g = torch.Generator().manual_seed(11)
    x = torch.cat([torch.randn(3000, generator=g) * s for s in (1e-3, 1.0, 100.0, 1e5, 1e9)])
    x[::97] = torch.tensor([float("inf"), float("nan"), -0.0, 3e38])[torch.arange(x[::97].numel()) % 4]
    ref = fn(x.double()).float()
    got = fn(x.to("loom")).cpu()
    torch.testing.assert_close(got, ref, rtol=1.3e-7, atol=1e-30, equal_nan=True)
    assert torch.equal(got.isnan(), ref.isnan())
    check(fn, x.view(150, 100).t(), exact=False)
    check(lambda t: fn(t, out=torch.empty_like(t)), x[:500])
    check(lambda t: getattr(t, fn.__name__ + "_")(), x.clone())
    for dtype in (torch.bfloat16, torch.float16):
        check(fn, make((40, 30), dtype, low=-8, high=8))


@pytest.mark.parametrize("fn", [torch.expm1, torch.exp2, torch.sinh, torch.cosh, torch.tan,
                                torch.log2, torch.log10, torch.nn.functional.elu,
                                torch.nn.functional.selu,
                                lambda t: torch.nn.functional.celu(t, alpha=0.7)],
                         ids=["expm1", "exp2", "sinh", "cosh", "tan", "log2", "log10", "elu",
                              "selu", "celu"])
def test_exp_family_and_tan_over_their_range(fn):
    # float32 e^x - 1, 2^x, sinh, cosh and tan run in double arithmetic:
    # within an ulp or so of the exact value (overflow, tiny arguments and
    # specials included), matching the CPU's within its tolerance where the
    # CPU's is right (its vectorized sinh and cosh overflow from 88.73, not
    # 89.42).
    g = torch.Generator().manual_seed(13)
    x = torch.cat([torch.randn(2000, generator=g) * s for s in (1e-20, 1e-4, 1.0, 30.0, 200.0)])
    x[::89] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0])[torch.arange(x[::89].numel()) % 4]
    ref = fn(x.double()).float()
    got = fn(x.to("loom")).cpu()
    torch.testing.assert_close(got, ref, rtol=2.4e-7, atol=1e-37, equal_nan=True)
    zero = x == 0
    assert torch.equal(got[zero].signbit(), ref[zero].signbit())
    check(fn, x.clamp(-88, 88).view(100, 100).t())


@pytest.mark.parametrize("fn", [torch.atan, torch.asin, torch.acos, torch.atan2],
                         ids=["atan", "asin", "acos", "atan2"])
def test_inverse_trig_over_its_range(fn):
    # float32 atan, asin, acos and atan2 run in double arithmetic (finite
    # arguments; asin and acos on [-1, 1]) and take the C library elsewhere:
    # within an ulp or so of the exact value, signed zeros kept.
    g = torch.Generator().manual_seed(18)
    x = torch.cat([torch.randn(2000, generator=g) * s for s in (1e-20, 1e-3, 0.5, 1.0, 1e6)])
    x[::89] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 1.0, -1.0])[
        torch.arange(x[::89].numel()) % 7]
    args = (x, x.flip(0)) if fn is torch.atan2 else (x,)
    ref = fn(*(a.double() for a in args)).float()
    got = fn(*(a.to("loom") for a in args)).cpu()
    torch.testing.assert_close(got, ref, rtol=2.4e-7, atol=1e-37, equal_nan=True)
    zero = ref == 0
    assert torch.equal(got[zero].signbit(), ref[zero].signbit())
    check(fn, *(a[:5000].view(50, 100).t() for a in args))


def test_float_modulo_ops_are_exact():
    # float32 fmod runs in double arithmetic where the quotient is below
    # 2^29 and in the C library elsewhere; fmod, remainder and floor
    # division equal the CPU's bit for bit, with a tensor or a number.
    g = torch.Generator().manual_seed(12)
    a = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-20, 40, (20000,), generator=g).float())
    b = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-20, 20, (20000,), generator=g).float())
    b[::101] = torch.tensor([0.0, float("inf"), float("nan"), -0.0])[torch.arange(b[::101].numel()) % 4]
    a[1:6], b[1:6] = torch.tensor([-4.0, -6.0, 4.0, -0.0, 7.5]), torch.tensor([2.0, -3.0, -2.0, 1.0, -2.5])
    def same_bits(x, y):  # zeros' signs included; any NaN for a NaN
        nan = y.isnan()
        return torch.equal(x.isnan(), nan) and torch.equal(x[~nan].view(torch.int32), y[~nan].view(torch.int32))

    la, lb = a.to("loom"), b.to("loom")
    for fn in (torch.fmod, torch.remainder, torch.floor_divide):
        assert same_bits(fn(la, lb).cpu(), fn(a, b))
        assert same_bits(fn(la, 0.7).cpu(), fn(a, 0.7))
        assert same_bits(fn(la.view(100, 200).t(), lb.view(200, 100)).cpu(), fn(a.view(100, 200).t(), b.view(200, 100)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_pow_and_hard_activations_match_the_cpu_bitwise(dtype):
    # x ** 3 and x ** -2 take PyTorch's products; hardsigmoid and hardswish
    # clamp by comparisons, a NaN staying NaN.
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, -3.0, 3.0, 7.0, -5.0])
    x = torch.cat([special, make((1000,), torch.float64, low=-9, high=9)]).to(dtype)
    for fn in (lambda t: t.pow(3), lambda t: t.pow(-2.0), lambda t: t ** 3.0,
               torch.nn.functional.hardsigmoid, torch.nn.functional.hardswish):
        check(fn, x, exact=True)
        check(fn, x[::3], exact=True)


def test_sgn_gradient_is_zero():
    # autograd's zero gradient comes from _efficientzerotensor
    x = torch.randn(5, device="loom", requires_grad=True)
    torch.sgn(x).sum().backward()
    assert x.grad.device.type == "loom" and not x.grad.cpu().any()


def test_unary_special_values():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.5, 2.5])
    for name in ["abs", "neg", "sign", "floor", "ceil", "round", "trunc", "isnan", "isinf",
                 "isfinite", "signbit", "nan_to_num", "relu", "exp", "sigmoid", "tanh"]:
        check(getattr(torch, name), x, exact=name not in ("exp", "sigmoid", "tanh"))
    check(lambda t: torch.round(t, decimals=2), torch.tensor([1.2345, -2.5555, 1e3]))
    # poles, reflection and the series' switch points of the special functions
    s = torch.tensor([0.0, -0.0, -1.0, -2.5, 1e-8, 10.0, 9.999, 1e18, float("inf"), float("nan")])
    for name in ["lgamma", "digamma", "sinc", "angle"]:
        check(getattr(torch, name), s)
    check(torch.logaddexp, x, x.flip(0))
    check(torch.heaviside, x, x.flip(0) * 0 + 0.5)
    check(lambda t: torch.threshold(t, 1, 7), torch.arange(-4, 5))
    for dtype in [torch.int64, torch.bool, torch.float16]:
        v = torch.tensor([-1, 0, 1, 0]).to(dtype)
        check(torch.heaviside, v, torch.tensor([5, 6, 7, 8]).to(dtype))
    check(torch.heaviside, torch.zeros(2), torch.ones(2, dtype=torch.float64))  # dtypes differ
    check(torch.special.entr, torch.tensor([-1.0, 0.0, 2.0, float("nan"), 0.5]))
    for n in [0, 1, 2, 3, 4]:   # digamma, trigamma, then the Hurwitz zeta function
        for dtype in [torch.float32, torch.float64]:
            check(lambda t: torch.polygamma(n, t), make((6, 7), dtype, -2.5, 8))
        check(lambda t: torch.polygamma(n, t), torch.arange(-2, 5))   # poles, integers
        check(lambda t: t.clone().polygamma_(n), make((4,), torch.float32, 0.5, 3))
    check(lambda t: torch.polygamma(-1, t), make((4,), torch.float32))
    check(torch.special.zeta, make((5, 6), torch.float32, 0.5, 5), make((5, 6), torch.float32, -2, 4, seed=2))
    check(torch.special.zeta, torch.tensor([2.0, 1.0, 0.5, 3.0]), torch.tensor([1.0, 2.0, 3.0, -2.0]))
    for p in [1, 3]:
        check(lambda t: torch.mvlgamma(t, p), make((6, 7), torch.float32, 1.5, 6))
        check(lambda t: torch.mvlgamma(t, p), torch.arange(2, 9))   # integers: float result
    check(lambda t: torch.mvlgamma(t, 0), make((3,), torch.float32, 1.5, 6))
    # 16-bit xlogy / xlog1py round the log before the product, as the CPU
    for dtype in [torch.float16, torch.bfloat16]:
        a, b = make((40, 50), dtype, -4, 4), make((40, 50), dtype, 0.01, 6, seed=3)
        check(torch.xlogy, a, b, exact=True)
        check(torch.special.xlog1py, a, b, exact=True)
    check(torch.special.xlog1py, torch.tensor([0.0, 2.0, 0.0]), torch.tensor([float("nan"), 1.0, -1.0]))
    check(torch.logaddexp2, x, torch.full_like(x, float("inf")))
    check(lambda t: torch.nan_to_num(t, nan=1.0, posinf=2.0, neginf=-2.0), x)
    for dtype in [torch.float16, torch.bfloat16]:
        check(torch.nan_to_num, x.to(dtype))


ACTIVATIONS = [
    (F.gelu, {}), (F.gelu, {"approximate": "tanh"}), (F.silu, {}), (F.mish, {}),
    (F.softplus, {"beta": 2.0, "threshold": 3.0}), (F.leaky_relu, {"negative_slope": 0.2}),
    (F.elu, {"alpha": 1.3}), (F.selu, {}), (F.celu, {"alpha": 0.7}),
    (F.hardtanh, {"min_val": -0.5, "max_val": 2.0}), (F.hardsigmoid, {}), (F.hardswish, {}),
    (F.relu6, {}), (torch.logit, {}), (torch.logit, {"eps": 0.1}), (F.logsigmoid, {}),
    (F.threshold, {"threshold": 0.5, "value": -2.0}),
]


@pytest.mark.parametrize("fn,kw", ACTIVATIONS, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activation_forward_backward(fn, kw, dtype):
    low, high = (0.05, 0.95) if fn is torch.logit else (-4, 4)
    x = make((7, 19), dtype, low, high)
    check(lambda t: fn(t, **kw), x)
    if dtype in (torch.float32, torch.float64):
        xc = x.clone().requires_grad_()
        xd = x.to("loom").requires_grad_()
        g = make((7, 19), dtype, seed=1)
        fn(xc, **kw).backward(g)
        fn(xd, **kw).backward(g.to("loom"))
        _close(xd.grad, xc.grad, False)


BACKWARD_KERNELS = [
    "threshold_backward", "sigmoid_backward", "tanh_backward", "gelu_backward", "silu_backward",
    "hardswish_backward", "leaky_relu_backward", "elu_backward", "softplus_backward",
    "mish_backward", "hardtanh_backward", "hardsigmoid_backward", "logit_backward",
]


@pytest.mark.parametrize("name", BACKWARD_KERNELS)
def test_activation_backward_is_one_loom_kernel(name):
    # Autograd's backward of each activation is one fused loom kernel, not
    # a decomposition into several passes (mish_backward has one).
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1")


def test_gelu_tail_keeps_its_digits():
    # x/2 erfc(-x/sqrt 2) down to x = -12 (1e-33), where x/2 (1 + erf(x/sqrt 2))
    # cancels to nothing; and the gradient there, against double precision.
    x = torch.linspace(-12, -3, 9001)
    xd = x.double()
    cdf = 0.5 * torch.special.erfc(-xd / math.sqrt(2))
    pdf = torch.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
    y = F.gelu(x.to("loom")).cpu().double()
    dx = torch.ops.aten.gelu_backward(torch.ones_like(x).to("loom"), x.to("loom")).cpu().double()
    torch.testing.assert_close(y, xd * cdf, rtol=1e-6, atol=0)
    torch.testing.assert_close(dx, cdf + xd * pdf, rtol=1e-6, atol=0)


BINARY = ["add", "sub", "mul", "div", "remainder", "fmod", "pow", "atan2", "maximum",
          "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
          "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
          "bitwise_left_shift", "bitwise_right_shift", "copysign", "hypot", "xlogy",
          "floor_divide", "logaddexp", "logaddexp2"]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_binary(name, dtype):
    fn = getattr(torch, name)
    a = make((4, 1, 6), dtype)
    b = make((3, 6), dtype, seed=2)
    if name in ("div", "remainder", "fmod", "floor_divide") and not dtype.is_floating_point:
        b = b.abs() + 1 if dtype != torch.bool else torch.ones_like(b)
        b = b.to(dtype)
    if name.startswith("bitwise_") and "shift" in name and dtype != torch.bool:
        b = (b.abs() % 7).to(dtype)
    if name == "pow" and not dtype.is_floating_point and dtype != torch.bool:
        b = (b.abs() % 4).to(dtype)
    check(fn, a, b)                     # broadcast
    check(fn, a.transpose(0, 2), b.t().unsqueeze(1))  # non-contiguous
    check(fn, a, 2)                     # python scalar operand
    if name in ("add", "sub", "mul", "div", "maximum", "eq", "lt", "bitwise_and"):
        c = make((3, 6), dtype, seed=3)
        check(lambda x, y: getattr(x.clone(), name + "_")(y), c, b)
        check(lambda x, y: fn(x, y, out=torch.empty(0, dtype=x.dtype, device=x.device)), c, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16], ids=str)
def test_scalar_forms(dtype):
    x = make((9, 8), dtype)
    check(lambda t: torch.add(t, 3, alpha=2), x)
    check(lambda t: torch.sub(t, t.flip(0), alpha=3), x)
    check(lambda t: t * 2.5, x)
    check(lambda t: 2 - t, x)
    check(lambda t: t ** 2, x)
    check(lambda t: 2 ** t, x.abs() % 5)
    check(lambda t: torch.div(t, 3, rounding_mode="floor"), x)
    check(lambda t: torch.div(t, -3, rounding_mode="trunc"), x)
    check(lambda t: torch.remainder(t, -3), x)
    check(lambda t: t > 0.5, x)
    check(lambda t: torch.clamp(t, -1, 2), x)
    check(lambda t: torch.clamp(t, min=0.5), x)
    check(lambda t: torch.clip(t, max=1), x)
    check(lambda t: t.clamp_(-1, 1), x.clone())


def test_ternary_and_where():
    for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.int32]:
        a, b, c = make((3, 5), dtype), make((5,), dtype, seed=1), make((3, 1), dtype, seed=2)
        cond = make((3, 5), torch.bool, seed=4)
        check(torch.where, cond, a, b)
        check(lambda m, x: torch.where(m, x, 0), cond, a)
        check(torch.addcmul, a, b, c, value=2)
        if dtype.is_floating_point:
            check(torch.addcdiv, a, b, c.abs() + 1, value=0.5)
            check(torch.lerp, a, b, 0.3)
            check(torch.lerp, a, b, make((3, 5), dtype, 0, 1, seed=5))
        check(torch.clamp, a, b, b + 1)
        check(lambda x, y: torch.clamp(x, min=y), a, b)
        check(lambda x, y: x.masked_fill(y, -1), a, cond)
    check(lambda t: torch.where(t > 0, t, torch.tensor(0.0)), make((4,), torch.float32))


def test_type_promotion():
    i, f, h = make((6,), torch.int32), make((6,), torch.float32), make((6,), torch.float16)
    check(torch.add, i, f)
    check(torch.mul, h, f)
    check(torch.add, i, 1.5)
    check(torch.div, i, i.abs() + 1)
    check(torch.sqrt, i.abs())
    check(torch.eq, i, f)
    check(lambda x: x + torch.tensor(2.0, dtype=torch.float64), h)


def test_integer_division_by_zero():
    a = torch.tensor([1, 2, 3]).to("loom")
    b = torch.tensor([1, 0, 1]).to("loom")
    for fn in [lambda: torch.div(a, b, rounding_mode="floor"), lambda: torch.remainder(a, b),
               lambda: torch.fmod(a, b), lambda: torch.div(a, b, rounding_mode="trunc")]:
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn()
    # the device stays usable afterwards
    assert (a + a).cpu().tolist() == [2, 4, 6]
    # float division by zero is not an error
    assert torch.isinf((a.float() / b.float()).cpu()).any()


def test_bad_input():
    x = torch.randn(3, 4)
    check(torch.add, x, torch.randn(5, 4))                       # not broadcastable
    check(lambda a: a.add_(torch.randn(2, 3, 4)), x)             # in-place broadcast
    check(lambda a: a.add_(1.5), torch.ones(3, dtype=torch.int64))   # unsafe in-place cast
    check(lambda a: torch.add(a, a, out=torch.empty(3, 4, dtype=torch.int64, device=a.device)), x)
    check(torch.bitwise_and, x, x)                               # float bitwise
    check(lambda a: a - a, torch.ones(3, dtype=torch.bool))      # bool subtraction
    check(lambda a: -a, torch.ones(3, dtype=torch.bool))
    check(lambda a: torch.where(a, a, a), x)                     # non-bool condition
    check(lambda a: torch.clamp(a), x)
    check(lambda a: torch.div(a, a, rounding_mode="bad"), x)


def test_empty_and_zero_dim():
    check(torch.exp, torch.empty(0, 3))
    check(torch.add, torch.empty(0, 3), torch.empty(3))
    check(torch.mul, torch.tensor(2.0), torch.tensor(3.0))
    check(torch.sin, torch.tensor(0.5, dtype=torch.float64))


def test_large_contiguous_add_is_exact():
    a, b = make((1 << 20,), torch.float32), make((1 << 20,), torch.float32, seed=1)
    check(torch.add, a, b, exact=True)
    check(torch.mul, a.half(), b.half(), exact=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_arithmetic_fast_path_matches_cpu(dtype):
    # add/sub/mul/div on same-shape contiguous operands (and Python numbers)
    # skip TensorIterator; results, dtypes and in-place forms match the CPU
    a, b = make((3, 5), dtype), make((3, 5), dtype, seed=1).abs() + 0.5
    for fn in [torch.add, torch.sub, torch.mul, torch.div,
               lambda x, y: torch.add(x, y, alpha=-2), lambda x, y: torch.sub(x, y, alpha=3),
               lambda x, y: x + 2, lambda x, y: 3 - x, lambda x, y: x * True,
               lambda x, y: x / 7.5, lambda x, y: x.add_(y), lambda x, y: x.sub_(y, alpha=0.5),
               lambda x, y: x.mul_(y), lambda x, y: x.div_(y), lambda x, y: x.mul_(x),
               lambda x, y: x.add_(-1.25), lambda x, y: x.div_(2)]:
        check(lambda x, y: fn(x.clone(), y), a, b)


def test_arithmetic_fast_path_falls_back_where_it_must():
    f = make((4, 6), torch.float32)
    # broadcasting, non-contiguous, mixed dtypes, integers, complex alpha
    check(torch.add, f, make((6,), torch.float32))
    check(torch.mul, f.t(), make((6, 4), torch.float32))
    check(torch.sub, f, make((4, 6), torch.float64))
    check(torch.div, make((4, 6), torch.int64), 3)
    check(lambda x: x + 1.5, make((4,), torch.int64))
    check(lambda x: torch.add(x, x, alpha=2j), f)
    check(lambda x: torch.add(x, x, alpha=True), f)
    check(lambda x: x.add_(x.double()), f.clone())
    # an in-place op whose operand overlaps self shifted is refused as on CPU
    check(lambda x: x[1:].add_(x[:-1]), make((5,), torch.float32))
    # the same elements are fine
    check(lambda x: x.add_(x.view(-1).view(4, 6)), f.clone())


def test_arithmetic_fast_path_autograd_and_copy_on_write():
    a = make((8,), torch.float32).to("loom").requires_grad_()
    b = make((8,), torch.float32, seed=2).to("loom").requires_grad_()
    ((a * b + a) / (b.abs() + 1) - 2).sum().backward()
    ac = a.detach().cpu().requires_grad_()
    bc = b.detach().cpu().requires_grad_()
    ((ac * bc + ac) / (bc.abs() + 1) - 2).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ac.grad)
    torch.testing.assert_close(b.grad.cpu(), bc.grad)
    # in place on a lazy clone writes a copy, leaving the original alone
    w = torch.arange(6.0, device="loom")
    v = torch._lazy_clone(w)
    v.mul_(w)
    assert w.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert v.cpu().tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]


def test_bool_clamp_with_one_tensor_bound():
    # A one-sided tensor bound is a maximum / minimum, which the CPU allows
    # for bool; both bounds or a scalar bound it refuses, and so does loom.
    x = torch.tensor([True, False, True, False])
    b = torch.tensor([False, True, False, False])
    for fn in (lambda t, u: torch.clamp_min(t, u), lambda t, u: torch.clamp_max(t, u),
               lambda t, u: torch.clamp(t, min=u), lambda t, u: torch.clamp(t, max=u)):
        assert fn(x.to("loom"), b.to("loom")).cpu().tolist() == fn(x, b).tolist()
    with pytest.raises(NotImplementedError):
        torch.clamp(x.to("loom"), b.to("loom"), b.to("loom"))
    with pytest.raises(NotImplementedError):
        torch.clamp_min(x.to("loom"), True)


def test_large_outputs_stream_past_the_cache():
    # Outputs of 32 MiB and more are written with non-temporal stores
    # (from a staging block, unaligned head and tail included), unless they
    # are also an input: same bits either way.
    n = 8 * 1024 * 1024 + 37
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    lx, ly = x.to("loom"), y.to("loom")
    assert torch.equal((lx + ly).cpu(), x + y)
    assert torch.equal(torch.mul(lx, ly).cpu(), x * y)
    out = torch.empty(n + 1, device="loom")
    torch.add(lx, ly, alpha=2.0, out=out[1:])  # 4 bytes past a line boundary
    assert torch.equal(out[1:].cpu(), torch.add(x, y, alpha=2.0))
    lx.mul_(ly)
    assert torch.equal(lx.cpu(), x * y)
