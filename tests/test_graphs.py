"""Graph capture and replay on loom: torch.loom.Graph / graph / graph_pool_handle /
make_graphed_callables, torch.accelerator.Graph, and torch.compile's
mode="reduce-overhead" on the loom backend."""

import copy
import gc
import logging

import pytest
import torch
import torch.nn.functional as F

from torch_loom.compiler import graphed
from torch_loom.loom.random import _generator as _default_generator


def _work(x, w, b):
    h = F.gelu(x @ w + b)
    return F.softmax(h * 2.0, dim=-1) + F.layer_norm(h, h.shape[-1:])


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 32, generator=g)
    w = torch.randn(32, 24, generator=g)
    b = torch.randn(24, generator=g)
    return [t.to("loom") for t in (x, w, b)]


def test_replay_equals_eager_and_follows_input_contents(no_fallback):
    x, w, b = _inputs()
    expected = _work(x, w, b)
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        out = _work(x, w, b)
    g.replay()
    assert torch.equal(out.cpu(), expected.cpu())
    # New contents in the captured tensors, same addresses: new results.
    for seed in (1, 2):
        nx, nw, _ = _inputs(seed)
        x.copy_(nx)
        w.mul_(0.5)
        g.replay()
        assert torch.equal(out.cpu(), _work(x, w, b).cpu())
    assert not torch.equal(out.cpu(), expected.cpu())


def test_nothing_runs_during_capture_and_replays_run_in_order():
    x = torch.zeros(1000, device="loom")
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        x.add_(1)
        x.mul_(3)
    assert torch.loom.is_current_stream_capturing() is False
    assert torch.equal(x.cpu(), torch.zeros(1000))
    for k in range(1, 4):
        g.replay()
    # ((0+1)*3+1)*3 ... three times.
    assert x[0].item() == 39.0


@pytest.mark.parametrize("op", ["item", "cpu", "synchronize", "print", "nonzero"])
def test_host_reads_and_waits_fail_naming_the_op(op, capsys):
    x = torch.randn(100, device="loom")
    g = torch.loom.Graph()
    with pytest.raises(RuntimeError, match="captures a graph") as info:
        with torch.loom.graph(g):
            y = (x + 1).sum()
            if op == "item":
                y.item()
            elif op == "cpu":
                y.cpu()
            elif op == "synchronize":
                torch.loom.synchronize()
            elif op == "print":
                print(y)
            else:
                torch.nonzero(x)
    message = str(info.value)
    assert {"item": "item", "cpu": "copy_", "synchronize": "synchronize",
            "print": "copy_", "nonzero": ""}[op] in message
    # The stream works again, and the failed capture left nothing behind.
    assert not torch.loom.is_current_stream_capturing()
    assert torch.allclose((x + 1).sum().cpu(), x.cpu().add(1).sum())
    with pytest.raises(RuntimeError, match="nothing was captured"):
        g.replay()


def test_capture_end_without_begin_and_recapture_after_reset():
    g = torch.loom.Graph()
    with pytest.raises(RuntimeError, match="capture_begin was not called"):
        g.capture_end()
    x = torch.ones(8, device="loom")
    with torch.loom.graph(g):
        x.add_(1)
    with pytest.raises(RuntimeError, match="call reset"):
        with torch.loom.graph(g):
            x.add_(1)
    g.reset()
    with torch.loom.graph(g):
        x.mul_(10)
    g.replay()
    assert x.cpu().tolist() == [10.0] * 8


def test_graph_memory_is_private_and_released_after_del():
    torch.loom.synchronize()
    gc.collect()
    torch.loom.empty_cache()
    base_reserved = torch.loom.memory_reserved()
    base_allocated = torch.loom.memory_allocated()
    x = torch.randn(1 << 20, device="loom")  # 4 MiB
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        tmp = x * 2  # freed inside the capture; replays still write it
        out = (tmp + 1).sum()
        del tmp
    held = torch.loom.memory_reserved()
    torch.loom.empty_cache()
    assert torch.loom.memory_reserved() == held  # the pool keeps its memory
    # Eager work never gets the pool's memory: replays stay correct.
    y = torch.full((1 << 20,), 5.0, device="loom")
    g.replay()
    assert out.item() == pytest.approx((x.cpu() * 2 + 1).sum().item(), rel=1e-5)
    assert torch.equal(y.cpu(), torch.full((1 << 20,), 5.0))
    del g, out, x, y
    gc.collect()
    torch.loom.empty_cache()
    assert torch.loom.memory_allocated() == base_allocated
    assert torch.loom.memory_reserved() == base_reserved


def test_graphs_share_a_pool_and_replay_in_order():
    pool = torch.loom.graph_pool_handle()
    x = torch.arange(6, dtype=torch.float32, device="loom")
    g1, g2 = torch.loom.Graph(), torch.loom.Graph()
    with torch.loom.graph(g1, pool=pool):
        a = x * 2
    with torch.loom.graph(g2, pool=g1.pool()):
        b = a + x
    assert g1.pool() == g2.pool()
    for k in range(2):
        x.add_(1)
        g1.replay()
        g2.replay()
        assert b.cpu().tolist() == (x.cpu() * 3).tolist()


def test_accelerator_graph_interface():
    s = torch.Stream(device="loom")
    g = torch.accelerator.Graph(keep_graph=True)
    x = torch.ones(4, device="loom")
    with s, g:
        x.mul_(2)
    g.instantiate()
    g.replay()
    g.replay()
    torch.accelerator.synchronize()
    assert x.cpu().tolist() == [4.0] * 4


def test_debug_dump_lists_the_commands(tmp_path):
    g = torch.loom.Graph()
    g.enable_debug_mode()
    x = torch.ones(4, device="loom")
    with torch.loom.graph(g):
        x.add_(1)
        x.mul_(2)
    path = tmp_path / "graph.txt"
    g.debug_dump(str(path))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("loom graph: 2 commands")
    assert len(lines) == 3


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def test_make_graphed_callables_trains_like_eager(no_fallback):
    torch.manual_seed(0)
    eager = _MLP().to("loom")
    model = copy.deepcopy(eager)
    sample = torch.randn(8, 20, device="loom")
    model = torch.loom.make_graphed_callables(model, (sample,))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        x = torch.randn(8, 20, generator=gen).to("loom")
        y = torch.randn(8, 5, generator=gen).to("loom")
        for m, opt in ((eager, opt_e), (model, opt_g)):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
        for p, q in zip(eager.parameters(), model.parameters()):
            assert torch.equal(p.cpu(), q.cpu()), f"step {step}"
    # Evaluation mode runs the module's own forward.
    model.eval()
    x = torch.randn(3, 20, device="loom")
    assert torch.equal(model(x).cpu(), eager(x).cpu())


# ---- random ops: fresh numbers at each replay, the numbers eager draws ---------------


def _draws(x, p):
    """Random ops of several kinds (each a launch that reads the generator)."""
    return (F.dropout(x, 0.3, training=True),
            torch.rand(7, device="loom"),
            torch.randn(5, device="loom", dtype=torch.float64),
            torch.bernoulli(p),
            torch.randint(0, 1000, (9,), device="loom"),
            torch.empty(6, device="loom").exponential_(2.0))


def _random_inputs():
    return torch.ones(40, 50, device="loom"), torch.linspace(0, 1, 33).to("loom")


def test_random_ops_draw_fresh_numbers_at_each_replay_as_eager(no_fallback):
    x, p = _random_inputs()
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        outs = _draws(x, p)
    torch.manual_seed(11)
    replayed = []
    for _ in range(3):
        g.replay()
        replayed.append([o.cpu() for o in outs])
    after_replays = torch.loom.get_rng_state()
    torch.manual_seed(11)
    eager = [[o.cpu() for o in _draws(x, p)] for _ in range(3)]
    for r, e in zip(replayed, eager):
        for got, want in zip(r, e):
            assert torch.equal(got, want)
    # The generator ends where the eager runs leave it.
    assert torch.equal(after_replays, torch.loom.get_rng_state())
    assert not torch.equal(replayed[0][0], replayed[1][0])
    assert not torch.equal(replayed[1][1], replayed[2][1])


def test_replays_and_eager_draws_interleave_and_manual_seed_takes_effect(no_fallback):
    x, p = _random_inputs()
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        outs = _draws(x, p)

    def sequence():
        seen = []
        for step in range(3):
            g.replay()
            seen.append([o.cpu() for o in outs])
            seen.append([torch.rand(4, device="loom").cpu()])
        return seen

    def eager_sequence():
        seen = []
        for step in range(3):
            seen.append([o.cpu() for o in _draws(x, p)])
            seen.append([torch.rand(4, device="loom").cpu()])
        return seen

    torch.manual_seed(5)
    got = sequence()
    torch.manual_seed(5)
    want = eager_sequence()
    for a, b in zip(got, want):
        for u, v in zip(a, b):
            assert torch.equal(u, v)
    # manual_seed between replays: the next replay starts from it.
    torch.manual_seed(9)
    g.replay()
    first = [o.cpu() for o in outs]
    g.replay()
    torch.manual_seed(9)
    g.replay()
    assert all(torch.equal(o.cpu(), f) for o, f in zip(outs, first))


def test_random_op_with_another_generator_fails_the_capture_naming_it():
    gen = torch.Generator(device="loom").manual_seed(0)
    g = torch.loom.Graph()
    with pytest.raises(RuntimeError, match="uniform_.*default loom generator"):
        with torch.loom.graph(g):
            torch.rand(8, device="loom", generator=gen)
    # The generator is usable again: a later capture works.
    g = torch.loom.Graph()
    with torch.loom.graph(g):
        out = torch.rand(8, device="loom")
    g.replay()
    assert ((out >= 0) & (out < 1)).all().item()


def test_registered_generator_draws_fresh_numbers_at_each_replay(no_fallback):
    gen = torch.Generator(device="loom")
    g = torch.loom.Graph()
    g.register_generator_state(gen)
    g.register_generator_state(_default_generator())  # registered anyway
    with torch.loom.graph(g):
        a = torch.rand(50, device="loom", generator=gen)
        b = torch.randn(30, device="loom")
    gen.manual_seed(4)
    torch.manual_seed(8)
    got = []
    for _ in range(3):
        g.replay()
        got.append((a.cpu(), b.cpu()))
    gen.manual_seed(4)
    torch.manual_seed(8)
    for ra, rb in got:
        assert torch.equal(ra, torch.rand(50, device="loom", generator=gen).cpu())
        assert torch.equal(rb, torch.randn(30, device="loom").cpu())
    assert not torch.equal(got[0][0], got[1][0])


class _DropoutMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.drop = torch.nn.Dropout(0.4)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(self.drop(torch.tanh(self.fc1(x))))


def _train(model, steps=4, seed=3):
    """`steps` SGD steps on fixed data, the loom generator seeded first."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 20, generator=gen).to("loom")
        y = torch.randn(8, 5, generator=gen).to("loom")
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_make_graphed_callables_with_dropout_trains_like_eager(no_fallback):
    torch.manual_seed(0)
    eager = _DropoutMLP().to("loom")
    model = copy.deepcopy(eager)
    model = torch.loom.make_graphed_callables(model, (torch.randn(8, 20, device="loom"),))
    want = _train(eager)
    got = _train(model)
    for p, q in zip(want, got):
        assert torch.equal(p, q)


def test_make_graphed_callables_functions_and_input_grads():
    def f(a, b):
        return (a * b).sin(), a.exp()

    a = torch.randn(10, device="loom", requires_grad=True)
    b = torch.randn(10, device="loom", requires_grad=True)
    gf = torch.loom.make_graphed_callables(f, (a, b), num_warmup_iters=1)
    a2 = torch.randn(10, device="loom", requires_grad=True)
    b2 = torch.randn(10, device="loom")
    s, e = gf(a2, b2)
    (s.sum() + e.sum()).backward()
    ref_a = a2.detach().clone().requires_grad_()
    rs, re = f(ref_a, b2)
    (rs.sum() + re.sum()).backward()
    assert torch.allclose(s.cpu(), rs.detach().cpu())
    assert torch.allclose(a2.grad.cpu(), ref_a.grad.cpu())


def test_make_graphed_callables_rejects_bad_arguments():
    m = _MLP().to("loom")
    m.register_forward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="no hooks"):
        torch.loom.make_graphed_callables(m, (torch.randn(2, 20, device="loom"),))
    with pytest.raises(TypeError, match="only tensors"):
        torch.loom.make_graphed_callables(lambda x, k: x * k, (torch.ones(2, device="loom"), 3))


# ---- torch.compile(mode="reduce-overhead") ------------------------------------------


def test_reduce_overhead_inference_equals_eager(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                            torch.nn.LayerNorm(64), torch.nn.Linear(64, 16)).to("loom")
    cm = torch.compile(m, backend="loom", mode="reduce-overhead")
    before = graphed.counters()
    outs = []
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(8, 32, device="loom")
            outs.append((cm(x), m(x)))
    after = graphed.counters()
    assert after["captures"] - before["captures"] == 1
    assert after["replays"] - before["replays"] == 3
    for got, want in outs:  # each call's result survives the later replays
        assert torch.equal(got.cpu(), want.cpu())


def test_reduce_overhead_training_equals_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = _MLP().to("loom")
    model = copy.deepcopy(eager)
    cm = torch.compile(model, backend="loom", mode="reduce-overhead")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    before = graphed.counters()
    for step in range(4):
        x = torch.randn(8, 20, device="loom")
        y = torch.randn(8, 5, device="loom")
        for m, opt in ((eager, opt_e), (cm, opt_c)):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
    for p, q in zip(eager.parameters(), model.parameters()):
        assert torch.allclose(p.cpu(), q.cpu(), rtol=1e-5, atol=1e-6)
    assert graphed.counters()["captures"] - before["captures"] == 2  # forward, backward


def test_reduce_overhead_falls_back_with_one_log_line(caplog):
    torch._dynamo.reset()

    def f(x, scale):
        return torch.sin(x) * scale + x.sum()

    cf = torch.compile(f, backend="loom", mode="reduce-overhead")
    graphed._logged.clear()
    before = graphed.counters()
    with caplog.at_level(logging.WARNING, logger="torch_loom.compiler"):
        for _ in range(3):
            x = torch.ones(64, device="loom")
            out = cf(x, torch.tensor(2.0))
            assert torch.allclose(out.cpu(), f(x, torch.tensor(2.0)).cpu())
    lines = [r for r in caplog.records if "reduce-overhead" in r.getMessage()]
    assert len(lines) == 1
    assert "an input on cpu" in lines[0].getMessage()
    assert graphed.counters()["captures"] == before["captures"]


def test_reduce_overhead_with_dropout_equals_compiled_and_eager_from_one_seed(no_fallback):
    def f(x, w):
        return F.dropout(torch.tanh(x @ w), 0.5, training=True) * 3 + torch.rand_like(x[:, :8])

    x = torch.randn(16, 12, device="loom")
    w = torch.randn(12, 8, device="loom")

    def run(fn):
        torch.manual_seed(21)
        return [fn(x, w).cpu() for _ in range(4)]

    want = run(f)
    torch._dynamo.reset()
    compiled = run(torch.compile(f, backend="loom"))
    torch._dynamo.reset()
    before = graphed.counters()
    got = run(torch.compile(f, backend="loom", mode="reduce-overhead"))
    after = graphed.counters()
    assert after["captures"] - before["captures"] == 1
    assert after["replays"] - before["replays"] == 3
    assert after["fallbacks"] == before["fallbacks"]
    for g, c, e in zip(got, compiled, want):
        assert torch.equal(g, c)
        assert torch.allclose(g, e, rtol=1e-6, atol=1e-6)
        assert torch.equal(g == 0, e == 0)  # the same mask
    assert not torch.equal(got[1], got[2])


def test_reduce_overhead_training_with_dropout_equals_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = _DropoutMLP().to("loom")
    model = copy.deepcopy(eager)
    before = graphed.counters()
    want = _train(eager)
    got = _train(torch.compile(model, backend="loom", mode="reduce-overhead"))
    after = graphed.counters()
    assert after["captures"] - before["captures"] == 2  # forward, backward
    assert after["fallbacks"] == before["fallbacks"]
    for p, q in zip(want, got):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)


def test_reduce_overhead_captures_attention_without_dropout():
    torch._dynamo.reset()

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    cf = torch.compile(attend, backend="loom", mode="reduce-overhead")
    before = graphed.counters()
    with torch.no_grad():
        for seed in range(3):
            q, k, v = (t.reshape(1, 2, 8, 4).to("loom")
                       for t in torch.randn(3, 64, generator=torch.Generator().manual_seed(seed)))
            assert torch.allclose(cf(q, k, v).cpu(), attend(q, k, v).cpu(), atol=1e-6)
    after = graphed.counters()
    assert after["captures"] - before["captures"] == 1
    assert after["fallbacks"] == before["fallbacks"]
