"""Random numbers on loom: native kernels, reproducible under manual_seed,
independent of the thread count, with CUDA's generator state layout."""

import pytest
import torch


def _draws():
    return [
        torch.rand(1000, device="loom"),
        torch.randn(37, 11, device="loom", dtype=torch.float64),
        torch.randint(-5, 17, (500,), device="loom"),
        torch.empty(300, device="loom").bernoulli_(0.3),
        torch.nn.functional.dropout(torch.ones(400, device="loom"), 0.5),
        torch.empty(64, device="loom").exponential_(2.0),
        torch.randn(8, device="loom", dtype=torch.bfloat16),
    ]


def test_manual_seed_reproduces(loom):
    torch.manual_seed(123)
    a = [t.cpu() for t in _draws()]
    torch.manual_seed(123)
    b = [t.cpu() for t in _draws()]
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    torch.manual_seed(124)
    c = torch.rand(1000, device="loom").cpu()
    assert not torch.equal(a[0], c)


def test_random_ops_are_native(loom):
    loom.clear_fallback_ops()
    _draws()
    ops = loom.fallback_ops()
    for name in ["aten::uniform_", "aten::normal_", "aten::random_.from", "aten::bernoulli_.float",
                 "aten::native_dropout", "aten::exponential_"]:
        assert name not in ops, ops


def test_distributions_are_sane(loom):
    torch.manual_seed(0)
    u = torch.rand(200000, device="loom").cpu()
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01
    n = torch.randn(200000, device="loom").cpu()
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1.0) < 0.01
    r = torch.randint(3, 9, (100000,), device="loom").cpu()
    assert set(r.unique().tolist()) == set(range(3, 9))
    b = torch.empty(100000, device="loom").bernoulli_(0.25).cpu()
    assert abs(b.mean().item() - 0.25) < 0.01
    p = torch.full((100000,), 0.75, device="loom")
    bt = torch.bernoulli(p).cpu()
    assert abs(bt.mean().item() - 0.75) < 0.01
    e = torch.empty(100000, device="loom").exponential_(4.0).cpu()
    assert e.min().item() >= 0 and abs(e.mean().item() - 0.25) < 0.01
    bools = torch.empty(1000, dtype=torch.bool, device="loom").random_().cpu()
    assert set(bools.tolist()) == {False, True}
    full = torch.empty(1000, dtype=torch.uint8, device="loom").random_().cpu()
    assert full.max().item() > 200


def test_generator_state_layout(loom):
    g = torch.Generator(device="loom")
    g.manual_seed(42)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() >= 16
    seed = int.from_bytes(bytes(state[-16:-8].tolist()), "little")
    offset = int.from_bytes(bytes(state[-8:].tolist()), "little")
    assert seed == 42 and offset == 0
    torch.rand(10, device="loom", generator=g)
    assert g.get_offset() > 0
    saved = g.get_state()
    x = torch.rand(10, device="loom", generator=g).cpu()
    g.set_state(saved)
    y = torch.rand(10, device="loom", generator=g).cpu()
    assert torch.equal(x, y)
    g.set_offset(0)
    assert g.get_offset() == 0


def test_rng_state_functions(loom):
    loom.manual_seed(7)
    assert loom.initial_seed() == 7
    st = loom.get_rng_state()
    a = torch.rand(5, device="loom").cpu()
    loom.set_rng_state(st)
    b = torch.rand(5, device="loom").cpu()
    assert torch.equal(a, b)
    states = loom.get_rng_state_all()
    assert len(states) == loom.device_count()
    loom.set_rng_state_all(states)
    loom.seed()
    loom.seed_all()
    loom.manual_seed_all(3)
    with torch.random.fork_rng(device_type="loom"):
        torch.rand(3, device="loom")
    assert loom.initial_seed() == 3


def test_explicit_generator_independent_of_default(loom):
    g = torch.Generator(device="loom").manual_seed(5)
    x = torch.randn(100, device="loom", generator=g).cpu()
    torch.manual_seed(999)
    g2 = torch.Generator(device="loom").manual_seed(5)
    y = torch.randn(100, device="loom", generator=g2).cpu()
    assert torch.equal(x, y)


_THREADS_SCRIPT = """
import torch, hashlib
torch.manual_seed(2024)
parts = [
    torch.rand(300001, device="loom"),
    torch.randn(1000, 333, device="loom"),
    torch.randn(4097, device="loom", dtype=torch.float16),
    torch.randint(0, 1 << 40, (100003,), device="loom"),
    torch.empty(70001, device="loom").bernoulli_(0.4),
    torch.nn.functional.dropout(torch.ones(65537, device="loom"), 0.2),
    torch.randn(64, 1000, device="loom").t(),
]
h = hashlib.sha256()
for p in parts:
    h.update(p.cpu().contiguous().numpy().tobytes())
print("digest", h.hexdigest())
"""


def test_independent_of_thread_count(py):
    one = py(_THREADS_SCRIPT, env={"LOOM_NUM_THREADS": "1"}).stdout
    two = py(_THREADS_SCRIPT, env={"LOOM_NUM_THREADS": "2"}).stdout
    assert "digest" in one
    assert one == two


def test_normal_with_tensor_arguments(loom):
    torch.manual_seed(1)
    a = torch.normal(torch.full((50000,), 3.0, device="loom"), 2.0).cpu()
    assert abs(a.mean().item() - 3.0) < 0.05 and abs(a.std().item() - 2.0) < 0.05
    b = torch.normal(-1.0, torch.full((50000,), 0.5, device="loom")).cpu()
    assert abs(b.mean().item() + 1.0) < 0.02 and abs(b.std().item() - 0.5) < 0.02
    c = torch.normal(torch.zeros(3, 1, device="loom"), torch.ones(1, 4, device="loom"))
    assert c.shape == (3, 4) and c.device.type == "loom"
    torch.manual_seed(1)
    a2 = torch.normal(torch.full((50000,), 3.0, device="loom"), 2.0).cpu()
    assert torch.equal(a, a2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
def test_dropout_backward_types_follow_the_cpu(loom, dtype):
    grad = torch.tensor([3, 1, 2, 5]).to(dtype)
    mask = torch.tensor([True, False, True, True])
    expected = torch.ops.aten.native_dropout_backward(grad, mask, 1.5)
    actual = torch.ops.aten.native_dropout_backward(grad.to("loom"), mask.to("loom"), 1.5)
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.cpu(), expected)


def test_multinomial_distribution_and_errors(loom):
    torch.manual_seed(3)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 2.0, 0.0, 1.0]], device="loom")
    for replacement in [True, False]:
        s = torch.multinomial(p, 4 if not replacement else 20000, replacement=replacement).cpu()
        assert s.dtype == torch.long and s.shape == (2, 4 if not replacement else 20000)
        if replacement:   # frequencies follow the probabilities; zero never drawn
            freq = torch.stack([torch.bincount(r, minlength=4) for r in s]).double() / 20000
            expected = p.cpu().double() / p.cpu().double().sum(1, keepdim=True)
            assert torch.allclose(freq, expected, atol=0.02)
        else:             # each category once, zero-probability ones last
            assert all(sorted(r.tolist()) == [0, 1, 2, 3] for r in s)
            assert s[0, 3].item() == 1 and s[1, 3].item() == 2
    one = torch.multinomial(torch.tensor([0.0, 0.0, 5.0], device="loom"), 1)
    assert one.tolist() == [2]
    for dtype in [torch.float64, torch.float32]:   # 1-d, with replacement
        r = torch.multinomial(torch.tensor([0.0, 2.0, 0.0], dtype=dtype, device="loom"), 5, True)
        assert r.tolist() == [1] * 5
    g = torch.Generator(device="loom").manual_seed(7)
    a = torch.multinomial(p, 6, replacement=True, generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(a, torch.multinomial(p, 6, replacement=True, generator=g).cpu())
    for bad in [lambda d: torch.multinomial(torch.ones(1, 1, 1, device=d), 1),
                lambda d: torch.multinomial(torch.ones(2, dtype=torch.long, device=d), 1),
                lambda d: torch.multinomial(torch.ones(3, device=d), 4),
                lambda d: torch.multinomial(torch.zeros(3, device=d), 1),
                lambda d: torch.multinomial(torch.tensor([-1.0, 2.0], device=d), 1)]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


def test_geometric_log_normal_and_normal_out(loom):
    torch.manual_seed(5)
    g = torch.empty(200000, device="loom").geometric_(0.25).cpu()
    assert g.min().item() >= 1 and abs(g.mean().item() - 4.0) < 0.05   # mean 1 / p
    i = torch.empty(1000, dtype=torch.int64, device="loom").geometric_(0.5).cpu()
    assert i.dtype == torch.int64 and i.min().item() >= 1
    ln = torch.empty(200000, device="loom").log_normal_(0.0, 0.5).cpu()
    assert abs(ln.log().mean().item()) < 0.01 and abs(ln.log().std().item() - 0.5) < 0.01
    out = torch.empty(0, device="loom")
    torch.normal(torch.zeros(50000, device="loom"), 2.0, out=out)
    assert out.shape == (50000,) and abs(out.std().item() - 2.0) < 0.05
    torch.normal(1.0, torch.full((50000,), 0.5, device="loom"), out=out)
    assert abs(out.mean().item() - 1.0) < 0.02
    for bad in [lambda d: torch.empty(3, device=d).geometric_(1.5),
                lambda d: torch.empty(3, device=d).log_normal_(0, -1)]:
        with pytest.raises(Exception) as cpu_err:
            bad("cpu")
        with pytest.raises(type(cpu_err.value)):
            bad("loom")


def test_float32_normals_are_the_float64_ones_rounded(loom):
    # Narrow normal draws take the Box-Muller transform in double arithmetic
    # (no library calls); float64 draws the C library's. Both read the same
    # Philox stream, so they agree to within float32's rounding.
    torch.manual_seed(21)
    a = torch.randn(100003, device="loom").cpu()
    torch.manual_seed(21)
    b = torch.randn(100003, device="loom", dtype=torch.float64).cpu()
    torch.testing.assert_close(a, b.float(), rtol=1.2e-7, atol=1e-12)
    assert 0.99 < a.std().item() < 1.01 and abs(a.mean().item()) < 0.01

