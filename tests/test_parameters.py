"""Parameters moved to loom behave as on CUDA: `model.to("loom")` keeps the
Parameter objects (so ties, hooks, requires_grad and an optimizer's
references survive), `param.data = t` works across cpu and loom and between
loom devices, and swapping instead of setting `.data`
(`torch.__future__.set_swap_module_params_on_conversion`) gives the same
training."""
import copy

import pytest
import torch
import torch.nn as nn

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")


def tied_model():
    torch.manual_seed(0)
    m = nn.Module()
    m.emb = nn.Embedding(11, 6)
    m.mid = nn.Linear(6, 6)
    m.head = nn.Linear(6, 11, bias=False)
    m.head.weight = m.emb.weight
    return m


def forward(m, idx):
    return m.head(torch.tanh(m.mid(m.emb(idx))))


@pytest.fixture(params=[False, True], ids=["set_data", "swap"])
def swap_mode(request):
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(request.param)
    yield request.param
    torch.__future__.set_swap_module_params_on_conversion(before)


def test_compatible_shallow_copy_type():
    c, d = torch.zeros(2), torch.zeros(2, device="loom")
    assert torch._has_compatible_shallow_copy_type(c, d)
    assert torch._has_compatible_shallow_copy_type(d, c)
    assert torch._has_compatible_shallow_copy_type(d, torch.zeros(3, device="loom"))
    # Sparse CPU tensors cannot stand in for dense loom ones (nor on CUDA).
    assert not torch._has_compatible_shallow_copy_type(d, c.to_sparse())


def test_linear_tie_survives_to(swap_mode):
    m = nn.Module()
    m.a = nn.Linear(4, 4)
    m.b = nn.Linear(4, 4)
    m.b.weight = m.a.weight
    w = m.a.weight
    m.to("loom")
    assert m.a.weight is m.b.weight
    assert m.a.weight.device.type == "loom"
    if not swap_mode:
        assert m.a.weight is w            # the same Parameter object, moved
    m.to("cpu")
    assert m.a.weight is m.b.weight and m.a.weight.device.type == "cpu"
    assert len(list(m.parameters())) == 3


def test_parameter_objects_hooks_and_flags_survive(swap_mode):
    m = tied_model()
    m.mid.bias.requires_grad_(False)
    params = dict(m.named_parameters())
    seen = []
    m.mid.weight.register_hook(lambda g: seen.append(g.device.type))
    m.to("loom")
    for name, p in m.named_parameters():
        assert p is params[name], name
        assert p.device.type == "loom"
        assert isinstance(p, nn.Parameter)
    assert not m.mid.bias.requires_grad and m.mid.weight.requires_grad
    forward(m, torch.tensor([1, 2, 3], device="loom")).sum().backward()
    # Swapping drops tensor hooks on every device (`m.double()` on the CPU
    # too); setting `.data` keeps them.
    assert seen == ([] if swap_mode else ["loom"])
    assert m.emb.weight.grad.device.type == "loom"


def test_set_data_both_directions():
    p = nn.Parameter(torch.zeros(3))
    p.data = torch.ones(3, device="loom")
    assert p.device.type == "loom" and isinstance(p, nn.Parameter)
    assert p.requires_grad
    torch.testing.assert_close(p.cpu(), torch.ones(3))
    p.data = torch.full((2,), 5.0)
    assert p.device.type == "cpu" and p.tolist() == [5.0, 5.0]
    # Gradients flow to the moved leaf on its new device.
    p.data = torch.arange(3.0, device="loom")
    (p * p).sum().backward()
    assert p.grad.device.type == "loom"
    torch.testing.assert_close(p.grad.cpu(), 2 * torch.arange(3.0))


def test_set_data_between_loom_devices():
    from conftest import run_python
    run_python("""
        import torch, torch.nn as nn
        m = nn.Module(); m.a = nn.Linear(3, 3); m.b = nn.Linear(3, 3)
        m.b.weight = m.a.weight
        m.to("loom:0"); w = m.a.weight
        m.to("loom:1")
        assert m.a.weight is w and m.b.weight is w, "tie lost between devices"
        assert w.device == torch.device("loom:1"), w.device
        p = nn.Parameter(torch.ones(3, device="loom:0"))
        p.data = torch.full((3,), 2.0, device="loom:1")
        assert p.device == torch.device("loom:1") and p.sum().item() == 6.0
    """, env={"LOOM_NUM_DEVICES": "2"})


def test_optimizer_built_before_to_updates_loom_parameters(swap_mode):
    m = tied_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    m.to("loom")
    opt.zero_grad()
    forward(m, torch.tensor([0, 4, 9], device="loom")).pow(2).mean().backward()
    opt.step()
    for n, p in m.named_parameters():
        assert p.device.type == "loom"
        assert not torch.equal(p.detach().cpu(), before[n]), f"{n} was not updated"
    assert all(q.device.type == "loom" for g in opt.param_groups for q in g["params"])


def train_tied(device, steps=3):
    m = tied_model().to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    torch.manual_seed(1)
    batches = [torch.randint(0, 11, (8,)) for _ in range(steps)]
    for idx in batches:
        opt.zero_grad()
        logits = forward(m, idx.to(device))
        nn.functional.cross_entropy(logits, idx.to(device)).backward()
        opt.step()
    return {n: p.detach().cpu() for n, p in m.named_parameters()}


def test_tied_training_matches_cpu(swap_mode):
    cpu = train_tied("cpu")
    loom = train_tied("loom")
    assert cpu.keys() == loom.keys()
    for n in cpu:
        torch.testing.assert_close(loom[n], cpu[n], rtol=1e-5, atol=1e-6, msg=n)


def test_swap_and_set_data_train_alike():
    results = []
    for swap in (False, True):
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(swap)
        try:
            results.append(train_tied("loom"))
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)
    for n in results[0]:
        assert torch.equal(results[0][n], results[1][n]), n


def test_grad_moves_with_parameter(swap_mode):
    m = nn.Linear(3, 2)
    m(torch.randn(4, 3)).sum().backward()
    g = m.weight.grad.clone()
    m.to("loom")
    assert m.weight.grad is not None and m.weight.grad.device.type == "loom"
    torch.testing.assert_close(m.weight.grad.cpu(), g)


def test_dtype_conversion_on_loom_keeps_parameters():
    m = tied_model().to("loom")
    w = m.emb.weight
    m.to(torch.float64)
    assert m.emb.weight is w and m.head.weight is w and w.dtype == torch.float64
    m.half()
    assert w.dtype == torch.float16 and w.device.type == "loom"


def test_load_state_dict_assign_and_copy():
    src = tied_model()
    sd = {k: v.to("loom") for k, v in src.state_dict().items()}
    dst = tied_model()
    with torch.no_grad():
        for p in dst.parameters():
            p.zero_()
    dst.load_state_dict(sd, assign=True)
    assert dst.emb.weight.device.type == "loom"
    assert isinstance(dst.emb.weight, nn.Parameter)
    torch.testing.assert_close(dst.mid.weight.cpu(), src.mid.weight.detach())
    # Copying into loom parameters keeps the objects.
    m = tied_model().to("loom")
    w = m.emb.weight
    m.load_state_dict(src.state_dict())
    assert m.emb.weight is w and m.head.weight is w
    torch.testing.assert_close(w.detach().cpu(), src.emb.weight.detach())


def test_swap_tensors_across_devices():
    a = nn.Parameter(torch.ones(2))
    b = nn.Parameter(torch.zeros(2, device="loom"))
    torch.utils.swap_tensors(a, b)
    assert a.device.type == "loom" and b.device.type == "cpu"
    assert a.sum().item() == 0.0 and b.sum().item() == 2.0


def test_deepcopy_of_loom_model_keeps_ties():
    m = tied_model().to("loom")
    c = copy.deepcopy(m)
    assert c.head.weight is c.emb.weight
    assert c.emb.weight is not m.emb.weight
    assert c.emb.weight.device.type == "loom"
    torch.testing.assert_close(c.emb.weight.cpu(), m.emb.weight.cpu())


def test_to_empty_on_loom():
    m = tied_model().to_empty(device="loom")
    assert m.head.weight is m.emb.weight and m.emb.weight.device.type == "loom"
