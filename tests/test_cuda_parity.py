"""Places where PyTorch's Python side treats CUDA specially and a backend
must opt in: each behaves for loom as it does for CUDA."""
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")


@pytest.fixture
def no_fallback():
    """Fails the test if anything inside runs on the CPU fallback."""
    mode = torch.loom.get_fallback_mode()
    torch.loom.set_fallback_mode("error")
    yield
    torch.loom.set_fallback_mode(mode)


def test_device_module_lookups():
    assert torch.get_device_module("loom") is torch.loom
    assert torch.get_device_module(torch.device("loom:0")) is torch.loom
    assert torch.accelerator.current_accelerator() == torch.device("loom")
    assert torch.accelerator.is_available()
    assert torch.ones(1, device="loom").is_loom
    assert next(nn.Linear(2, 2).loom().parameters()).device == torch.device("loom:0")
    assert torch.ones(2).untyped_storage().loom().device.type == "loom"
    assert repr(torch.ones(2, device="loom")) == "tensor([1., 1.], device='loom:0')"


@pytest.mark.parametrize("workers", [0, 1])
def test_dataloader_pins_batches(workers):
    ds = TensorDataset(torch.randn(8, 3), torch.arange(8))
    batches = list(DataLoader(ds, batch_size=4, pin_memory=True, num_workers=workers))
    assert len(batches) == 2
    for x, y in batches:
        assert x.is_pinned() and y.is_pinned()
        torch.testing.assert_close(x.to("loom", non_blocking=True).cpu(), x)


def test_dataloader_pin_memory_device_is_the_accelerator():
    ds = TensorDataset(torch.randn(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # the argument is deprecated, as for cuda
        (x,), = list(DataLoader(ds, batch_size=4, pin_memory=True, pin_memory_device="loom"))
    assert x.is_pinned()


def test_generator_on_loom():
    g = torch.Generator("loom")
    assert g.device == torch.device("loom:0")
    g.manual_seed(5)
    a = torch.randn(6, device="loom", generator=g)
    state = g.get_state()
    b = torch.rand(3, device="loom", generator=g)
    g.set_state(state)
    assert torch.equal(torch.rand(3, device="loom", generator=g).cpu(), b.cpu())
    g.manual_seed(5)
    assert torch.equal(torch.randn(6, device="loom", generator=g).cpu(), a.cpu())
    with pytest.raises(RuntimeError):
        torch.randn(2, generator=g)          # a loom generator for a CPU tensor


def test_fork_rng_restores_loom_state():
    torch.loom.manual_seed(3)
    before = torch.loom.get_rng_state()
    with torch.random.fork_rng(device_type="loom"):
        torch.randn(10, device="loom")
    assert torch.equal(torch.loom.get_rng_state(), before)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_replays_dropout(reentrant, no_fallback):
    torch.manual_seed(0)
    lin = nn.Linear(8, 8).to("loom")
    x = torch.randn(4, 8, device="loom", requires_grad=True)

    def f(t):
        return nn.functional.dropout(lin(t), 0.5, True).sum()

    torch.loom.manual_seed(1)
    torch.utils.checkpoint.checkpoint(f, x, use_reentrant=reentrant).backward()
    g_ckpt, w_ckpt = x.grad.clone(), lin.weight.grad.clone()
    x.grad = None
    lin.weight.grad = None
    torch.loom.manual_seed(1)
    f(x).backward()
    assert torch.equal(g_ckpt.cpu(), x.grad.cpu())
    assert torch.equal(w_ckpt.cpu(), lin.weight.grad.cpu())


def grads_of(model, device):
    m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    m.load_state_dict(model.state_dict())
    m.to(device)
    x = torch.linspace(-1, 1, 20).reshape(4, 5).to(device)
    m(x).pow(2).sum().backward()
    return m


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm_matches_cpu(foreach, no_fallback):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    cpu, loom = grads_of(ref, "cpu"), grads_of(ref, "loom")
    nc = nn.utils.clip_grad_norm_(cpu.parameters(), 0.1, foreach=foreach)
    nl = nn.utils.clip_grad_norm_(loom.parameters(), 0.1, foreach=foreach)
    assert nl.device.type == "loom"
    torch.testing.assert_close(nl.cpu(), nc)
    for a, b in zip(loom.parameters(), cpu.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_fused_optimizers_match_foreach(name, no_fallback):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    results = []
    for kw in (dict(foreach=True), dict(fused=True)):
        m = grads_of(ref, "loom")
        opt = getattr(torch.optim, name)(m.parameters(), lr=0.1, **kw)
        opt.step()
        results.append([p.detach().cpu() for p in m.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_share_memory_is_a_no_op_as_for_cuda():
    t = torch.ones(2, device="loom")
    assert t.share_memory_() is t and t.is_shared()


def test_default_device_and_device_context():
    with torch.device("loom"):
        assert nn.Linear(2, 2).weight.device.type == "loom"
    torch.set_default_device("loom")
    try:
        assert torch.ones(1).device.type == "loom"
    finally:
        torch.set_default_device(None)
    assert torch.ones(1).device.type == "cpu"


def test_init_and_vector_utilities_stay_on_loom(no_fallback):
    m = nn.Linear(4, 3).to("loom")
    nn.init.kaiming_uniform_(m.weight)
    nn.init.trunc_normal_(m.bias, std=0.02)
    v = nn.utils.parameters_to_vector(m.parameters())
    assert v.device.type == "loom" and v.numel() == 15
    nn.utils.vector_to_parameters(torch.zeros(15, device="loom"), m.parameters())
    assert m.weight.abs().sum().item() == 0.0
