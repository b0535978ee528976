"""Elementwise ops with a number operand on loom, bit for bit against the
CPU. add / sub / mul / div's Scalar overloads (which C++ code such as the
optimizers' foreach loops calls per tensor): every floating dtype,
functional and in place, alpha, special values, sizes over several chunks,
chains of queued in-place ops, and the cases that must leave the fast path
(integer tensors, strided views, a bool subtrahend, an alpha that overflows).
float16 / bfloat16 with Python numbers: the CPU casts the number (and
add/sub's alpha, pow's exponent) to the tensor's dtype before computing in
float, except the factor of mul and the divisor of div, read as float.
Nothing may fall back to the CPU."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SCALARS = [0.1, 3, True, -2.5e-8, 2**40 + 1, 1e30, float("nan"), -0.0, 1 / 3]
OPS = ["add", "sub", "mul", "div"]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3).to(dtype)


def same(actual, expected):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)


def run_both(fn, x):
    """fn on a CPU tensor and on its loom copy: the same result, or the same
    exception type."""
    try:
        expected = fn(x.clone())
    except Exception as e:
        with pytest.raises(type(e)):
            fn(x.to("loom"))
            torch.loom.synchronize()
        return
    same(fn(x.to("loom")), expected)


def overload(op, inplace):
    return getattr(getattr(torch.ops.aten, op + ("_" if inplace else "")), "Scalar")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("inplace", [False, True], ids=["functional", "inplace"])
def test_scalar_overloads_match_the_cpu_bitwise(dtype, op, inplace):
    f = overload(op, inplace)
    for shape in [(1,), (3, 5), (70001,)]:
        x = make(shape, dtype)
        for s in SCALARS:
            if op == "sub" and s is True:
                continue  # refused, below
            run_both(lambda t: f(t, s), x)
            if op in ("add", "sub"):
                # alphas whose products are exact: the CPU's vector loop
                # fuses alpha * other into an FMA, its scalar tail does not
                for alpha in (0.5, -4, 2**20):
                    run_both(lambda t: f(t, s, alpha=alpha), x)


def test_scalar_overloads_leave_the_fast_path_where_they_must():
    f32 = make((4, 6), torch.float32)
    i64 = torch.arange(-5, 19, dtype=torch.int64).reshape(4, 6)
    # integer tensors promote (or refuse in place) as on the CPU
    for op in OPS:
        for inplace in (False, True):
            f = overload(op, inplace)
            run_both(lambda t: f(t, 0.5), i64)
            run_both(lambda t: f(t, 3), i64)
            run_both(lambda t: f(t, True), i64)
    # strided views, and in place on a view of a larger tensor
    run_both(lambda t: torch.ops.aten.mul.Scalar(t.t(), 0.25), f32)
    run_both(lambda t: torch.ops.aten.add_.Scalar(t[:, 1:], 1.5, alpha=2), f32)
    run_both(lambda t: torch.ops.aten.div_.Scalar(t[1:3], 7), f32)
    # sub with a bool operand and a bool alpha raise as on the CPU
    run_both(lambda t: torch.ops.aten.sub.Scalar(t, True), f32)
    run_both(lambda t: torch.ops.aten.sub_.Scalar(t, False), f32)
    run_both(lambda t: torch.ops.aten.add.Scalar(t, 2.0, alpha=True), f32)
    # an alpha that overflows the compute dtype raises as on the CPU, on every path
    for dtype, alpha in [(torch.float16, 1e5), (torch.bfloat16, 1e39), (torch.float32, 1e39),
                         (torch.int8, 300), (torch.float16, 2**20)]:
        x = f32.to(dtype)
        run_both(lambda t: torch.ops.aten.add.Scalar(t, 1.0, alpha=alpha), x)
        run_both(lambda t: torch.ops.aten.sub_.Scalar(t, 2, alpha=alpha), x)
        run_both(lambda t: torch.add(t, t, alpha=alpha), x)
        run_both(lambda t: t.sub_(t.flip(0), alpha=alpha), x)
        run_both(lambda t: torch.add(t, 2.5, alpha=alpha), x)
    # a float16 operand with a float32 one computes in float32, where 2**20 fits
    run_both(lambda t: torch.add(t.half(), t, alpha=2**20), f32)
    # empty tensors
    run_both(lambda t: torch.ops.aten.mul_.Scalar(t, 2.0), torch.empty(0, 3))


def test_in_place_scalar_chains_see_each_value():
    # Queued in-place ops with different numbers on the same tensor: each
    # launch carries its own number, fused or not.
    x = make((1 << 18,), torch.float32)

    def chain(t):
        for k in range(12):
            torch.ops.aten.mul_.Scalar(t, 1.0 + k / 7)
            torch.ops.aten.add_.Scalar(t, -k / 3, alpha=0.5)
            torch.ops.aten.div_.Scalar(t, 1.5 + k)
            torch.ops.aten.sub_.Scalar(t, k)
        return t

    run_both(chain, x)
    run_both(chain, x.half())


def test_foreach_scalar_ops_and_an_sgd_step_match_the_cpu():
    shapes = [(7,), (3, 5), (1,), (129, 33)]
    cpu = [make(s, torch.float32, seed=i) for i, s in enumerate(shapes)]
    dev = [t.to("loom") for t in cpu]
    for ts in (cpu, dev):
        torch._foreach_mul_(ts, 0.9)
        torch._foreach_add_(ts, 0.125)
        torch._foreach_sub_(ts, 3)
        torch._foreach_div_(ts, 1.75)
    for a, e in zip(dev, cpu):
        same(a, e)

    def step(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                                    torch.nn.Linear(5, 3)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                              weight_decay=0.01, foreach=True)
        x = make((4, 6), torch.float32, seed=9).to(device)
        for _ in range(3):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for a, e in zip(step("loom"), step("cpu")):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)


def reduced_values(dtype):
    """Random values and the neighbours of the numbers used below, in dtype."""
    near = torch.tensor([0.1, 0.3, 1 / 3, 2.5, -0.1, -0.3, 0.0, -0.0, 7.0], dtype=torch.float64)
    near = near.to(dtype)
    steps = torch.cat([torch.nextafter(near, near + 1), torch.nextafter(near, near - 1)])
    return torch.cat([near, steps.to(dtype), make((4093,), dtype)])


NUMBER_OPS = {
    "eq": lambda t, s: t == s, "ne": lambda t, s: t != s, "lt": lambda t, s: t < s,
    "le": lambda t, s: t <= s, "gt": lambda t, s: t > s, "ge": lambda t, s: t >= s,
    "add": lambda t, s: t + s, "sub": lambda t, s: t - s, "rsub": lambda t, s: s - t,
    "add.Scalar": lambda t, s: torch.ops.aten.add.Scalar(t, s, alpha=2),
    "sub_.Scalar": lambda t, s: torch.ops.aten.sub_.Scalar(t, s),
    "mul": lambda t, s: t * s, "mul_.Scalar": lambda t, s: torch.ops.aten.mul_.Scalar(t, s),
    "div": lambda t, s: t / s, "div.Scalar": lambda t, s: torch.ops.aten.div.Scalar(t, s),
    "floor_divide": lambda t, s: t // s, "trunc": lambda t, s: torch.div(t, s, rounding_mode="trunc"),
    "remainder": lambda t, s: t % s, "fmod": lambda t, s: torch.fmod(t, s),
    "pow": lambda t, s: t.abs() ** s, "rpow": lambda t, s: abs(s) ** t,
    "maximum_0d": lambda t, s: torch.maximum(t, torch.tensor(s)),
    "add_0d": lambda t, s: t + torch.tensor(s, dtype=torch.float64),
    "sub_alpha": lambda t, s: torch.sub(t, s, alpha=2),
    "atan2_0d": lambda t, s: torch.atan2(t, torch.tensor(s)),
    "hypot_0d": lambda t, s: torch.hypot(t, torch.tensor(s)),
    "pow_0d": lambda t, s: torch.pow(t.abs(), torch.tensor(s)),
    "xlogy_number_first": lambda t, s: torch.xlogy(s, t.abs()),
    "xlog1py": lambda t, s: torch.special.xlog1py(t, s),
    # a 0-d CPU tensor as the first operand is cast even for mul and div
    "mul_0d_first": lambda t, s: torch.mul(torch.tensor(s), t),
    "div_0d_first": lambda t, s: torch.div(torch.tensor(s), t),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(NUMBER_OPS))
def test_reduced_float_ops_take_numbers_as_the_cpu_does(dtype, name):
    x = reduced_values(dtype)
    for s in [0.1, 0.3, 1 / 3, 2.5, -0.3, 3, 70000.5]:
        run_both(lambda t: NUMBER_OPS[name](t, s), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_cube_and_inverse_square_round_as_the_cpu(dtype):
    # bfloat16 x ** 3 is x * x * x with each product rounded to bfloat16 on
    # the CPU (x ** -2: 1 / (x * x), rounded twice), also in place (pow_ is
    # the Tensor_Scalar kernel's), into out=, on strided views and for
    # exponents that round to 3 or -2
    x = reduced_values(dtype)
    exponents = (3, -2, 2) + ((3.001, -2.0001) if dtype != torch.float32 else ())
    for e in exponents:
        run_both(lambda t: t ** e, x)
        run_both(lambda t: t.pow_(e), x)
        run_both(lambda t: t[::2].pow(e), x)
        run_both(lambda t: torch.pow(t, e, out=torch.empty_like(t)), x)
    if dtype == torch.bfloat16:
        run_both(lambda t: torch.pow(t, 3, out=torch.empty(t.shape, dtype=torch.float32,
                                                           device=t.device)), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reduced_float_alpha_is_cast_to_the_dtype(dtype):
    # y in powers of two: alpha * y is exact, so a fused multiply-add and two
    # roundings agree and only alpha's cast decides
    x = reduced_values(dtype)
    g = torch.Generator().manual_seed(3)
    y = (2.0 ** torch.randint(-3, 4, x.shape, generator=g)).to(dtype)
    y[::2] *= -1
    for alpha in (0.3, 0.1, -1 / 3, 3):
        run_both(lambda t: torch.add(t, y.to(t.device), alpha=alpha), x)
        run_both(lambda t: torch.sub(t, y.to(t.device), alpha=alpha), x)
        run_both(lambda t: t.add_(y.to(t.device), alpha=alpha), x)
        run_both(lambda t: torch.add(t[::3], y[::3].to(t.device), alpha=alpha), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_shrink_lambda_is_cast_as_the_cpu_casts_it(dtype):
    # hardshrink and the shrinks' backward compare with lambda in the dtype,
    # softshrink with lambda in float: values next to 0.3 tell them apart
    x = reduced_values(dtype)
    for lambd in (0.3, 0.1, 1 / 3):
        run_both(lambda t: torch.nn.functional.hardshrink(t, lambd), x)
        run_both(lambda t: torch.nn.functional.softshrink(t, lambd), x)
        run_both(lambda t: torch.ops.aten.hardshrink_backward(t, t, lambd), x)
        run_both(lambda t: torch.ops.aten.softshrink_backward(t, t, lambd), x)


OUT_OPS = {
    "add": lambda a, b, o: torch.add(a, b, out=o),
    "mul_number": lambda a, b, o: torch.mul(a, 0.3, out=o),
    "pow_number": lambda a, b, o: torch.pow(a.abs(), 0.3, out=o),
    "exp": lambda a, b, o: torch.exp(a, out=o),
    "addcmul": lambda a, b, o: torch.addcmul(a, a, b, value=0.5, out=o),
    "atan2": lambda a, b, o: torch.atan2(a, b, out=o),
    "clamp_tensor": lambda a, b, o: torch.clamp(a, min=b, out=o),
    "tanh_backward": lambda a, b, o: torch.ops.aten.tanh_backward.grad_input(a, b, grad_input=o),
    "strided_out": lambda a, b, o: torch.add(a.view(-1, 2), b.view(-1, 2), out=o.view(2, -1).t()),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(OUT_OPS))
def test_reduced_float_result_is_rounded_before_a_wider_out(dtype, out_dtype, name):
    # the CPU computes in the common dtype and casts its rounded result to
    # out=; the float the kernel computes must not reach out= unrounded
    a = reduced_values(dtype)
    b = reduced_values(dtype).flip(0)
    cpu_out = torch.zeros(a.shape, dtype=out_dtype)
    OUT_OPS[name](a, b, cpu_out)
    loom_out = torch.zeros(a.shape, dtype=out_dtype, device="loom")
    OUT_OPS[name](a.to("loom"), b.to("loom"), loom_out)
    same(loom_out, cpu_out)
