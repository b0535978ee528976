"""Training a client library's model on loom and on the CPU from the same
weights and batches, and comparing what a user sees: the losses, and the
total parameter update after a few optimizer steps.

The tolerance comes from the CPU itself: the same training in float64 on the
CPU is the reference, CPU float32's distance from it is the drift that
float32 rounding alone causes, and loom's float32 distance from the
reference may be a few times that drift, never the 47-68% of a broken weight
tie.
"""
import copy
from dataclasses import dataclass, field

import torch

# loom float32 may drift from the float64 reference this many times as far
# as CPU float32 does (different but equally valid summation orders), plus
# an absolute floor for models whose CPU drift is near zero.
DRIFT_FACTOR = 8.0
DRIFT_FLOOR = 2e-6


@dataclass
class Run:
    losses: list
    update: dict            # parameter name -> (after - before), on the CPU, float64
    fallbacks: dict = field(default_factory=dict)


def tied_groups(model):
    """Names that share one Parameter object, as sets, for every object
    reachable under more than one name."""
    by_id = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return sorted((sorted(names) for names in by_id.values() if len(names) > 1))


def assert_ties_survive(model, device):
    """Moving `model` to `device` keeps every tie and every Parameter object."""
    before = tied_groups(model)
    objects = {n: p for n, p in model.named_parameters(remove_duplicate=False)}
    moved = model.to(device)
    assert moved is model
    after = tied_groups(model)
    assert after == before, f"ties changed by .to({device!r}): {before} -> {after}"
    for n, p in model.named_parameters(remove_duplicate=False):
        assert p is objects[n], f"{n}: .to({device!r}) made a new Parameter"
        assert p.device.type == torch.device(device).type, n
    return before


def to_device(batch, device, dtype=None):
    def move(t):
        if isinstance(t, torch.Tensor):
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            return t.to(device)
        if isinstance(t, dict):
            return {k: move(v) for k, v in t.items()}
        if isinstance(t, (list, tuple)):
            return type(t)(move(v) for v in t)
        return t
    return move(batch)


def make_optimizer(name, params, lr):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    raise ValueError(name)


def train(model, batches, loss_fn, device, dtype=torch.float32, lr=1e-3, optimizer="adamw"):
    """Three (or len(batches)) optimizer steps of `model` on `device` in
    `dtype`. `model` is trained in place; returns the losses and the update."""
    model = model.to(dtype)
    assert_ties_survive(model, device)
    model.train()
    start = {n: p.detach().to("cpu", torch.float64).clone()
             for n, p in model.named_parameters()}
    opt = make_optimizer(optimizer, model.parameters(), lr)
    losses = []
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, to_device(batch, device, dtype))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    update = {n: p.detach().to("cpu", torch.float64) - start[n]
              for n, p in model.named_parameters()}
    return Run(losses, update)


def flat(update):
    return torch.cat([v.reshape(-1) for v in update.values()])


def relative_l2(a, b):
    """|a - b| / |b| over the whole update vector."""
    fa, fb = flat(a), flat(b)
    return ((fa - fb).norm() / fb.norm().clamp_min(1e-30)).item()


def compare(build, batches, loss_fn, known_fallbacks=(), lr=1e-3, optimizer="adamw"):
    """Trains `build()` on the CPU in float64 and float32 and on loom in
    float32, all from the same weights; asserts loom's losses and update
    match the CPU's within the drift measured here, and that nothing but
    `known_fallbacks` ran on the CPU fallback. Returns the loom model, its
    run, and loom's and CPU float32's distances from the float64 update.

    AdamW's first steps move each parameter by about lr * sign(gradient),
    so parameters whose gradient is rounding noise (those a batch norm makes
    irrelevant) move by a random sign and the float32 drift itself is large;
    models with batch norm compare SGD's updates, which are linear in the
    gradients."""
    torch.manual_seed(0)
    model = build()
    ref = train(copy.deepcopy(model), batches, loss_fn, "cpu", torch.float64, lr, optimizer)
    cpu = train(copy.deepcopy(model), batches, loss_fn, "cpu", torch.float32, lr, optimizer)
    torch.loom.synchronize()
    mode = torch.loom.get_fallback_mode()
    torch.loom.set_fallback_mode("silent")
    torch.loom.clear_fallback_ops()
    try:
        loom_model = copy.deepcopy(model)
        run = train(loom_model, batches, loss_fn, "loom", torch.float32, lr, optimizer)
        torch.loom.synchronize()
        run.fallbacks = dict(torch.loom.fallback_ops())
    finally:
        torch.loom.set_fallback_mode(mode)

    assert run.update.keys() == cpu.update.keys()
    drift = relative_l2(cpu.update, ref.update)
    err = relative_l2(run.update, ref.update)
    bound = DRIFT_FACTOR * drift + DRIFT_FLOOR
    assert err <= bound, (
        f"loom's parameter update is {err:.3g} (relative L2) from the float64 "
        f"reference; CPU float32's is {drift:.3g}; allowed {bound:.3g}")
    torch.testing.assert_close(torch.tensor(run.losses), torch.tensor(ref.losses, dtype=torch.float32),
                               rtol=1e-4, atol=1e-5, msg=lambda m: f"losses: {m}")

    unexpected = sorted(op for op in run.fallbacks if op not in known_fallbacks)
    assert not unexpected, f"ops ran on the CPU fallback: {unexpected}"
    stale = sorted(op for op in known_fallbacks if op not in run.fallbacks)
    assert not stale, f"listed as known fallbacks but now native: {stale}; drop them"
    return loom_model, run, err, drift
