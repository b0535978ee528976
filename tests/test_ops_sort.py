"""Sorting on loom against the CPU: sort (stable or not), argsort, msort
and topk over dims, directions, dtypes, NaN and signed zeros, views and
out= variants. Equal keys must land where the CPU puts them, so indices are
compared exactly. Nothing may fall back."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]


def keys(shape, dtype, seed=0):
    """Few distinct values, so that most keys have equals."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 9, shape, generator=g)
    return (x > 4) if dtype == torch.bool else x.to(dtype)


def bitwise(actual, expected):
    assert actual.device.type == "loom"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a = actual.cpu()
    if a.is_floating_point():   # NaN and -0.0 by their bits
        a, expected = a.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8)
    assert torch.equal(a, expected)


def check(fn, x):
    for a, e in zip(fn(x.to("loom")), fn(x)):
        bitwise(a, e)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sort_orders_equal_keys_as_the_cpu(dtype):
    x = keys((37, 300), dtype)
    for dim in [0, 1, -1]:
        for descending in [False, True]:
            for stable in [None, False, True]:
                check(lambda t: torch.sort(t, dim=dim, descending=descending, stable=stable), x)
    check(lambda t: torch.sort(t.t(), dim=1), x)                        # strided slices
    check(lambda t: (torch.argsort(t, dim=0, descending=True),), x)
    check(lambda t: (torch.msort(t),), x)
    check(lambda t: torch.sort(t[:4, :1].expand(4, 50), dim=1), x)     # stride-0 slices
    check(lambda t: torch.sort(t[0, 0]), x)                            # 0-d
    check(lambda t: torch.sort(t[:, :0], dim=1), x)                    # empty
    if dtype not in (torch.bool, torch.float16, torch.bfloat16):
        check(lambda t: torch.sort(keys((40000,), dtype, seed=1).to(t.device)), x)  # the CPU's radix sort


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64], ids=str)
def test_stable_integer_sorts_by_radix_keep_sign_order_and_ties(dtype):
    # Integer rows of 256 or more sort stably by radix on the keys' bits:
    # negatives before positives, the extremes at the ends, equal keys in
    # their first order, either direction.
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-20, 20, (3, 700), generator=g).to(dtype)
    x[0, 10], x[0, 500] = info.min, info.max
    x[1, ::7] = info.min
    x[2] = torch.randint(-3, 3, (700,), generator=g).to(dtype) * 40
    for descending in [False, True]:
        check(lambda t: torch.sort(t, dim=1, descending=descending, stable=True), x)
    check(lambda t: torch._unique2(t, return_inverse=True, return_counts=True), x)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
def test_topk_orders_equal_keys_as_the_cpu(dtype):
    x = keys((9, 500), dtype)
    for k in [0, 1, 7, 300, 500]:    # partial sort (k*64 <= n) and selection
        for largest in [True, False]:
            for sorted_ in [True, False]:
                check(lambda t: torch.topk(t, k, dim=1, largest=largest, sorted=sorted_), x)
    check(lambda t: torch.topk(t.t(), 3, dim=0), x)
    check(lambda t: torch.topk(t[0, 0], 1), x)


def test_nan_and_signed_zero():
    x = torch.tensor([float("nan"), 1.0, -0.0, 0.0, float("nan"), -float("inf"), 2.0] * 9)
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.float64]:
        for descending in [False, True]:
            check(lambda t: torch.sort(t, descending=descending), x.to(dtype))
            check(lambda t: torch.topk(t, 5, largest=descending), x.to(dtype))


def test_out_variants_and_errors():
    x = keys((5, 6), torch.float32)
    v, i = torch.empty(0, device="loom"), torch.empty(0, dtype=torch.long, device="loom")
    torch.sort(x.to("loom"), dim=0, out=(v, i))
    e = torch.sort(x, dim=0)
    bitwise(v, e.values)
    bitwise(i, e.indices)
    torch.topk(x.to("loom"), 2, out=(v, i))
    e = torch.topk(x, 2)
    bitwise(v, e.values)
    bitwise(i, e.indices)
    for bad in [lambda d: torch.topk(x.to(d), 7),
                lambda d: torch.sort(x.to(d), dim=2),
                lambda d: torch.sort(x.to(d), out=(torch.empty(0, device=d),
                                                   torch.empty(0, device=d)))]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
def test_selections_pick_the_cpus_element(dtype):
    x = keys((23, 41), dtype)
    for dim in [0, 1]:
        for keepdim in [False, True]:
            for k in [1, 5, 23]:
                check(lambda t: torch.kthvalue(t, k, dim=dim, keepdim=keepdim), x)
            check(lambda t: torch.median(t, dim=dim, keepdim=keepdim), x)
            check(lambda t: torch.nanmedian(t, dim=dim, keepdim=keepdim), x)
            check(lambda t: torch.mode(t, dim=dim, keepdim=keepdim), x)
    check(lambda t: (torch.median(t),), x)
    check(lambda t: (torch.nanmedian(t),), x)
    check(lambda t: torch.mode(t[0, 0]), x)                            # 0-d


def test_selections_with_nan():
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 1.0, nan, 2.0, -0.0, 0.0, 3.0],
                      [nan] * 8,
                      [5.0, 4.0, nan, 4.0, 5.0, 4.0, 1.0, 0.0]])
    for dtype in [torch.float32, torch.float16, torch.bfloat16]:
        y = x.to(dtype)
        for k in [1, 4, 8]:
            check(lambda t: torch.kthvalue(t, k, dim=1), y)
        check(lambda t: torch.median(t, dim=1), y)
        check(lambda t: torch.nanmedian(t, dim=1), y)     # all NaN: index as the CPU's
        check(lambda t: torch.mode(t, dim=1), y)
        check(lambda t: (torch.median(t), torch.nanmedian(t)), y)


def test_selection_errors():
    for bad in [lambda d: torch.kthvalue(torch.ones(3, device=d), 4),
                lambda d: torch.kthvalue(torch.ones(3, device=d), 0),
                lambda d: torch.median(torch.ones(0, 3, device=d), dim=0),
                lambda d: torch.mode(torch.ones(0, device=d))]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")
    check(lambda t: (torch.median(t),), torch.ones(0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unique(dtype):
    x = keys((7, 30), dtype)
    for sorted_ in [True, False]:
        for inv in [False, True]:
            for cnt in [False, True]:
                check(lambda t: torch._unique2(t, sorted=sorted_, return_inverse=inv,
                                               return_counts=cnt), x)
    check(lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True), x)
    check(lambda t: torch.unique_consecutive(t, return_inverse=True, dim=1), x)
    check(lambda t: torch._unique2(t[:0], return_inverse=True, return_counts=True), x)
    check(lambda t: torch._unique(t, return_inverse=True), x)
    check(lambda t: torch._unique2(t[0, 0], return_inverse=True, return_counts=True), x)


def test_unique_keeps_each_nan():
    nan = float("nan")
    x = torch.tensor([3.0, nan, 1.0, 3.0, nan, -0.0, 0.0])
    check(lambda t: torch._unique2(t, return_inverse=True, return_counts=True), x)
    check(lambda t: torch.unique_consecutive(t, return_counts=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8], ids=str)
def test_searchsorted_and_bucketize(dtype):
    g = torch.Generator().manual_seed(3)
    bd = torch.sort(torch.randint(0, 20, (4, 9), generator=g)).values.to(dtype)
    v = torch.randint(-2, 22, (4, 6), generator=g).to(dtype)
    for right in [False, True]:
        check(lambda b: (torch.searchsorted(b, v.to(b.device), right=right),), bd)
        check(lambda b: (torch.searchsorted(b[0], v.to(b.device), right=right, out_int32=True),), bd)
        check(lambda b: (torch.bucketize(v.to(b.device), b[1], right=right),), bd)
        check(lambda b: (torch.searchsorted(b[2], 7, side="right" if right else "left"),), bd)
    perm = torch.randperm(9, generator=g)
    shuffled = bd[:, perm]
    sorter = torch.argsort(shuffled, stable=True)
    check(lambda b: (torch.searchsorted(b, v.to(b.device), sorter=sorter.to(b.device)),), shuffled)
    check(lambda b: (torch.searchsorted(b, v.float().to(b.device)),), bd)   # promoted


def test_searchsorted_nan_and_errors():
    nan = float("nan")
    bd = torch.tensor([1.0, 2.0, 2.0, 5.0, nan])
    check(lambda b: (torch.searchsorted(b, torch.tensor([nan, 2.0, 9.0], device=b.device)),), bd)
    for bad in [lambda d: torch.searchsorted(torch.ones(2, 3, device=d), torch.ones(3, 3, device=d)),
                lambda d: torch.bucketize(torch.ones(3, device=d), torch.ones(2, 2, device=d)),
                lambda d: torch.searchsorted(torch.ones(3, device=d), torch.ones(2, device=d),
                                             side="middle")]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")
