"""Gradient scaling's two ops on loom (_amp_foreach_non_finite_check_and_unscale_
and _amp_update_scale_) against the CPU's, bit for bit, for every float dtype."""
import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_fallback")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
UNSCALE = "_amp_foreach_non_finite_check_and_unscale_"


def grads_for(dtype):
    """Gradients of several layouts: contiguous, a transposed and a strided
    view of larger tensors, one past a vector block with a tail, an empty
    one, a scalar. Scaled-loss sized values, so that fp16 is near its top."""
    g = torch.Generator().manual_seed(3)
    big = torch.randn(9, 14, generator=g) * 3000
    return [
        (torch.randn(37, generator=g) * 3000).to(dtype),
        (torch.randn(6, 5, generator=g) * 3000).to(dtype).t(),     # transposed view
        big.to(dtype)[1:8:2, ::3],                                  # strided view
        (torch.randn(1000, generator=g) * 3000).to(dtype),
        torch.empty(0, dtype=dtype),
        torch.tensor(1234.5, dtype=dtype),
    ]


def unscale_both(grads, inv_scale, found=0.0):
    """Runs the op on CPU copies and loom copies (same strides); returns the
    grads and found_inf of each."""
    out = []
    for device in ("cpu", "loom"):
        # fresh copies with the same strides on each device
        gs = [torch.empty_strided(g.size(), g.stride(), dtype=g.dtype, device=device).copy_(g)
              for g in grads]
        found_inf = torch.full((), found, dtype=torch.float32, device=device)
        inv = torch.full((), inv_scale, dtype=torch.float32, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(gs, found_inf, inv)
        out.append(([g.cpu() for g in gs], found_inf.cpu(), [g.stride() for g in gs]))
    return out


def assert_same(cpu, loom):
    (gc, fc, sc), (gl, fl, sl) = cpu, loom
    assert sl == sc
    for a, b in zip(gl, gc):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert fl.item() == fc.item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_unscale_matches_cpu(dtype):
    grads = grads_for(dtype)
    assert grads[1].stride() != grads[1].contiguous().stride()
    for inv_scale in (1.0 / 65536.0, 1.0 / 3000.0, 1.0):  # exact, rounded, untouched
        cpu, loom = unscale_both(grads, inv_scale)
        assert cpu[1].item() == 0.0
        assert_same(cpu, loom)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unscale_finds_non_finite(dtype, bad):
    for where in (0, 1, 2, 3):  # contiguous, transposed, strided, long
        grads = grads_for(dtype)
        last = tuple(n - 1 for n in grads[where].shape)
        grads[where][last] = bad
        cpu, loom = unscale_both(grads, 1.0 / 1024.0)
        assert cpu[1].item() == 1.0
        assert_same(cpu, loom)


def test_unscale_found_inf_is_never_cleared():
    # found_inf already 1 stays 1 over finite grads: clearing it is the caller's business
    cpu, loom = unscale_both(grads_for(torch.float32), 0.5, found=1.0)
    assert cpu[1].item() == 1.0
    assert_same(cpu, loom)


def test_unscale_empty_list_does_nothing():
    found = torch.zeros((), device="loom")
    torch._amp_foreach_non_finite_check_and_unscale_([], found, torch.ones((), device="loom"))
    assert found.item() == 0.0


def test_unscale_fp16_overflow_of_a_scaled_loss():
    # a scaled fp16 gradient that overflowed is inf, found as such
    g = torch.full((100,), 60000.0, dtype=torch.float16, device="loom") * 2
    found = torch.zeros((), device="loom")
    torch._amp_foreach_non_finite_check_and_unscale_([g], found, torch.full((), 0.5, device="loom"))
    assert found.item() == 1.0


@pytest.mark.parametrize("case", [
    dict(growth=2.0, backoff=0.5, interval=3),
    dict(growth=1.7, backoff=0.3, interval=1),      # products that round
    dict(growth=2.0, backoff=0.5, interval=2000),
])
def test_update_scale_matches_cpu(case):
    # clean steps, found infs (one as NaN, which counts), and growths
    found_seq = [0, 0, 0, 1, 0, float("nan"), 0, 0, 0, 0, 1, 1, 0, 0, 0]
    states = {}
    for device in ("cpu", "loom"):
        scale = torch.full((), 3.0e4, dtype=torch.float32, device=device)
        tracker = torch.zeros((), dtype=torch.int32, device=device)
        seq = []
        for f in found_seq:
            found = torch.full((), f, dtype=torch.float32, device=device)
            r = torch._amp_update_scale_(scale, tracker, found, case["growth"], case["backoff"],
                                         case["interval"])
            assert r is scale
            seq.append((scale.item(), tracker.item()))
        states[device] = seq
    assert states["loom"] == states["cpu"]


def test_update_scale_never_grows_to_inf():
    scale = torch.full((), 3e38, device="loom")
    tracker = torch.zeros((), dtype=torch.int32, device="loom")
    torch._amp_update_scale_(scale, tracker, torch.zeros((), device="loom"), 2.0, 0.5, 1)
    assert scale.item() == torch.tensor(3e38).item() and tracker.item() == 0


def test_ops_keep_state_on_the_device():
    # found_inf, scale and tracker never leave loom: the results are loom tensors
    # that the host reads only when asked (.item() below)
    g = [torch.randn(10, device="loom")]
    found = torch.zeros((), device="loom")
    inv = torch.full((), 0.25, device="loom")
    torch._amp_foreach_non_finite_check_and_unscale_(g, found, inv)
    scale = torch.full((), 4.0, device="loom")
    tracker = torch.zeros((), dtype=torch.int32, device="loom")
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 1)
    assert found.device.type == scale.device.type == tracker.device.type == "loom"
    assert scale.item() == 8.0


def loom(*args, **kw):
    return torch.full(*args, device="loom", **kw)


@pytest.mark.parametrize("call, message", [
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom")], loom((), 0.0), loom((), 1.0, dtype=torch.float64)),
     UNSCALE + ": inv_scale must be a Float tensor"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom")], loom((2,), 0.0), loom((), 1.0)),
     UNSCALE + ": found_inf must be a 1-element tensor"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom")], loom((), 0.0, dtype=torch.float16), loom((), 1.0)),
     UNSCALE + ": found_inf must be a Float tensor"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom"), torch.ones(3)], loom((), 0.0), loom((), 1.0)),
     UNSCALE + ": expected the gradients on loom:0 but got it on cpu"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom")], torch.zeros(()), loom((), 1.0)),
     UNSCALE + ": found_inf must be a loom tensor, got one on cpu"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom")], loom((), 0.0), torch.ones(())),
     UNSCALE + ": inv_scale must be a loom tensor, got one on cpu"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="loom").expand(2, 3)], loom((), 0.0), loom((), 1.0)),
     UNSCALE + ": a gradient has elements that share memory"),
    (lambda: torch._amp_update_scale_(
        loom((2,), 1.0), loom((), 0, dtype=torch.int32), loom((), 0.0), 2.0, 0.5, 10),
     "_amp_update_scale_: current_scale must be a 1-element tensor"),
    (lambda: torch._amp_update_scale_(
        loom((), 1.0, dtype=torch.float64), loom((), 0, dtype=torch.int32), loom((), 0.0),
        2.0, 0.5, 10),
     "_amp_update_scale_: current_scale must be a Float tensor"),
    (lambda: torch._amp_update_scale_(
        loom((), 1.0), loom((), 0, dtype=torch.int64), loom((), 0.0), 2.0, 0.5, 10),
     "_amp_update_scale_: growth_tracker must be a Int tensor"),
    (lambda: torch._amp_update_scale_(
        loom((), 1.0), loom((), 0, dtype=torch.int32), torch.zeros(()), 2.0, 0.5, 10),
     "_amp_update_scale_: found_inf must be a loom tensor, got one on cpu"),
])
def test_bad_input_names_the_op(call, message):
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(")):
        call()


def test_integer_gradients_are_refused():
    with pytest.raises(NotImplementedError, match=UNSCALE):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(3, dtype=torch.int32, device="loom")], loom((), 0.0), loom((), 1.0))


def test_second_device_and_mixed_devices(py):
    # On loom:1 the ops run there (the current device stays loom:0); state on
    # one loom device and gradients on another is refused, naming the op.
    py("""
        import pytest, torch
        torch.loom.set_fallback_mode("error")
        g = [torch.tensor([2.0, float("inf")], device="loom:1")]
        found = torch.zeros((), device="loom:1")
        torch._amp_foreach_non_finite_check_and_unscale_(g, found, torch.full((), 0.5, device="loom:1"))
        assert found.item() == 1.0 and g[0].cpu()[0].item() == 1.0
        scale = torch.full((), 8.0, device="loom:1")
        tracker = torch.zeros((), dtype=torch.int32, device="loom:1")
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 10)
        assert scale.item() == 4.0 and scale.device.index == 1
        with pytest.raises(RuntimeError, match="_amp_foreach_non_finite_check_and_unscale_: "
                                               "expected the gradients on loom:0 but got it on loom:1"):
            torch._amp_foreach_non_finite_check_and_unscale_(
                g, torch.zeros((), device="loom:0"), torch.ones((), device="loom:0"))
        with pytest.raises(RuntimeError, match="_amp_update_scale_: expected found_inf on loom:1"):
            torch._amp_update_scale_(scale, tracker, torch.zeros((), device="loom:0"), 2.0, 0.5, 10)
        assert torch.loom.fallback_ops() == {}
    """, env={"LOOM_NUM_DEVICES": "2"})
