"""Complex pow with a tensor exponent on loom: the CPU's bits (std::pow of
std::complex, C99's cpow) for complex64/complex128, special values, a real
base promoted against a complex exponent, out= and in-place forms, nothing
on the CPU fallback; a number exponent (the CPU's special cases) stays on
the counted fallback."""
import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

DTYPES = (torch.complex64, torch.complex128)


def operands(dtype, n=600):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(n, dtype=dtype, generator=g) * 3
    y = torch.randn(n, dtype=dtype, generator=g) * 2
    inf, nan = float("inf"), float("nan")
    specials = [(0, 0), (0, 1 + 1j), (0, -1), (complex(inf, 0), 2), (complex(nan, 1), 1),
                (-1, 0.5), (-2, 3), (complex(0, inf), 1j), (1, complex(nan, 0)), (1e30, 2)]
    for i, (a, b) in enumerate(specials):
        x[i], y[i] = a, b
    return x, y


def assert_same(got, expected):
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_exponent_bits_as_on_cpu(dtype, no_fallback):
    x, y = operands(dtype)
    assert_same(torch.pow(x.to("loom"), y.to("loom")), torch.pow(x, y))
    # broadcast, strided and a 0-d CPU tensor exponent
    xm, ym = x.view(20, 30), y[:30]
    assert_same(torch.pow(xm.to("loom").t(), ym[:20].to("loom")), torch.pow(xm.t(), ym[:20]))
    e = torch.tensor(1.5 - 0.25j, dtype=dtype)
    assert_same(torch.pow(x.to("loom"), e), torch.pow(x, e))
    # a real base against a complex exponent promotes, as on the CPU
    assert_same(torch.pow(x.real.to("loom"), y.to("loom")), torch.pow(x.real, y))


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_and_inplace(dtype, no_fallback):
    x, y = operands(dtype, 50)
    out = torch.empty(0, dtype=dtype, device="loom")
    torch.pow(x.to("loom"), y.to("loom"), out=out)
    assert_same(out, torch.pow(x, y))
    lx = x.to("loom")
    lx.pow_(y.to("loom"))
    assert_same(lx, torch.pow(x, y))


def test_gradient_against_cpu():
    x, y = operands(torch.complex128, 40)
    x, y = x[10:] + 0.5, y[10:]  # away from the specials
    grads = []
    for dev in ("cpu", "loom"):
        a = x.to(dev).detach().clone().requires_grad_()
        b = y.to(dev).detach().clone().requires_grad_()
        r = torch.pow(a, b)
        grads.append([t.cpu() for t in torch.autograd.grad(r.abs().sum(), (a, b))])
    for got, expected in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_number_exponent_native(no_fallback):
    # the CPU's special cases (2: x x) and cpow for other numbers
    x, _ = operands(torch.complex64, 20)
    assert_same(torch.pow(x.to("loom"), 2), torch.pow(x, 2))
    assert_same(torch.pow(x.to("loom"), 1.5 - 1j), torch.pow(x, 1.5 - 1j))
