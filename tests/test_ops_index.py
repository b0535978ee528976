"""Factories, indexing and data movement on loom against the CPU: arange,
linspace, logspace, full, eye, tril/triu, cat/stack, index_select, gather,
scatter (+add/reduce), index_add/copy/fill, masked_fill, flip, roll,
repeat, narrow_copy, and out-of-range indices. Nothing may fall back."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(0, 50, shape, generator=g, dtype=dtype)


def same(actual, expected, **tol):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, rtol=tol.get("rtol", 0),
                               atol=tol.get("atol", 0), equal_nan=True)


def check(fn, *args, **tol):
    try:
        expected = fn("cpu", *args)
    except Exception as e:
        with pytest.raises(type(e)):
            fn("loom", *[a.to("loom") if isinstance(a, torch.Tensor) else a for a in args])
            torch.loom.synchronize()
        return
    actual = fn("loom", *[a.to("loom") if isinstance(a, torch.Tensor) else a for a in args])
    same(actual, expected, **tol)


def test_factories():
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16]:
        check(lambda d: torch.arange(0, 37, 3, dtype=dtype, device=d))
        check(lambda d: torch.arange(10, dtype=dtype, device=d))
        check(lambda d: torch.full((3, 4), 7, dtype=dtype, device=d))
        check(lambda d: torch.eye(4, 6, dtype=dtype, device=d))
        check(lambda d: torch.zeros(5, dtype=dtype, device=d))
    check(lambda d: torch.arange(-1.0, 1.0, 0.1, device=d), rtol=1e-6, atol=1e-6)
    check(lambda d: torch.linspace(-2, 3, 11, device=d), rtol=1e-6, atol=1e-6)
    check(lambda d: torch.linspace(0, 1, 1, device=d))
    check(lambda d: torch.logspace(0, 2, 7, device=d), rtol=1e-5, atol=1e-5)
    check(lambda d: torch.logspace(0, 3, 4, base=2, device=d), rtol=1e-6)
    check(lambda d: torch.arange(0, 10, 0, device=d))   # zero step
    check(lambda d: torch.arange(5, 0, 1, device=d))    # wrong sign


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_tril_triu_of_complex_columns(dtype):
    """A complex matrix read by columns (geqrf's LAPACK layout, as
    linalg.qr hands it to triu) keeps both parts of every element."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 6, 5, dtype=dtype, generator=g)
    for k in [-1, 0, 2]:
        check(lambda d, t: torch.triu(t.transpose(1, 2), k), x)
        check(lambda d, t: torch.tril(t.transpose(1, 2), k), x)
    check(lambda d, t: t.transpose(1, 2).clone().transpose(1, 2).tril_(1), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tril_triu_cat_flip_roll(dtype):
    x = make((2, 5, 6), dtype)
    for k in [-2, 0, 1, 4]:
        check(lambda d, t: torch.tril(t, k), x)
        check(lambda d, t: torch.triu(t.transpose(1, 2), k), x)
    check(lambda d, t: t.clone().tril_(1), x)
    # rows of 300 split between the launch's chunks; diagonals past the edges
    big = make((3, 70, 300), dtype, seed=2)
    for k in [-100, -3, 5, 400]:
        check(lambda d, t: torch.tril(t, k), big)
        check(lambda d, t: torch.triu(t, k), big)
    check(lambda d, t: t.clone().triu_(7), big)
    y = make((2, 3, 6), dtype, seed=1)
    check(lambda d, a, b: torch.cat([a, b], 1), x, y)
    check(lambda d, a, b: torch.cat([a, b.transpose(0, 0)], -2), x, y)
    check(lambda d, a: torch.stack([a, a, a], 1), x)
    check(lambda d, a: torch.flip(a, [0, 2]), x)
    check(lambda d, a: torch.roll(a, 2, 2), x)
    check(lambda d, a: torch.roll(a, (1, -3), (0, 2)), x)
    check(lambda d, a: torch.roll(a, 7), x)
    check(lambda d, a: a.repeat(2, 1, 3), x)
    check(lambda d, a: a.narrow_copy(2, 1, 3), x)


def test_cat_promotion_and_errors():
    a, b = make((2, 3), torch.int32), make((4, 3), torch.float32)
    check(lambda d, x, y: torch.cat([x, y]), a, b)
    check(lambda d, x, y: torch.cat([x, y], 1), a, b)  # size mismatch
    check(lambda d, x: torch.cat([x, torch.empty(0, device=d)]), a)  # legacy empty
    check(lambda d, x: torch.cat([x, x.unsqueeze(0)]), a)  # rank mismatch


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_select_gather_scatter(dtype):
    x = make((5, 7), dtype)
    idx = torch.tensor([4, 0, 0, 2])
    check(lambda d, t, i: torch.index_select(t, 0, i), x, idx)
    check(lambda d, t, i: torch.index_select(t, 1, i), x, idx)
    check(lambda d, t, i: torch.index_select(t, 1, i.int()), x, idx)
    gi = torch.tensor([[0, 4, 2], [1, 1, 3]])
    check(lambda d, t, i: torch.gather(t, 0, i), x, gi)
    check(lambda d, t, i: torch.gather(t, 1, i), x, gi)
    src = make((2, 3), dtype, seed=3)
    si = torch.tensor([[0, 1, 2], [3, 4, 0]])
    check(lambda d, t, i, s: t.clone().scatter_(0, i, s), x, si, src)
    check(lambda d, t, i: torch.scatter(t, 1, i, 3), x, si)
    if dtype != torch.bool:
        dup = torch.tensor([[0, 0, 1], [0, 1, 1]])
        check(lambda d, t, i, s: torch.scatter_add(t, 0, i, s), x, dup, src)
        for reduce in ["sum", "prod", "mean", "amax", "amin"]:
            for include_self in [True, False]:
                check(lambda d, t, i, s: torch.scatter_reduce(t, 0, i, s, reduce,
                                                              include_self=include_self),
                      x, dup, src)
        source = make((5, 4), dtype, seed=4)
        tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
        check(lambda d, t, i, s: t.clone().index_add_(1, i, s, alpha=2), x, idx, source, **tol)
        check(lambda d, t, i, s: torch.index_add(t, 1, i, s), x, idx, source, **tol)
    check(lambda d, t, i, s: t.clone().index_copy_(1, i, s), x,
          torch.tensor([6, 0, 3, 2]), make((5, 4), dtype, seed=5))
    if dtype != torch.bool:
        source = make((5, 4), dtype, seed=4)
        for reduce in ["prod", "mean", "amax", "amin"]:
            for include_self in [True, False]:
                check(lambda d, t, i, s: t.clone().index_reduce_(1, i, s, reduce,
                                                                  include_self=include_self),
                      x, idx, source)
        check(lambda d, t, i, s: t.index_reduce(1, i, s, "sum"), x, idx, source)
    check(lambda d, t, i: t.clone().index_fill_(1, i, 1), x, idx)
    # index_fill counts negative indices from the end, as the CPU does
    check(lambda d, t, i: t.clone().index_fill_(1, i, 1), x, torch.tensor([-1, -7, 2]))
    mask = make((5, 7), torch.bool, seed=6)
    check(lambda d, t, m: t.masked_fill(m, 1), x, mask)
    check(lambda d, t, m: t.clone().masked_fill_(m[0], torch.tensor(0, dtype=t.dtype, device=d)), x, mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8], ids=str)
def test_gather_and_scatter_of_one_dtype_walk_runs(dtype):
    # One dtype and int64 indices: elements move as they are, one offset
    # computation per run of the last dim; views, every dim, launch chunks
    # that end inside a run, and out-of-range indices.
    g = torch.Generator().manual_seed(14)
    x = make((30, 40, 50), dtype)
    for dim in range(3):
        idx = torch.randint(0, x.shape[dim], (30, 40, 50), generator=g)
        check(lambda d, t, i: torch.gather(t, dim, i), x, idx)
        check(lambda d, t, i: torch.gather(t.transpose(0, 2), dim, i.transpose(0, 2)), x, idx)
        check(lambda d, t, i: torch.gather(t, dim, i[:, :7, 3:]), x, idx)
        perm = torch.argsort(torch.rand(30, 40, 50, generator=g), dim=dim)  # no duplicates
        src = make((30, 40, 50), dtype, seed=7)
        check(lambda d, t, i, s: t.clone().scatter_(dim, i, s), x, perm, src)
        check(lambda d, t, i, s: t.clone().scatter_(dim, i.transpose(0, 1).contiguous().transpose(0, 1), s),
              x, perm, src)
        if dtype == torch.float32:
            check(lambda d, t, i, s: torch.scatter_add(t, dim, i, s), x, idx, src)
        bad = idx.clone()
        bad[17, 3, 9] = x.shape[dim]
        check(lambda d, t, i: torch.gather(t, dim, i), x, bad)
        check(lambda d, t, i, s: t.clone().scatter_(dim, i, s), x, bad, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_index_select_copies_rows_of_the_last_dim(dtype):
    # 100 rows of 300: the launch's chunks end inside a row
    x = make((50, 300), dtype)
    rows = torch.randint(0, 50, (100,), generator=torch.Generator().manual_seed(7))
    check(lambda d, t, i: torch.index_select(t, 0, i), x, rows)
    if dtype.is_floating_point:
        check(lambda d, t, i: F.embedding(i, t), x, rows)
    # the middle dim of three; a transposed source copies element by element
    y = make((3, 20, 7), dtype, seed=1)
    check(lambda d, t, i: torch.index_select(t, 1, i), y, torch.tensor([19, 0, 4, 4]))
    check(lambda d, t, i: torch.index_select(t.transpose(1, 2), 1, i), y, torch.tensor([6, 0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
def test_index_copy_moves_rows_of_the_last_dim(dtype):
    # a KV cache's update: dim 2 of [B, H, T, D] from a transposed view
    cache = make((2, 3, 9, 16), dtype)
    kv = make((2, 5, 3, 16), dtype, seed=1).transpose(1, 2)
    pos = torch.tensor([4, 0, 8, 2, 4])  # 4 twice: the later source row wins
    check(lambda d, t, i, s: t.clone().index_copy_(2, i, s), cache, pos, kv)
    # a destination whose last dim is strided copies element by element
    check(lambda d, t, i, s: t.clone().transpose(2, 3).index_copy_(3, i, s.transpose(2, 3)),
          cache, pos, kv)
    # 6000 rows of 100: the launch's chunks end inside a row of the last dim
    big, src = make((60, 4, 100), dtype, seed=2), make((60, 3, 100), dtype, seed=3)
    check(lambda d, t, i, s: t.clone().index_copy_(1, i, s), big, torch.tensor([3, 1, 3]), src)
    check(lambda d, t, i, s: t.clone().index_copy_(1, i, s), big, torch.tensor([0, 4, 1]), src)


def test_index_add_of_float32_rounds_once_per_addition():
    # each addition in double, rounded to float32, in index order: rows of
    # the last dim add as runs (chunks of the launch ending inside rows), a
    # destination strided in its last dim element by element
    g = torch.Generator().manual_seed(8)
    base, src = torch.randn(60, 4, 100, generator=g), torch.randn(60, 5, 100, generator=g)
    idx = torch.tensor([3, 1, 3, 0, 3])
    want = base.clone()
    for k, i in enumerate(idx.tolist()):
        want[:, i] = (want[:, i].double() + src[:, k].double() * 0.3).float()
    runs = base.to("loom").index_add_(1, idx.to("loom"), src.to("loom"), alpha=0.3)
    strided = base.transpose(0, 2).contiguous().transpose(0, 2).to("loom")
    strided.index_add_(1, idx.to("loom"), src.to("loom"), alpha=0.3)
    assert torch.equal(runs.cpu(), want) and torch.equal(strided.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_scatter_sums_round_once_in_16_bit_floats(dtype):
    # Hundreds of contributions per slot: rounding after every addition
    # drifts from the CPU, which accumulates in float32 and rounds once.
    src, base = make((2000,), dtype, seed=1), make((3,), dtype, seed=2)
    idx = torch.randint(0, 3, (2000,), generator=torch.Generator().manual_seed(3))
    check(lambda d, t, i, s: t.scatter_add(0, i, s), base, idx, src)
    check(lambda d, t, i, s: t.scatter(0, i, s, reduce="add"), base, idx, src)
    for include_self in [True, False]:
        check(lambda d, t, i, s: t.scatter_reduce(0, i, s, "sum", include_self=include_self),
              base, idx, src)
        check(lambda d, t, i, s: t.scatter_reduce(0, i, s, "mean", include_self=include_self),
              base, idx, src)
    factors = src[:60].abs() + 0.5
    check(lambda d, t, i, s: t.scatter_reduce(0, i, s, "prod"), base, idx[:60], factors)


def test_index_errors():
    x = make((5, 7), torch.float32)
    check(lambda d, t: torch.index_select(t, 0, torch.tensor([0.5], device=d)), x)
    check(lambda d, t: torch.gather(t, 0, torch.zeros(2, 2, 2, dtype=torch.long, device=d)), x)
    check(lambda d, t: t.masked_fill(torch.ones(5, 7, device=d), 1.0), x)
    check(lambda d, t: t.index_add(0, torch.tensor([0, 1], device=d), torch.ones(3, 7, device=d)), x)
    # out-of-range indices surface as an error naming the op
    xd = x.to("loom")
    with pytest.raises((IndexError, RuntimeError), match="index_select|gather|out of range"):
        torch.index_select(xd, 0, torch.tensor([9], device="loom"))
        torch.loom.synchronize()
    with pytest.raises((IndexError, RuntimeError), match="gather|out of range"):
        torch.gather(xd, 1, torch.tensor([[70]], device="loom"))
        torch.loom.synchronize()
    with pytest.raises(IndexError, match="index_fill_: index -8 is out of bounds"):
        xd.clone().index_fill_(1, torch.tensor([-8], device="loom"), 0.0)
        torch.loom.synchronize()
    assert (xd + 1).cpu().shape == (5, 7)


def test_gather_with_an_empty_index_is_not_shape_checked():
    # The CPU returns an empty result of the index's shape without checking
    # the index against self.
    x = torch.randn(5)
    idx = torch.empty(2, 0, dtype=torch.long)
    want = torch.gather(x, 0, idx)
    got = torch.gather(x.to("loom"), 0, idx.to("loom"))
    assert got.device.type == "loom" and got.shape == want.shape == (2, 0)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        torch.gather(x.to("loom"), 0, torch.zeros(2, 1, dtype=torch.long, device="loom"))


# ---- advanced indexing ------------------------------------------------------

ADVANCED = [
    lambda x, i, j, m: x[i],
    lambda x, i, j, m: x[:, i],
    lambda x, i, j, m: x[..., i],
    lambda x, i, j, m: x[i, :, i],          # indexed dims apart: moved to the front
    lambda x, i, j, m: x[j, j],             # 2-d index tensors
    lambda x, i, j, m: x[:, j, 1:3],
    lambda x, i, j, m: x[m],                # a mask: nonzero's indices
    lambda x, i, j, m: x[m[:, :, 0]],
    lambda x, i, j, m: x[1, m[0]],
    lambda x, i, j, m: x.transpose(0, 2)[i],
    lambda x, i, j, m: x[i.int()],
    lambda x, i, j, m: x[i[:0]],
    lambda x, i, j, m: torch.masked_select(x, m),
    lambda x, i, j, m: torch.masked_select(x, m[0, 0]),  # broadcast mask
    lambda x, i, j, m: torch.masked_select(x[0, 0, 0], m[0, 0, 0]),  # 0-d: 1-d result
    lambda x, i, j, m: torch.take(x.transpose(0, 1), j * 9 - 3),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(len(ADVANCED)))
def test_advanced_indexing_reads(dtype, case):
    x = make((5, 6, 7), dtype)
    i = torch.tensor([0, 4, -1, 2])
    j = torch.tensor([[1, 2], [4, 0]])
    m = make((5, 6, 7), torch.bool, seed=1)
    check(lambda d, x, i, j, m: ADVANCED[case](x, i, j, m), x, i, j, m)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_advanced_indexing_writes(dtype):
    x = make((5, 6, 7), dtype)
    dup = torch.tensor([1, 3, 1, 1])
    vals = make((4, 6, 7), dtype, seed=2)
    mask = make((5, 6, 7), torch.bool, seed=3)

    def put(d, x, i, v, accumulate):
        return x.clone().index_put_((i,), v, accumulate=accumulate)

    # accumulate adds duplicates in index order, as the CPU does
    check(lambda d, x, i, v: put(d, x, i, v, True), x, dup, vals)
    check(lambda d, x, i, v: put(d, x, i, v, False), x, torch.tensor([1, 3, 0, 2]), vals)
    check(lambda d, x, i, v: put(d, x, i, v[0, 0], False), x, dup, vals)       # broadcast
    check(lambda d, x, m, v: x.clone().index_put_((m,), v[0, 0, 0]), x, mask, vals)
    check(lambda d, x, m, v: x.clone().index_put_((m,), v.flatten()[:int(m.sum())]), x, mask, vals)
    check(lambda d, x, i, v: x.clone().index_put_((i, i), v[:, 0], accumulate=True), x, dup, vals)
    flat = torch.tensor([[7, 0], [7, 209]])
    for accumulate in [False, True]:
        check(lambda d, x, i, v: x.clone().put_(i, v[0, 0, :4].reshape(2, 2), accumulate), x, flat, vals)
        check(lambda d, x, i, v: x.transpose(0, 2).clone().put_(i, v[0, 0, :4].reshape(2, 2), accumulate),
              x, flat, vals)


def test_advanced_indexing_errors_and_gradient():
    x = make((5, 6), torch.float32)
    i = torch.tensor([0, 4])
    check(lambda d, x, i: x[i + 5], x, i)                          # out of range
    check(lambda d, x, i: torch.take(x, i * 10), x, i)
    check(lambda d, x, i: x.clone().put_(i, torch.ones(3, device=d)), x, i)
    check(lambda d, x, i: x[i, torch.tensor([0, 1, 2], device=d)], x, i)  # no broadcast
    check(lambda d, x, i: x[i.float()], x, i)
    check(lambda d, x, m: x[m[:, :3]], x, make((5, 6), torch.bool))
    check(lambda d, x, i: x.clone().index_put_((i,), torch.ones(6, dtype=torch.float64, device=d)), x, i)
    check(lambda d, x, i: x.clone().index_put_((i,), torch.ones(3, device=d)), x, i)
    check(lambda d, x, i: x.clone().index_put_((i - 7,), torch.ones(6, device=d), accumulate=True), x, i)
    # seven indexed dims are folded into one offset
    y = make((2,) * 7, torch.float32)
    check(lambda d, y: y[[0, 1], [1, 0], [0, 0], [1, 1], [0, 1], [1, 1], [0, 0]], y)
    check(lambda d, y: y[[0, 1], [1, 0], [0, 0], [1, 1], [0, 1], [1, 1], [0, 2]], y)
    # index's gradient is an accumulating index_put_
    idx = torch.tensor([0, 0, 3, 4, 3])
    w = torch.arange(30.0).reshape(5, 6)
    g = {}
    for d in ["cpu", "loom"]:
        leaf = x.detach().to(d).requires_grad_()
        (leaf[idx.to(d)] * w.to(d)).sum().backward()
        g[d] = leaf.grad
    same(g["loom"], g["cpu"])


def test_repeat_interleave():
    for dtype in [torch.int64, torch.int32]:
        reps = torch.tensor([2, 0, 3, 1, 0], dtype=dtype)
        check(lambda d, r: torch.repeat_interleave(r), reps)
        check(lambda d, r: torch.repeat_interleave(r, output_size=6), reps)
        check(lambda d, r: torch.repeat_interleave(r[:0]), reps)
        check(lambda d, r: torch.repeat_interleave(r - 1), reps)          # negative counts
        check(lambda d, r: torch.repeat_interleave(r.view(1, 5)), reps)   # not 1-d
    check(lambda d, r: torch.repeat_interleave(r), torch.tensor([1.5]))
    x = make((4, 3), torch.float32)
    check(lambda d, t, r: torch.repeat_interleave(t, r, dim=0), x, torch.tensor([1, 0, 2, 3]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero_and_equal(dtype):
    x = make((5, 6, 7), dtype)
    check(lambda d, x: torch.nonzero(x), x)
    check(lambda d, x: torch.stack(torch.nonzero(x.transpose(0, 2), as_tuple=True)), x)
    check(lambda d, x: torch.nonzero(x[0, 0, 0]), x)             # 0-d
    check(lambda d, x: torch.nonzero(x[:0]), x)
    for size in [0, 5, 500]:   # truncated or padded
        check(lambda d, x: torch.nonzero_static(x, size=size, fill_value=-7), x)
    check(lambda d, x: torch.count_nonzero(x, dim=(0, 2)), x)
    check(lambda d, x: torch.tensor(torch.equal(x, x.clone()), device=d), x)
    check(lambda d, x: torch.tensor(torch.equal(x, x[:2]), device=d), x)
    check(lambda d, x: torch.tensor(torch.equal(x, x.flip(0)), device=d), x)
    # several chunks, in row-major order whatever the thread count
    big = make((701, 503), torch.bool, seed=4)
    check(lambda d, b: torch.nonzero(b.t()), big)
    # dense masks scan bytes: sparse ones skip zero words, in every chunk
    check(lambda d, b: torch.nonzero(b), big)
    sparse = torch.zeros(3, 70, 301, dtype=torch.bool)
    sparse.view(-1)[torch.randperm(sparse.numel(), generator=torch.Generator().manual_seed(5))[:97]] = True
    check(lambda d, b: torch.nonzero(b), sparse)
    check(lambda d, b: torch.nonzero(b.to(torch.uint8) * 3), sparse)
    check(lambda d: torch.nonzero(torch.tensor([0.0, -0.0, float("nan"), 1.0], device=d)))
    check(lambda d: torch.tensor(torch.equal(torch.tensor([1, 2], device=d),
                                             torch.tensor([1.0, 2.0], device=d)), device=d))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_scatter_and_isin(dtype):
    x = make((5, 6), dtype)
    mask = make((5, 6), torch.bool, seed=1)
    src = make((7, 6), dtype, seed=2)
    check(lambda d, t, m, s: t.clone().masked_scatter_(m, s), x, mask, src)
    check(lambda d, t, m, s: t.masked_scatter(m[0], s), x, mask, src)              # broadcast
    check(lambda d, t, m, s: t.t().clone().t().masked_scatter_(m, s), x, mask, src)  # strided self
    check(lambda d, t, m, s: t.clone().masked_scatter_(m, s[:1]), x, mask, src)     # too short
    check(lambda d, t, m, s: t.clone().masked_scatter_(m.int(), s), x, mask, src)
    test = make((9,), dtype, seed=3)
    for invert in [False, True]:
        check(lambda d, t, u: torch.isin(t, u, invert=invert), x, test)
    check(lambda d, t, u: torch.isin(t, u[:0]), x, test)
    if dtype not in (torch.bool, torch.uint8):
        check(lambda d, t: torch.isin(t, 3), x)
        check(lambda d, u: torch.isin(3, u), test)
    if dtype.is_floating_point:
        nan = torch.tensor([float("nan"), 1.0]).to(dtype)
        check(lambda d, t, u: torch.isin(t, u), nan, nan)   # NaN is never in


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_channel_shuffle_and_unfold_backward(dtype):
    x = make((2, 6, 3, 4), dtype)
    check(lambda d, t: torch.nn.functional.channel_shuffle(t, 3), x)
    check(lambda d, t: torch.nn.functional.channel_shuffle(t.to(memory_format=torch.channels_last), 2), x)
    check(lambda d, t: torch.nn.functional.channel_shuffle(t, 4), x)      # 6 % 4 != 0
    check(lambda d, t: torch.nn.functional.channel_shuffle(t[0, 0], 1), x)  # 2-d
    if dtype.is_floating_point:   # overlapping windows add in window order
        for dim, size, step in [(3, 2, 1), (2, 2, 2), (1, 4, 1), (3, 1, 3)]:
            shape = list(x.unfold(dim, size, step).shape)
            g = make(shape, dtype, seed=5)
            check(lambda d, g: torch.ops.aten.unfold_backward(g, list(x.shape), dim, size, step), g)
