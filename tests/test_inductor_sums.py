"""torch.compile (Inductor) on loom: the sum and the mean of all the
elements of a large contiguous tensor in memory are calls into the
library's, with eager's bits; sums Inductor computes better itself (a fused pointwise operand, a
small or strided tensor, a dtype change) stay generated kernels, and CPU
graphs are compiled as Inductor compiles them."""

import pytest
import torch

from torch_loom._inductor import library_ops

N = 3 * (library_ops.COLUMN_SUM_MIN_ELEMENTS + 5461)  # odd tails for every vector width


@pytest.fixture(autouse=True)
def _fresh(fresh_compile):
    yield


def _cpp_kernels() -> bool:
    """Whether Inductor generates C++ kernels for loom graphs here: not where
    the driver's memory is not host-addressable (LOOM_DRIVER=guarded), where
    every node of a compiled graph runs as its aten op (and, with that
    global setting, CPU graphs' nodes too)."""
    from torch_loom._inductor.backend import host_addressable

    return host_addressable()


def _compiled(fn, *args):
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn), *args)
    return out, "\n".join(codes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("form", ["all", "dims", "dims_keepdim", "mean_all", "mean_dims"])
def test_whole_sum_of_a_tensor_in_memory_is_the_librarys_with_eagers_bits(dtype, form):
    fn = {"all": lambda t: t.sum(),
          "dims": lambda t: t.sum((0, 1)),
          "dims_keepdim": lambda t: t.sum((1, 0), keepdim=True),
          "mean_all": lambda t: t.mean(),
          "mean_dims": lambda t: t.mean((0, 1), keepdim=True)}[form]
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(N, generator=g) * 3 + 1).to(dtype)
    x = x.view(N // 3, 3) if form not in ("all", "mean_all") else x
    xl = x.to("loom")
    got, code = _compiled(fn, xl)
    op = {"all": "aten.sum.default", "mean_all": "aten.mean.default",
          "mean_dims": "aten.mean.dim"}.get(form, "aten.sum.dim_IntList")
    assert f"torch.ops.{op}(" in code, code
    want = fn(xl)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want.cpu())
    # and what the user sees is the CPU's sum, within the dtype's rounding
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float64: 1e-12}[dtype]
    scale = 1 / N if form.startswith("mean") else 1
    torch.testing.assert_close(got.cpu().double(), fn(x.double()).to(dtype).double(),
                               rtol=tol, atol=tol * N ** 0.5 * scale)


@pytest.mark.parametrize("case", ["fused_operand", "small", "strided", "dtype_change", "integer",
                                  "some_dims", "mean_fused_operand", "mean_strided", "mean_some_dims"])
def test_other_sums_stay_generated(case):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4 * library_ops.COLUMN_SUM_MIN_ELEMENTS + 8, generator=g).view(-1, 4)
    fn, view = {
        "fused_operand": (lambda t: (t * 2).sum(), None),
        "small": (lambda t: t.sum(), lambda t: t[:8]),
        "strided": (lambda t: t.sum(), lambda t: t[:, ::2]),
        "dtype_change": (lambda t: t.sum(dtype=torch.float64), None),
        "integer": (lambda t: t.sum(), lambda t: (t * 8).to(torch.int32)),
        "some_dims": (lambda t: t.sum(1), None),  # a row sum: not the whole tensor
        "mean_fused_operand": (lambda t: (t * 2).mean(), None),
        "mean_strided": (lambda t: t.mean(), lambda t: t[:, ::2]),
        "mean_some_dims": (lambda t: t.mean(0), None),
    }[case]
    view = view or (lambda t: t)
    arg = view(x.to("loom"))
    got, code = _compiled(fn, arg)
    if _cpp_kernels():
        assert "torch.ops.aten.sum" not in code and "torch.ops.aten.mean" not in code, code
    want = fn(view(x))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_cpu_graphs_keep_inductors_reductions(op):
    x = torch.randn(N)
    fn = getattr(torch.Tensor, op)
    got, code = _compiled(fn, x)
    if _cpp_kernels():
        assert f"torch.ops.aten.{op}" not in code
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-3)
