"""Indexing and factories of complex tensors against the CPU, bit for bit.

The index kernels' element-by-element paths (0-d tensors, scatters with a
reduction or a value, index_add with alpha, put with accumulate, index_fill)
and the factories' element stores carried one real number per element, so
complex results lost their imaginary parts or came out as stray bits; the
conformance sweep's complex64 column found them."""
import pytest
import torch

DTYPES = [torch.complex64, torch.complex128]


def _rand(*shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def _same(loom_result, cpu_result):
    torch.testing.assert_close(loom_result.cpu(), cpu_result, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_dim_select_and_gather(dtype, no_fallback):
    x = torch.tensor(1.5 - 2.25j, dtype=dtype)
    _same(torch.index_select(x.to("loom"), 0, torch.tensor([0], device="loom")),
          torch.index_select(x, 0, torch.tensor([0])))
    _same(torch.gather(x.to("loom"), 0, torch.tensor(0, device="loom")),
          torch.gather(x, 0, torch.tensor(0)))
    _same(x.to("loom").take(torch.tensor([0, 0], device="loom")), x.take(torch.tensor([0, 0])))


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_add_with_complex_alpha(dtype, no_fallback):
    a, s = _rand(4, 3, dtype=dtype), _rand(3, 3, dtype=dtype, seed=1)
    i = torch.tensor([0, 2, 0])
    got = a.to("loom").index_add(0, i.to("loom"), s.to("loom"), alpha=2 - 1j)
    _same(got, a.index_add(0, i, s, alpha=2 - 1j))
    s = _rand(4, 3, dtype=dtype, seed=3)
    got = a.to("loom").index_add(1, torch.tensor([2, 2, 1], device="loom"), s.to("loom"))
    _same(got, a.index_add(1, torch.tensor([2, 2, 1]), s))


def test_index_add_refuses_a_source_of_another_shape():
    a, s = torch.zeros(4, 3, device="loom"), torch.ones(3, 3, device="loom")
    with pytest.raises(RuntimeError, match="source tensor shape must match"):
        a.index_add(1, torch.tensor([2, 2, 1], device="loom"), s)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod"])
def test_scatter_reduce(dtype, reduce, no_fallback):
    a, src = _rand(4, 3, dtype=dtype), _rand(2, 3, dtype=dtype, seed=2)
    idx = torch.tensor([[0, 1, 2], [2, 1, 0]])
    for include_self in (True, False):
        got = a.to("loom").scatter_reduce(0, idx.to("loom"), src.to("loom"), reduce,
                                          include_self=include_self)
        want = a.scatter_reduce(0, idx, src, reduce, include_self=include_self)
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_and_fill_with_a_complex_value(dtype, no_fallback):
    a = _rand(4, 3, dtype=dtype)
    idx = torch.tensor([[0, 1, 2], [2, 1, 0]])
    _same(a.to("loom").scatter(0, idx.to("loom"), 1 + 2j), a.scatter(0, idx, 1 + 2j))
    _same(a.to("loom").scatter_add(0, idx.to("loom"), _rand(2, 3, dtype=dtype).to("loom")),
          a.scatter_add(0, idx, _rand(2, 3, dtype=dtype)))
    _same(a.to("loom").index_fill(1, torch.tensor([1], device="loom"), 2 - 3j),
          a.index_fill(1, torch.tensor([1]), 2 - 3j))


@pytest.mark.parametrize("dtype", DTYPES)
def test_put_accumulate(dtype, no_fallback):
    a = _rand(3, 3, dtype=dtype)
    i, v = torch.tensor([1, 5, 1]), torch.tensor([1 + 1j, 2 - 2j, -0.5j], dtype=dtype)
    _same(a.to("loom").put(i.to("loom"), v.to("loom"), accumulate=True), a.put(i, v, accumulate=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_order_for_complex_scatter_amax(dtype):
    a, src = _rand(4, 3, dtype=dtype), _rand(2, 3, dtype=dtype)
    idx = torch.tensor([[0, 1, 2], [2, 1, 0]], device="loom")
    with pytest.raises(NotImplementedError, match="amax"):
        a.to("loom").scatter_reduce(0, idx, src.to("loom"), "amax")
    with pytest.raises(NotImplementedError, match="index_reduce"):
        a.to("loom").index_reduce(0, torch.tensor([0, 1], device="loom"), src.to("loom"), "prod")


@pytest.mark.parametrize("dtype", DTYPES)
def test_eye_and_matrix_power_zero(dtype, no_fallback):
    _same(torch.eye(3, 4, dtype=dtype, device="loom"), torch.eye(3, 4, dtype=dtype))
    a = _rand(2, 3, 3, dtype=dtype)
    _same(torch.linalg.matrix_power(a.to("loom"), 0), torch.linalg.matrix_power(a, 0))


def test_complex_ranges_are_the_cpus_counted():
    torch.loom.clear_fallback_ops()
    _same(torch.linspace(1 + 2j, 3 - 1j, 5, device="loom"), torch.linspace(1 + 2j, 3 - 1j, 5))
    _same(torch.logspace(1 + 2j, 3 - 1j, 4, device="loom", dtype=torch.complex64),
          torch.logspace(1 + 2j, 3 - 1j, 4, dtype=torch.complex64))
    assert {"aten::linspace.out", "aten::logspace.out"} <= set(torch.loom.fallback_ops())
