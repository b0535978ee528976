"""Scatters into graph inputs run in place (compiler/inplace.py): a KV
cache's index_copy_ writes its rows into the cache, in the default mode and
under mode="reduce-overhead", with eager's results; graphs reading the
input's old value, or returning the scatter, keep the functional form."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_loom.compiler import graphed, jit
from torch_loom.compiler.inplace import scatter_in_place

pytestmark = pytest.mark.skipif(not jit.available(), reason="needs a C compiler")

aten = torch.ops.aten


class _Decoder(nn.Module):
    """One attention layer decoding a token at a time through a KV cache."""

    def __init__(self, d=16, heads=2, slots=12):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("k", torch.zeros(1, heads, slots, d // heads))
        self.register_buffer("v", torch.zeros(1, heads, slots, d // heads))

    def forward(self, x, pos):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, self.hd).transpose(1, 2) for z in (q, k, v))
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        mask = torch.arange(self.k.shape[2], device=x.device).unsqueeze(0) <= pos.unsqueeze(1)
        y = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def _decode(step, model, xs):
    outs = []
    with torch.no_grad():
        for i, x in enumerate(xs):
            outs.append(step(x, torch.tensor([i], device="loom")).cpu())
    return outs, model.k.cpu(), model.v.cpu()


def _programs(monkeypatch):
    from torch_loom.compiler import backend

    seen = []
    real = backend.compile_graph

    def spy(gm, example_inputs, kind):
        out = real(gm, example_inputs, kind)
        seen.append(gm)
        return out

    monkeypatch.setattr(backend, "compile_graph", spy)
    return seen


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_kv_cache_decode_equals_eager_and_writes_in_place(mode, monkeypatch, no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = _Decoder().to("loom")
    model = _Decoder().to("loom")
    model.load_state_dict(eager.state_dict())
    xs = [torch.randn(1, 1, 16, device="loom") for _ in range(6)]
    gms = _programs(monkeypatch)
    step = torch.compile(model, backend="loom", mode=mode)
    k_address = model.k.data_ptr()
    want, got = _decode(eager, eager, xs), _decode(step, model, xs)
    for w, g in zip(want[0], got[0]):
        assert torch.equal(w, g)
    assert torch.equal(want[1], got[1]) and torch.equal(want[2], got[2])
    assert model.k.data_ptr() == k_address
    targets = [n.target for gm in gms for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.index_put_.default) == 2  # both caches, in place
    assert aten.index_put.default not in targets and aten.copy_.default not in targets


def _traced(fn, *args):
    """fn's functionalized ATen graph, as AOTAutograd hands it to the backend."""
    got = []

    def backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        def keep(g, _):
            got.append(g)
            return g.forward

        return aot_autograd(fw_compiler=keep, keep_inference_input_mutations=True)(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=backend)(*args)
    return got[0]


def test_a_graph_reading_the_old_value_keeps_the_functional_scatter():
    cache = torch.zeros(6, 4, device="loom")
    pos, rows = torch.tensor([2], device="loom"), torch.ones(1, 4, device="loom")

    def read_then_write(c, p, r):
        before = c.sum(0)
        c.index_copy_(0, p, r)
        return before

    gm = _traced(read_then_write, cache, pos, rows)
    assert scatter_in_place(gm) == 0
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.copy_.default in targets


def test_scatter_written_back_runs_in_place():
    cache = torch.zeros(6, 4, device="loom")
    pos, rows = torch.tensor([2], device="loom"), torch.ones(1, 4, device="loom")

    def write_then_read(c, p, r):
        c.index_copy_(0, p, r)
        return c.sum(0)

    gm = _traced(write_then_read, cache, pos, rows)
    assert scatter_in_place(gm) == 1
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.index_copy_.default in targets and aten.copy_.default not in targets


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_scatters_equal_eager_whatever_reads_the_cache(mode, no_fallback):
    def read_then_write(c, p, r):
        before = c.sum(0)
        c.index_copy_(0, p, r)
        return before * 2, c.sum(0)

    def write_then_return(c, p, r):
        c.index_copy_(0, p, r * 3)
        return c

    for fn in (read_then_write, write_then_return):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="loom", mode=mode)
        want_cache = torch.zeros(6, 4, device="loom")
        got_cache = torch.zeros(6, 4, device="loom")
        for i in range(4):
            pos = torch.tensor([i], device="loom")
            rows = torch.full((1, 4), float(i + 1), device="loom")
            want = fn(want_cache, pos, rows)
            got = compiled(got_cache, pos, rows)
            want, got = (want,) if isinstance(want, torch.Tensor) else want, \
                (got,) if isinstance(got, torch.Tensor) else got
            for w, g in zip(want, got):
                assert torch.equal(w.cpu(), g.cpu()), (fn.__name__, i)
            assert torch.equal(want_cache.cpu(), got_cache.cpu()), (fn.__name__, i)


def test_reduce_overhead_writes_back_a_cache_passed_as_an_argument(no_fallback):
    """A cache that is a call's argument (not a buffer) is copied into the
    capture's own memory: the replay's in-place scatter must reach the
    caller's tensor, a different one each call."""
    torch._dynamo.reset()

    def step(c, p, r):
        c.index_copy_(0, p, r)
        return c.sum(0)

    compiled = torch.compile(step, backend="loom", mode="reduce-overhead")
    before = graphed.counters()
    caches = [torch.zeros(6, 4, device="loom") for _ in range(2)]
    want_caches = [torch.zeros(6, 4) for _ in range(2)]
    for i in range(5):
        j = i % 2
        pos = torch.tensor([i], device="loom")
        rows = torch.full((1, 4), float(i + 1), device="loom")
        got = compiled(caches[j], pos, rows)
        want = step(want_caches[j], pos.cpu(), rows.cpu())
        assert torch.equal(got.cpu(), want)
        assert torch.equal(caches[j].cpu(), want_caches[j])
    assert graphed.counters()["replays"] - before["replays"] >= 3
