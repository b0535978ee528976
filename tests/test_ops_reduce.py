"""Reductions and cumulative ops on loom against the CPU: any set of dims,
keepdim, dtype arguments, out=, non-contiguous inputs, empty inputs, and
the errors the CPU raises. Nothing may fall back to the CPU."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.3
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 1.5).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g, dtype=dtype)


def same(actual, expected):
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected):
            same(a, e)
        return
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = TOL.get(expected.dtype, dict(rtol=0, atol=0))
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)


def check(fn, x, *args, **kw):
    try:
        expected = fn(x, *args, **kw)
    except Exception as e:
        with pytest.raises(type(e)):
            fn(x.to("loom"), *args, **kw)
        return
    same(fn(x.to("loom"), *args, **kw), expected)


DIMS = [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2), ()]


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_family(dtype, dim, keepdim):
    x = make((4, 5, 6), dtype)
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    check(torch.sum, x, **kw)
    check(torch.nansum, x, **kw)
    check(lambda t, **k: torch.sum(t.transpose(0, 2), **k), x, **kw)
    if dtype.is_floating_point:
        check(torch.mean, x, **kw)
        check(lambda t, **k: torch.linalg.vector_norm(t, 2, **k), x, **kw)
    if dim is not None and dim != () and isinstance(dim, int):
        check(torch.prod, x, dim, keepdim)
        check(torch.cumsum, x, dim)
        check(torch.cumprod, x, dim)


def test_column_max_min_take_nan_and_the_first_of_ties():
    # max / min over dim 0 of float32 rows walk the rows with whole blocks
    # of columns (300 columns: a full block of 256 and a tail)
    g = torch.Generator().manual_seed(9)
    x = torch.randint(-3, 4, (70, 300), generator=g).float()  # many ties
    x[5, 7] = float("nan")
    x[9, 7] = float("nan")
    x[40, 280] = float("nan")
    d = x.to("loom")
    for fn in (lambda t: t.max(0), lambda t: t.min(0)):
        got, want = fn(d), fn(x)
        assert torch.equal(got.values.cpu().nan_to_num(99), want.values.nan_to_num(99))
        assert torch.equal(got.indices.cpu(), want.indices)
    for fn in (lambda t: t.amax(0), lambda t: t.amin(0)):
        assert torch.equal(fn(d).cpu().nan_to_num(99), fn(x).nan_to_num(99))


def test_values_only_max_min_keep_the_first_nan_and_zero():
    # max() and amax() want no index: float32 runs take lanes of running
    # extremes, then the value a scan in order gives: the first NaN (its
    # payload kept) and, among zeros, the first of 0.0 and -0.0 -- the bits
    # of the value max(dim) returns with its index. (The CPU's own bits
    # differ between its paths there.)
    g = torch.Generator().manual_seed(21)
    x = torch.randn(6, 333, generator=g)
    x[1, 100] = float("nan")
    x[1, 200] = -float("nan")
    x[2] = -x[2].abs()
    x[2, 50] = -0.0
    x[2, 60] = 0.0
    x[3] = x[3].abs()
    x[3, 70] = 0.0
    x[3, 90] = -0.0
    x[4, 332] = float("nan")
    d = x.to("loom")
    bits = lambda t: t.cpu().view(torch.int32)
    want_max, want_min = bits(d.max(1).values), bits(d.min(1).values)
    assert torch.equal(want_max[[1, 2]], bits(x[[1, 2], [100, 50]]))
    assert torch.equal(want_min[[1, 3]], bits(x[[1, 3], [100, 70]]))
    torch.testing.assert_close(d.max(1).values.cpu(), x.max(1).values, equal_nan=True)
    for r in range(6):
        assert torch.equal(bits(d[r].max()), want_max[r]), r
        assert torch.equal(bits(d[r].min()), want_min[r]), r
    assert torch.equal(bits(d.amax(1)), want_max)
    assert torch.equal(bits(d.amin(1)), want_min)
    assert torch.equal(bits(d.t().contiguous().amax(0)), want_max)
    assert torch.equal(bits(d.t().contiguous().amin(0)), want_min)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_max_min_arg(dtype):
    x = make((5, 7, 3), dtype)
    for dim in [0, 1, -1]:
        for keepdim in [False, True]:
            check(torch.max, x, dim, keepdim)
            check(torch.min, x, dim, keepdim)
            check(torch.argmax, x, dim, keepdim)
            check(torch.argmin, x, dim, keepdim)
            check(torch.amax, x, (0, dim), keepdim)
            check(torch.amin, x, dim, keepdim)
            check(torch.cummax, x, dim)
            check(torch.cummin, x, dim)
    check(torch.max, x)
    check(torch.min, x)
    check(torch.argmax, x)
    check(torch.argmin, x.t() if x.dim() == 2 else x.transpose(0, 1))
    check(torch.amax, x)
    check(torch.all, x)
    check(torch.any, x, 1)
    check(torch.all, x, (0, 2), True)


def test_max_nan_and_ties():
    x = torch.tensor([[1.0, float("nan"), 3.0, 3.0], [2.0, 2.0, 1.0, float("nan")]])
    for fn in [torch.max, torch.min, torch.argmax, torch.argmin, torch.cummax, torch.cummin]:
        check(fn, x, 1)
    # cummax/cummin move the index on at ties (-0.0 ties 0.0), a NaN wins and stays
    y = torch.tensor([[1.0, 1.0, 2.0, 2.0, 1.0], [3.0, -0.0, 0.0, float("nan"), 1.0]])
    for fn in [torch.cummax, torch.cummin]:
        check(fn, y, 1)
        check(fn, y.t().contiguous(), 0)
    check(torch.amax, x)
    check(torch.argmax, torch.tensor([1, 5, 5, 2]))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_var_std_norm_logsumexp(dtype):
    x = make((6, 5, 4), dtype)
    for dim in [None, 0, (1, 2), -1]:
        for correction in [0, 1, 2]:
            check(torch.var, x, dim, correction=correction)
            check(torch.std, x, dim, correction=correction, keepdim=True)
        check(torch.var_mean, x, dim)
        check(torch.std_mean, x, dim, keepdim=True)
        for p in [0, 1, 2, 3.5, float("inf"), -float("inf"), "fro"]:
            if p == "fro" and dim is not None and not isinstance(dim, tuple):
                continue
            check(torch.norm, x, p, dim)
        if dim is not None:
            check(torch.logsumexp, x, dim)
    check(torch.logsumexp, torch.tensor([[float("inf"), 1.0], [-float("inf"), -float("inf")]]), 1)


def test_large_full_reduction_two_stage():
    # loom accumulates float32 in double: compare with the float64 result
    # (the CPU's float32 accumulation is itself further off than 1e-5).
    x = make((3_000_001,), torch.float32)
    for fn in [torch.sum, torch.mean, torch.amax, torch.argmin, torch.var, torch.linalg.vector_norm]:
        expected = fn(x.double())
        expected = expected if expected.dtype == torch.int64 else expected.float()
        same(fn(x.to("loom")), expected)
    big = make((300, 5000), torch.float32)
    check(torch.sum, big, 0)
    check(torch.sum, big, 1)
    check(torch.var, big, 1)


def test_dtype_and_out_arguments():
    x = make((4, 6), torch.float16)
    check(torch.sum, x, 1, dtype=torch.float32)
    check(torch.mean, x, 0, dtype=torch.float32)
    check(torch.sum, make((4, 6), torch.int8), 0)
    check(torch.cumsum, make((4, 6), torch.int32), 1, dtype=torch.float64)
    xd = x.float().to("loom")
    out = torch.empty(0, device="loom")
    torch.sum(xd, 1, out=out)
    same(out, torch.sum(x.float(), 1))
    values, indices = torch.empty(0, device="loom"), torch.empty(0, dtype=torch.long, device="loom")
    torch.max(xd, 0, out=(values, indices))
    same((values, indices), torch.max(x.float(), 0))


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_aminmax_and_empty_inputs(dtype):
    x = make((4, 5, 6), dtype)
    for kw in [{}, dict(dim=1), dict(dim=-1, keepdim=True)]:
        check(lambda t: torch.aminmax(t, **kw), x)
    empty = make((5, 0, 5), dtype)
    for fn in [lambda t: torch.aminmax(t, dim=0), lambda t: torch.aminmax(t, dim=1),
               lambda t: torch.aminmax(t), lambda t: torch.amin(t, 0), lambda t: torch.amax(t),
               lambda t: torch.amax(t, dim=()), lambda t: torch.argmax(t, 2),
               lambda t: torch.argmin(t)]:
        check(fn, empty)   # the empty dim may stay, never be reduced


def test_trace():
    for dtype in FLOATS + INTS:
        check(torch.trace, make((5, 7), dtype))
        check(lambda t: torch.trace(t.t()), make((5, 7), dtype))
    check(torch.trace, make((3,), torch.float32))
    check(torch.trace, make((3, 3), torch.bool))


def test_reduction_errors():
    x = make((3, 4), torch.float32)
    check(torch.sum, x, 2)                       # invalid dim -> IndexError
    check(torch.max, torch.empty(0, 3), 0)       # empty reduction dim
    check(torch.max, torch.empty(0))             # empty full max
    check(torch.mean, make((3,), torch.int64))   # integer mean
    check(torch.var, make((3,), torch.int64))
    check(lambda t: torch.sum(t, 0, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    check(torch.sum, torch.empty(0, 3), 0)       # empty sums are zero
    check(torch.prod, torch.empty(0, 3), 0)
    check(torch.mean, torch.empty(0, 3), 0)


def test_zero_dim_input():
    x = torch.tensor(2.5)
    for fn in [torch.sum, torch.mean, torch.amax, torch.argmax]:
        check(fn, x)
    check(torch.max, x, 0)
    check(torch.cumsum, x, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_sums_widen_to_float32_runs_and_columns(dtype):
    # 16-bit floats are widened to float32 blocks: rows sum in 64 lanes,
    # columns (a sum over dim 0) row by row. With small integers every
    # partial sum is exact, so the only rounding is the output's: the exact
    # value rounded once (the CPU's float16 total can be a step off it), and
    # any lost, repeated or misplaced element shows.
    g = torch.Generator().manual_seed(15)
    x = torch.randint(-8, 9, (700, 1030), generator=g).to(dtype)
    d = x.to("loom")
    for fn in (lambda t: t.sum(0), lambda t: t.sum(1), lambda t: t.mean(1), lambda t: t.sum(),
               lambda t: t[:, 3:517].sum(0), lambda t: t.t().sum(1), lambda t: t.norm(dim=1)):
        torch.testing.assert_close(fn(d).cpu(), fn(x.double()).to(dtype), rtol=0, atol=0)


def test_products_logsumexp_and_var_over_lanes():
    # Products run in 64 double lanes (rows) or row by row in double
    # (columns), logsumexp's max and sum and var's squares in lanes: each
    # compared with float64 on lengths past the lanes with tails, so a lost,
    # repeated or wrongly started lane shows.
    g = torch.Generator().manual_seed(19)
    x = torch.rand(130, 1000, generator=g, dtype=torch.float64) * 0.2 + 0.9
    for t in (x, x[:, :77], x.t()):
        for dt in (torch.float32, torch.float64):
            d = t.to(dt).to("loom")
            tol = dict(rtol=2e-6, atol=0) if dt == torch.float32 else dict(rtol=1e-12, atol=0)
            for dim in (0, 1):
                ref = t.to(dt).double()
                torch.testing.assert_close(d.prod(dim).cpu().double(), ref.prod(dim), **tol)
                torch.testing.assert_close(d.logsumexp(dim).cpu().double(), ref.logsumexp(dim), **tol)
                torch.testing.assert_close(d.var(dim).cpu().double(), ref.var(dim), rtol=1e-5, atol=0)
            torch.testing.assert_close(d[:7, :9].prod().cpu().double(), t.to(dt).double()[:7, :9].prod(),
                                       **tol)
    # a NaN anywhere in a row is its logsumexp; -inf rows are -inf
    y = torch.randn(4, 300, generator=g)
    y[1, 250] = float("nan")
    y[2] = -float("inf")
    y[3, 7] = float("inf")
    check(torch.logsumexp, y, 1)
    check(torch.logsumexp, y.t().contiguous(), 0)  # the columns' path
    z = torch.full((5, 70), 1.25)
    z[2, 33] = 0.0
    z[3, 69] = -0.5
    check(torch.prod, z, 1)
    check(torch.prod, z.t().contiguous(), 0)


@pytest.mark.parametrize("fn", [torch.cumsum, torch.cumprod], ids=["cumsum", "cumprod"])
def test_float32_scans_over_dim_0_take_columns_together(fn):
    # Side-by-side rows are scanned 64 at a time, each with its own double
    # accumulator: the same bits as scanning them one at a time (the same
    # rows made contiguous), with blocks cut by the launch's chunks and by
    # the end of a matrix in a batch.
    g = torch.Generator().manual_seed(17)
    x = torch.rand(3, 150, 333, generator=g) + 0.5
    d = x.to("loom")
    for dim, t in ((1, d), (0, d[:, 7]), (1, d.transpose(1, 2).contiguous().transpose(1, 2))):
        got = fn(t, dim).cpu()
        want = fn(t.movedim(dim, -1).contiguous(), -1).movedim(-1, dim).cpu()
        assert torch.equal(got, want)
        torch.testing.assert_close(got, fn(t.cpu(), dim))



@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_reduced_dims_back_to_back_merge(dtype):
    """Reduced dims that lie back to back in memory are reduced as one (a
    bias gradient's sum over batch and sequence), size-1 dims drop out, and
    dims that do not lie so stay apart: every layout gives the CPU's
    result, and a flattened arg index still counts the original dims."""
    x = make((3, 1, 40, 33), dtype)
    for dims in [(0, 1), (0, 2), (1, 2), (0, 1, 2), (2, 3), (0, 3)]:
        check(torch.sum, x, dim=dims)
        check(torch.sum, x.transpose(0, 2), dim=dims)  # back to back no more
        check(torch.sum, x[:, :, ::2], dim=dims)
        check(torch.sum, x.expand(2, 3, 1, 40, 33), dim=(0,) + tuple(d + 1 for d in dims))
    if dtype.is_floating_point:
        check(torch.mean, x, dim=(0, 1, 2))
        check(torch.var, x, dim=(0, 2))
        check(torch.argmax, x)
        check(torch.amax, x.transpose(1, 3), dim=(0, 1, 2))


@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 63, 64, 65, 200])
def test_float32_sums_of_rows_back_to_back_keep_their_bits(n):
    """Sums and means of a contiguous float32's last dims (rows back to
    back, a dense output) give, row by row, the bits of the same rows read
    through a strided view (the per-output path), short rows included; and
    the CPU's values. NaN, inf, -0.0 and rows of -0.0 among them."""
    g = torch.Generator().manual_seed(n)
    rows = 301
    # magnitudes 2^-40..2^40: sums in double that depend on their order
    base = torch.randn(rows, 2, n, generator=g) * torch.exp2(
        torch.randint(-40, 40, (rows, 2, n), generator=g).float())
    base[5, :, 0] = float("nan")
    base[6, :, n - 1] = float("inf")
    base[7] = -0.0
    base[8, :, :1] = -0.0
    dense = base[:, 0].contiguous()
    strided = base.to("loom")[:, 0]  # rows 2n apart: not back to back
    for op in (torch.sum, torch.mean):
        got = op(dense.to("loom"), -1).cpu()
        ref = op(strided, -1).cpu()
        assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), op
        # the float64 value, to float32 rounding of the row's magnitude
        want = op(dense.double(), -1)
        bound = 1e-6 * op(dense.double().abs(), -1)
        finite = want.isfinite()
        assert ((got.double() - want).abs() <= bound)[finite].all(), op
        assert torch.equal(got[~finite].isnan(), want[~finite].isnan()), op
    # the same over two trailing dims (a global average pool's shape)
    pair = torch.randn(4, 6, 2, 8, n, generator=g)
    x = pair[:, :, 0].contiguous()
    got = x.to("loom").mean((-1, -2)).cpu()
    ref = pair.to("loom")[:, :, 0].mean((-1, -2)).cpu()
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_column_sums_with_few_outputs_add_parts_in_order(dtype):
    """A sum or mean over dim 0 of a tall matrix into few outputs runs in
    two stages, parts of 65536 rows: each column's bits are its parts' rows
    added in order in double, the parts then added in order (for float32
    and float64, where every addition shows in the result); and the CPU's
    values. Layouts: 16 and 19 columns, a [R, 4, 5] with two kept dims,
    rows wider than the columns read (a slice), a transposed input."""
    rows, part = 3 * 65536 + 1234, 65536
    g = torch.Generator().manual_seed(5)
    # magnitudes 2^-20..2^20: the order of the additions shows in the bits
    base = (torch.randn(rows, 24, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-20, 20, (rows, 24), generator=g).double())).to(dtype)
    d = base.to("loom")
    for cols in (16, 19):
        x = base[:, :cols]
        for op in (torch.sum, torch.mean):
            got = op(d[:, :cols], 0).cpu()
            torch.testing.assert_close(got, op(x, 0), **TOL[dtype])
            if dtype == torch.bfloat16:
                continue
            sums = [x[j:j + part].double().cumsum(0)[-1] for j in range(0, rows, part)]
            want = sums[0]
            for s in sums[1:]:
                want = want + s
            if op is torch.mean:
                want = want / rows
            assert torch.equal(got, want.to(dtype)), (cols, op)
    x3 = base[:, :20].reshape(rows, 4, 5)
    check(torch.sum, x3, 0)
    check(torch.mean, x3, 0)
    check(torch.sum, base[:, :16].t().contiguous().t(), 0)  # columns not contiguous
    check(torch.sum, base[:, :16].t(), 1)


def test_column_max_min_with_few_outputs_over_parts():
    """max / min over dim 0 of a tall float32 matrix into few outputs (two
    stages, parts of 65536 rows): the CPU's values and indices, with a tie
    across parts (the first row), a NaN in a late part (it wins), and a
    -0.0 after 0.0 (the first stays)."""
    rows, part = 3 * 65536 + 1234, 65536
    x = make((rows, 19), torch.float32)
    x[part + 5, 3] = x[2 * part + 9, 3] = 7.0
    x[3 * part + 2, 4] = float("nan")
    x[part + 1, 4] = 7.0
    x[:, 5] = 0.0
    x[2 * part, 5] = -0.0
    for fn in (torch.max, torch.min):
        check(fn, x, 0)
        got = fn(x.to("loom"), 0)
        assert got.indices[3].item() == (part + 5 if fn is torch.max else got.indices[3].item())
        assert got.indices[4].item() == 3 * part + 2 and got.indices[5].item() == 0
    for fn in (torch.amax, torch.amin, torch.argmax, torch.argmin):
        check(fn, x, 0)
