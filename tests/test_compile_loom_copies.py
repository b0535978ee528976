"""A GPT-style training step compiled with backend="loom" launches no more
tensor copies than the same step in loom eager (counted through loom's
profiler activity: the device kernels, never timings), and trains as eager
does, with the CPU fallback off.

The heads of a fused qkv product are strided views, which loom's attention
reads in place; eager's backward concatenates the three gradients into the
product's gradient (3 copies a layer), where the compiled backward writes
them into its slices (compiler/attention.py). The compiled program must
add no copy of its own: no copy of a view that eager reads in place, no
materialized reshape eager does not make."""

import collections
import copy

import pytest
import torch
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit

from compile_models import GPT

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


def _copies(fn) -> collections.Counter:
    """The copies fn enqueues, by kernel: library copy kernels (copy.*) and
    any copy_ or cat member of a fused group. Adaptive eager is off while
    fn runs: how it groups ops depends on how far the device lags behind,
    and every copy is then a launch of its own."""
    from torch.profiler import ProfilerActivity, profile

    torch.loom.synchronize()
    with torch.loom.fusion.mode(0), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.loom.synchronize()
    found = collections.Counter()
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.PrivateUse1:
            continue
        if e.name.startswith("copy."):
            found[e.name] += 1
        elif e.name.startswith("fused("):
            members = e.name[len("fused("):-1].split(", ")
            found["fused copy_"] += members.count("copy_") + members.count("cat")
    return found


def _trainer(model, compiled):
    """One training step of `model` (a copy, on loom) as bench's gpt_train
    runs it: the model compiled (or not), AdamW in eager; the step returns
    the loss."""
    model = copy.deepcopy(model).to("loom")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4, weight_decay=0.1)
    run = torch.compile(model, backend="loom") if compiled else model
    torch.manual_seed(1)
    idx = torch.randint(0, 32, (4, 16)).to("loom")
    tgt = torch.randint(0, 32, (4, 16)).to("loom")

    def step():
        opt.zero_grad(set_to_none=True)
        out = run(idx)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    return model, step


def test_compiled_gpt_step_copies_no_more_than_eager_and_trains_as_eager():
    torch.manual_seed(0)
    base = GPT(d=32, heads=2, layers=2)
    eager_model, eager_step = _trainer(base, compiled=False)
    model, step = _trainer(base, compiled=True)
    compiler.reset_counters()
    eager_losses, losses = [], []
    for _ in range(3):
        eager_losses.append(eager_step().item())
        losses.append(step().item())
    c = compiler.counters()
    assert c["graphs_compiled"] >= 2 and c["graphs_fallen_back"] == 0
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses),
                               rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5,
                                   msg=name)

    want = _copies(eager_step)
    got = _copies(step)
    # eager's cat of each layer's three gradients: 3 copies a layer (the
    # test sees copies); compiled, the attention backward writes them into
    # the product's gradient
    assert want == {"copy.strided": 6}, want
    assert c["attention_packed"] == 2
    assert sum(got.values()) == 0, got
