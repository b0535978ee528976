"""The fused optimizers (AdamW, Adam, SGD; fused=True) on loom against the
CPU, with grad scaling and found-inf skipping."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]




@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, fused=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, fused=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.05, maximize=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3, maximize=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=1e-2, fused=True),
])
def test_fused_optimizers_match_cpu(make_opt):
    torch.manual_seed(15)
    params = [torch.randn(5, 3), torch.randn(7)]
    grads_seq = [[torch.randn_like(p) for p in params] for _ in range(4)]
    results = []
    for device in ("cpu", "loom"):
        ps = [p.clone().to(device).requires_grad_() for p in params]
        opt = make_opt(ps)
        for gs in grads_seq:
            for p, g in zip(ps, gs):
                p.grad = g.to(device)
            opt.step()
        results.append([p.detach().cpu() for p in ps])
    for a, b in zip(results[1], results[0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_adamw_grad_scale_matches_cpu(amsgrad):
    # The unscaled gradient is written back; a found inf skips the step.
    torch.manual_seed(16)
    n = 1000  # past one vector block, with a tail
    state = [torch.randn(n), torch.randn(n) * 8, torch.randn(n), torch.rand(n), torch.rand(n)]
    for inf in (0.0, 1.0):
        results = []
        for device in ("cpu", "loom"):
            p, g, m, v, vmax = (t.clone().to(device) for t in state)
            step = torch.tensor(3.0, device=device)
            torch._fused_adamw_([p], [g], [m], [v], [vmax] if amsgrad else [], [step], lr=1e-2,
                                beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8,
                                amsgrad=amsgrad, maximize=False,
                                grad_scale=torch.tensor(8.0, device=device),
                                found_inf=torch.tensor(inf, device=device))
            results.append([t.cpu() for t in (p, g, m, v, vmax)])
        for a, b in zip(results[1], results[0]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
