"""Errors: an asynchronous kernel failure surfaces at the next
synchronization naming the op, and the device stays usable; input the CPU
refuses, loom refuses with the same exception."""

import pytest
import torch
import torch_loom


def test_async_error_raised_at_sync(loom):
    x = torch.ones(8, device="loom")
    torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        loom.synchronize()
    # the error was reported once and cleared; the device works
    loom.synchronize()
    assert (x * 2).sum().item() == 16.0


def test_async_error_raised_at_stream_sync(loom):
    s = loom.Stream()
    x = torch.ones(8, device="loom")
    with loom.stream(s):
        torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        s.synchronize()
    s.synchronize()
    assert x.sum().item() == 8.0


def test_async_error_raised_at_item(loom):
    x = torch.ones(8, device="loom")
    torch_loom._C._enqueue_failing_kernel(x)
    with pytest.raises(RuntimeError, match="loom_test_fault"):
        x.sum().item()
        loom.synchronize()
    loom.synchronize()
    assert x.sum().item() == 8.0


def test_bad_dtype_is_a_type_error(loom):
    with pytest.raises((TypeError, RuntimeError)):
        torch.ones(2, dtype=torch.float8_e4m3fn).to("loom").fill_(1)


def test_random_bad_arguments(loom):
    x = torch.empty(4, device="loom")
    with pytest.raises(RuntimeError, match="from"):
        x.uniform_(2.0, 1.0)
    with pytest.raises(RuntimeError, match="std"):
        x.normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="p"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="from"):
        x.random_(5, 3)


def _rows(device):
    return torch.arange(12.0).reshape(3, 4).to(device)


def _idx(values, device):
    return torch.tensor(values, device=device)


# Each op with an index out of range; the name the error must carry, and the
# bad index.
OUT_OF_RANGE = {
    "index_select": (lambda d: _rows(d).index_select(0, _idx([0, 5], d)), "5"),
    "gather": (lambda d: _rows(d).gather(1, _idx([[0], [7], [1]], d)), "7"),
    "scatter": (lambda d: torch.zeros(3, 4, device=d).scatter_(
        1, _idx([[0], [9], [1]], d), 1.0), "9"),
    "scatter_add": (lambda d: torch.zeros(3, 4, device=d).scatter_add_(
        1, _idx([[0], [-1], [1]], d), torch.ones(3, 1, device=d)), "-1"),
    "index_add": (lambda d: torch.zeros(3, 4, device=d).index_add_(
        0, _idx([0, 3], d), torch.ones(2, 4, device=d)), "3"),
    "embedding": (lambda d: torch.nn.functional.embedding(_idx([[1, 8]], d), _rows(d)), "8"),
    "nll_loss": (lambda d: torch.nn.functional.nll_loss(
        _rows(d).log_softmax(1), _idx([1, 6, 2], d)), "6"),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
@pytest.mark.parametrize("sync", ["synchronize", "cpu"])
def test_index_out_of_range_raises_what_the_cpu_raises(loom, name, sync):
    fn, bad = OUT_OF_RANGE[name]
    # The CPU backend raises IndexError, or RuntimeError for gather,
    # scatter and index_add; loom raises the same type.
    with pytest.raises((IndexError, RuntimeError), match="out of") as cpu_error:
        fn("cpu")
    # The kernel finds the index, so the error surfaces at the next
    # synchronizing call, with the op and the index in its message.
    with pytest.raises(cpu_error.type, match=rf"{name}\w*: (index|Target) {bad} is out of bounds"):
        r = fn("loom")
        if sync == "synchronize":
            loom.synchronize()
        else:
            r.cpu()
    # reported once; the stream works afterwards
    loom.synchronize()
    x = torch.arange(6.0, device="loom")
    assert (x * 2).sum().item() == 30.0
    assert _rows("loom").index_select(0, _idx([2, 0], "loom")).cpu().tolist() == [
        [8.0, 9.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]


def test_index_error_on_a_side_stream(loom):
    s = loom.Stream()
    with loom.stream(s):
        _rows("loom").gather(0, _idx([[3, 0, 0, 0]], "loom"))
    with pytest.raises(RuntimeError, match="gather: index 3 is out of bounds"):
        s.synchronize()
    s.synchronize()
    loom.synchronize()


# Input the CPU refuses before computing anything, with the type and the
# message it raises; `pytest.raises(type)` would also pass a subclass
# (NotImplementedError where the CPU raises RuntimeError).
_ONES = lambda dtype, d: torch.ones(3, dtype=dtype, device=d)  # noqa: E731
REFUSED = {
    "neg_bool": lambda d: -_ONES(torch.bool, d),
    "hardtanh_bool": lambda d: torch.nn.functional.hardtanh(_ONES(torch.bool, d)),
    "hardtanh_uint8": lambda d: torch.nn.functional.hardtanh(_ONES(torch.uint8, d)),
    "hardtanh__uint8": lambda d: torch.nn.functional.hardtanh_(_ONES(torch.uint8, d), 0, -1),
    "arange_bool": lambda d: torch.arange(4, dtype=torch.bool, device=d),
    "linspace_bool": lambda d: torch.linspace(0, 1, 4, dtype=torch.bool, device=d),
    "logspace_bool": lambda d: torch.logspace(0, 1, 4, dtype=torch.bool, device=d),
    "cumsum_out_bool": lambda d: torch.cumsum(_ONES(torch.bool, d), 0, out=_ONES(torch.bool, d)),
    "cumprod_out_bool": lambda d: torch.cumprod(_ONES(torch.int64, d), 0,
                                                out=_ONES(torch.bool, d)),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_input_raises_the_cpus_exception(loom, name):
    with pytest.raises(Exception) as cpu_error:
        REFUSED[name]("cpu")
    with pytest.raises(Exception) as loom_error:
        REFUSED[name]("loom")
    assert loom_error.type is cpu_error.type
    assert str(loom_error.value).split("\n")[0] == \
        str(cpu_error.value).split("\n")[0].replace("_cpu", "_loom")
    # the hardtanh limits the CPU accepts for uint8 still clamp
    assert torch.nn.functional.hardtanh(_ONES(torch.uint8, "loom") * 5, 0, 2).tolist() == [2] * 3
