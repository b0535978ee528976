"""backend="loom": a kernel that would compute one ATen call alone, from
tensors in memory, runs that call where the library's kernel is the
stronger one (fuse.Fuser.library_singles), with eager's bits: a reduction
of at least 16384 elements into fewer than 16 outputs (the library splits
it across the workers), a pointwise op writing 32 MB or more (the library
streams it past the cache). Fused chains and small ops stay generated.
An effectful op threaded through an effect token (a linalg error check)
is called directly, and still raises."""

import pytest
import torch

from torch_loom import compiler
from torch_loom.compiler import fuse, jit

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


def _compiled_call(fn, *args):
    """(result, counters of this call alone) of fn compiled with loom,
    after a first call that compiles it."""
    compiler.reset_counters()
    compiled = torch.compile(fn, backend="loom")
    compiled(*args)
    torch.loom.synchronize()
    assert compiler.counters()["graphs_fallen_back"] == 0
    compiler.reset_counters()
    out = compiled(*args)
    torch.loom.synchronize()
    return out, compiler.counters()


def _newest_program():
    from torch_loom.compiler import observe

    return max(observe._programs, key=lambda p: p.serial)


def _full_sum(x):
    return x.sum()


def _full_mean(x):
    return x.mean()


def _few_row_sums(x):
    return x.sum(1)


def _amax(x):
    return x.amax()


@pytest.mark.parametrize("fn", [_full_sum, _full_mean, _few_row_sums, _amax])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reductions_into_few_outputs_are_the_librarys_with_eagers_bits(fn, dtype):
    torch.manual_seed(0)
    # 8 rows of 2^17 + 3 elements: a full reduction the generated kernel
    # would give one worker; its double lanes round float32 blocks
    # differently from the library's float partials
    x = (torch.randn(8, (1 << 17) + 3, dtype=dtype) * 3 + 1).to("loom")
    out, c = _compiled_call(fn, x)
    assert c["kernel_launches"] == 0 and c["library_calls"] == 1
    assert _newest_program().library_singles == 1
    want = fn(x)
    assert out.dtype == want.dtype and out.shape == want.shape
    assert torch.equal(out.cpu(), want.cpu())


def test_a_reduction_with_a_prologue_or_many_outputs_stays_generated():
    torch.manual_seed(1)
    x = torch.randn(8, 1 << 13, device="loom")
    out, c = _compiled_call(lambda t: (t * 2).sum(), x)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    torch.testing.assert_close(out.cpu(), (x * 2).sum().cpu(), rtol=1e-5, atol=1e-4)
    y = torch.randn(64, 1024, device="loom")
    out, c = _compiled_call(lambda t: t.sum(1), y)  # 64 outputs: parallel as generated
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    torch.testing.assert_close(out.cpu(), y.sum(1).cpu(), rtol=1e-5, atol=1e-4)
    small = torch.randn(100, device="loom")
    out, c = _compiled_call(lambda t: t.sum(), small)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    torch.testing.assert_close(out.cpu(), small.sum().cpu())


def _add(x, y):
    return x + y


def _chain(x, y):
    return (x + y) * 2


def test_a_large_lone_pointwise_op_is_the_librarys_with_eagers_bits():
    n = fuse.STREAM_BYTES // 4  # float32: an output of STREAM_BYTES
    torch.manual_seed(2)
    x, y = torch.randn(n, device="loom"), torch.randn(n, device="loom")
    out, c = _compiled_call(_add, x, y)
    assert c["kernel_launches"] == 0 and c["library_calls"] == 1
    assert _newest_program().library_names == ["aten.add.Tensor"]
    assert torch.equal(out.cpu(), (x + y).cpu())
    # a chain of two ops fuses: one generated kernel, eager's bits
    out, c = _compiled_call(_chain, x, y)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    assert torch.equal(out.cpu(), _chain(x, y).cpu())


def test_a_smaller_lone_pointwise_op_stays_generated():
    torch.manual_seed(3)
    n = fuse.STREAM_BYTES // 8
    x, y = torch.randn(n, device="loom"), torch.randn(n, device="loom")
    out, c = _compiled_call(_add, x, y)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    assert torch.equal(out.cpu(), (x + y).cpu())


def _spd(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, n, generator=g, dtype=torch.float64)
    return (x @ x.mT / n + torch.eye(n, dtype=torch.float64)).float()


def test_linalg_error_checks_run_directly_and_still_raise():
    a = _spd(16, 24, 4).to("loom")
    rhs = torch.randn(16, 24, 1).to("loom")
    out, c = _compiled_call(lambda m: torch.linalg.cholesky(m), a)
    assert torch.equal(out.cpu(), torch.linalg.cholesky(a).cpu())
    # the check is called, not the effect HOP (its own call costs ~25 us)
    called = list(_newest_program()._globals.values())
    assert torch.ops.aten._linalg_check_errors.default in called
    assert not any(g is torch.ops.higher_order.with_effects for g in called)
    out, c = _compiled_call(lambda m, r: torch.linalg.solve(m, r), a, rhs)
    assert torch.equal(out.cpu(), torch.linalg.solve(a, rhs).cpu())
    bad = a.clone()
    bad[5] = -bad[5]  # not positive-definite: the check must raise
    chol = torch.compile(lambda m: torch.linalg.cholesky(m), backend="loom")
    with pytest.raises(torch.linalg.LinAlgError, match="cholesky"):
        chol(bad)
        torch.loom.synchronize()


def _sum_of_a_view_a_product_reads(t, w):
    v = t.t()  # a view a library op reads too: it is made, and the sum takes it
    return v.sum(), v @ w


def test_a_reduction_of_a_view_runs_after_the_view_with_eagers_bits():
    torch.manual_seed(5)
    x = torch.randn(64, 1 << 14, dtype=torch.float64, device="loom")
    w = torch.randn(64, 1, dtype=torch.float64, device="loom")
    out, c = _compiled_call(_sum_of_a_view_a_product_reads, x, w)
    assert c["kernel_launches"] == 0
    assert _newest_program().library_singles == 1
    for got, want in zip(out, _sum_of_a_view_a_product_reads(x, w)):
        assert torch.equal(got.cpu(), want.cpu())
