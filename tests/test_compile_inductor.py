"""A plain torch.compile(model) (Inductor, the default backend) on loom
tensors: what it computes equals loom eager, with the CPU fallback off.

Inductor compiles are slow on small machines, so the models are tiny, each
compiled model serves several checks, and Inductor's on-disk cache makes a
second run of this file much faster than the first."""

import copy
import logging
import re

import pytest
import torch
import torch.nn.functional as F

from compile_models import CNN, GPT, MLP


@pytest.fixture(autouse=True)
def _no_cpu_fallback():
    torch.loom.set_fallback_mode("error")
    torch.loom.clear_fallback_ops()
    yield
    assert torch.loom.fallback_ops() == {}


def _train(model, batches, make_opt, compile_kw=None, steps=3):
    """Losses and final parameters of `steps` training steps on loom (one
    batch each: the same batch again, so that the loss falls)."""
    model = copy.deepcopy(model).to("loom")
    opt = make_opt(model.parameters())
    run = torch.compile(model, **compile_kw) if compile_kw is not None else model
    losses = []
    for x, y in batches[:steps]:
        opt.zero_grad(set_to_none=True)
        out = run(x.to("loom"))
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.to("loom").reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().cpu() for n, p in model.named_parameters()}


def _check_training(model, batches, make_opt, rtol, atol):
    eager_losses, eager_params = _train(model, batches, make_opt)
    losses, params = _train(model, batches, make_opt, compile_kw={})
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=rtol, atol=atol)
    assert losses[-1] < losses[0]
    for name, p in params.items():
        torch.testing.assert_close(p, eager_params[name], rtol=rtol, atol=atol, msg=name)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


# ---- training steps ------------------------------------------------------------

def test_mlp_training_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(16, 12), torch.randint(0, 5, (16,)))] * 3
    _check_training(MLP(), batches, _sgd, rtol=1e-4, atol=1e-5)


def test_cnn_training_with_batch_norm_and_pooling_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)))] * 3
    _check_training(CNN(), batches, _sgd, rtol=1e-4, atol=1e-5)


def test_gpt_training_with_sdpa_layer_norm_gelu_adamw_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randint(0, 32, (2, 12)), torch.randint(0, 32, (2, 12)))] * 3
    # The key projection's bias has a gradient of exactly zero in theory
    # (softmax ignores a shift shared by all keys), rounding noise in
    # practice, which Adam's default eps would blow up to steps of lr.
    _check_training(GPT(), batches, lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-4),
                    rtol=1e-4, atol=1e-5)


# ---- ops kept whole as loom library calls --------------------------------------

def _library_step(x, w, idx, tgt, qs):
    """GELU, an embedding, cross-entropy and softmax (forward and backward), and a cat
    of transposed tensors (the attention gradients' layout). GELU reads a
    sum, not a product (that would be a GEMM epilogue)."""
    h = F.gelu(x @ w + 1) + F.embedding(idx, w)
    loss = F.cross_entropy(h, tgt) + (torch.softmax(h, dim=1) * h).sum()
    cat = torch.cat([q.transpose(0, 1).reshape(8, -1) for q in qs], dim=1)
    loss.backward()
    return loss.detach(), cat


def _library_inputs(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g)
    w = torch.randn(16, 16, generator=g).requires_grad_()
    idx, tgt = torch.randint(0, 16, (8,), generator=g), torch.randint(0, 16, (8,), generator=g)
    qs = [torch.randn(3, 8, 5, generator=g) for _ in range(3)]
    moved = [x.to(device), w.detach().to(device).requires_grad_(), idx.to(device), tgt.to(device),
             [q.to(device) for q in qs]]
    return moved


_LIBRARY_CALLS = ("aten.gelu.default", "aten.gelu_backward.default", "aten._log_softmax.default",
                  "aten._log_softmax_backward_data.default", "aten.nll_loss_forward.default",
                  "aten.nll_loss_backward.default", "aten.embedding_dense_backward.default",
                  "aten._softmax.default", "aten._softmax_backward_data.default")


def test_library_ops_are_extern_calls_on_loom_only():
    """GELU, cross-entropy, softmax and the embedding gradient run as loom's library
    kernels (extern calls in the compiled code), and agree with eager; a cat
    is a ConcatKernel (a copy per input, not one pointwise kernel selecting
    between them). CPU graphs are compiled as Inductor compiles them."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x, w, idx, tgt, qs = _library_inputs("loom")
    (loss, cat), codes = run_and_get_code(torch.compile(_library_step), x, w, idx, tgt, qs)
    code = "\n".join(codes)
    for call in _LIBRARY_CALLS:
        assert f"torch.ops.{call}(" in code, call
    # Each cat input is written into its slice by a loop nest of its own.
    nests = re.findall(r"loom_cpp_kernel\(async_compile, '\w+', '\w*', '(\w+)'", code)
    assert sum(len(n) for n in nests if n) >= 3, nests
    grad = w.grad.cpu()

    ex, ew, eidx, etgt, eqs = _library_inputs("loom")
    eloss, ecat = _library_step(ex, ew, eidx, etgt, eqs)
    torch.testing.assert_close(loss.cpu(), eloss.cpu(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cat.cpu(), ecat.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(grad, ew.grad.cpu(), rtol=1e-5, atol=1e-6)

    torch._dynamo.reset()
    cx, cw, cidx, ctgt, cqs = _library_inputs("cpu")
    _, cpu_codes = run_and_get_code(torch.compile(_library_step), cx, cw, cidx, ctgt, cqs)
    cpu_code = "\n".join(cpu_codes)
    for call in _LIBRARY_CALLS:
        assert f"torch.ops.{call}(" not in cpu_code, call


def _norm_layer(x, w, b, gamma, beta, t):
    """A linear layer under a layer norm: the bias gradient is the column sum
    of the layer norm's input gradient, a buffer in memory."""
    h = F.layer_norm(F.linear(x, w, b), (w.shape[0],), gamma, beta)
    return (h * t).sum()


def test_layer_norm_and_bias_column_sums_are_library_calls_with_eager_bits():
    """On loom, layer norm (forward and backward) and the sum of a buffer
    over its leading dims (a bias gradient) are extern calls into loom's
    library, so every gradient keeps eager's bits; a sum of a
    value computed on the fly, or of a small buffer, stays a generated
    kernel, and CPU graphs are compiled as Inductor compiles them."""
    from torch._inductor.utils import run_and_get_code

    g = torch.Generator().manual_seed(2)
    leaves = [torch.randn(*s, generator=g) for s in ((128, 32), (256, 32), (256,), (256,), (256,))]
    target = torch.randn(128, 256, generator=g)

    def step(fn, device):
        ts = [t.to(device).requires_grad_() for t in leaves]
        loss = fn(*ts, target.to(device))
        loss.backward()
        return [loss.detach().cpu()] + [t.grad.cpu() for t in ts]

    torch._dynamo.reset()
    got, codes = run_and_get_code(lambda: step(torch.compile(_norm_layer), "loom"))
    code = "\n".join(codes)
    for call in ("aten.native_layer_norm.default", "aten.native_layer_norm_backward.default",
                 "aten.sum.dim_IntList"):
        assert f"torch.ops.{call}(" in code, call
    want = step(_norm_layer, "loom")
    # The loss is a generated reduction (another summation order).
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    for name, a, b in zip(("x", "w", "b", "gamma", "beta"), got[1:], want[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)

    torch._dynamo.reset()
    _, cpu_codes = run_and_get_code(lambda: step(torch.compile(_norm_layer), "cpu"))
    cpu_code = "\n".join(cpu_codes)
    for call in ("native_layer_norm", "aten.sum.dim_IntList"):
        assert f"torch.ops.aten.{call}" not in cpu_code, call

    # Generated: a sum whose operand is computed on the fly (no pass writes
    # it), and the column sum of a small buffer.
    for fn, x in ((lambda t: (t * 2).sum(0), leaves[1]), (lambda t: t.sum(0), torch.randn(8, 16))):
        torch._dynamo.reset()
        out, codes = run_and_get_code(torch.compile(fn), x.to("loom"))
        assert "aten.sum.dim_IntList" not in "\n".join(codes)
        torch.testing.assert_close(out.cpu(), fn(x), rtol=1e-5, atol=1e-5)


def test_large_outputs_are_written_with_streaming_stores():
    """A generated kernel writes a float32 output of 32 MB or more with
    cache-bypassing stores where a vector is aligned (as the library's
    pointwise kernels do), and ordinary stores elsewhere: rows of 1023
    elements start at every alignment. Values are eager's; a small output
    keeps ordinary stores."""
    from torch._inductor.utils import run_and_get_code

    def shift(x, b):
        return x + b

    g = torch.Generator().manual_seed(3)
    for rows, streamed in ((8250, True), (64, False)):
        x, b = torch.randn(rows, 1023, generator=g), torch.randn(1023, generator=g)
        torch._dynamo.reset()
        out, codes = run_and_get_code(torch.compile(shift), x.to("loom"), b.to("loom"))
        code = "\n".join(codes)
        assert ("loom_stream_store(tmp" in code) == streamed, rows
        assert ("loom_stream_fence();" in code) == streamed, rows
        torch.testing.assert_close(out.cpu(), shift(x, b), rtol=0, atol=0)


# ---- GEMM epilogues ---------------------------------------------------------------

def _relu_layers(x, w1, b1, w2, keep):
    h = F.linear(x, w1, b1)
    a = torch.relu(h)
    if keep:
        a = a + h                       # the product has a second reader
    return torch.relu(a @ w2)


def test_relu_runs_in_the_gemm_forward_and_backward():
    """On loom, a linear layer's ReLU, and ReLU's backward after the
    gradient's product, run as the library GEMM's epilogue (one
    loom::mm_epilogue call each): the forward and the gradients of the
    inputs and weights keep eager's bits; CPU graphs are left alone."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    from torch_loom._inductor import config

    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(*s, generator=g) for s in ((16, 24), (32, 24), (32,), (32, 20))]
    # forward: both ReLUs (with keep, the first product also stays); backward:
    # the first ReLU's gradient, where the graph reads the saved ReLU result
    # (with keep, the partitioner saves masks instead, left to Inductor)
    for keep, fused in ((False, 3), (True, 2)):
        torch._dynamo.reset()
        counters.clear()

        def step(fn, device):
            x, w1, b1, w2 = [t.to(device).requires_grad_() for t in leaves]
            out = fn(x, w1, b1, w2, keep)
            out.sum().backward()
            return [t.detach().cpu() for t in (out, x.grad, w1.grad, w2.grad, b1.grad)]

        with config.patch(gemm_epilogues=True):
            got, codes = run_and_get_code(lambda: step(torch.compile(_relu_layers), "loom"))
        code = "\n".join(codes)
        assert code.count("torch.ops.loom.mm_epilogue.default(") == fused, code
        assert counters["inductor"]["loom_gemm_epilogue"] == fused
        want = step(_relu_layers, "loom")
        for name, a, b in zip(("out", "x.grad", "w1.grad", "w2.grad"), got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"keep={keep}: {name}")
        torch.testing.assert_close(got[4], want[4], rtol=1e-5, atol=1e-6)

    torch._dynamo.reset()
    with config.patch(gemm_epilogues=True):
        _, cpu_codes = run_and_get_code(lambda: step(torch.compile(_relu_layers), "cpu"))
    assert "mm_epilogue" not in "\n".join(cpu_codes)


def test_gemm_epilogues_switch_off_leaves_activations_to_generated_kernels():
    """With torch_loom._inductor.config.gemm_epilogues off (for side-by-side
    timing), loom graphs keep the products and their activations apart, and
    compute what eager computes."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    from torch_loom._inductor import config

    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(*s, generator=g) for s in ((16, 24), (32, 24), (32,), (32, 20))]

    def step(fn):
        x, w1, b1, w2 = [t.to("loom").requires_grad_() for t in leaves]
        out = fn(x, w1, b1, w2, False)
        out.sum().backward()
        return [t.detach().cpu() for t in (out, x.grad, w1.grad, w2.grad, b1.grad)]

    torch._dynamo.reset()
    counters.clear()
    with config.patch(gemm_epilogues=False):
        got, codes = run_and_get_code(lambda: step(torch.compile(_relu_layers)))
    assert "mm_epilogue" not in "\n".join(codes), codes
    assert counters["inductor"]["loom_gemm_epilogue"] == 0
    want = step(_relu_layers)
    for name, a, b in zip(("out", "x.grad", "w1.grad", "w2.grad", "b1.grad"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


def _gelu_mlp(x, w1, b1, w2, b2, approximate):
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate=approximate), w2, b2)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_of_a_linear_over_3d_input_runs_in_the_gemm(approximate):
    """A GPT-style MLP ([batch, seq, features] input, so the product is
    seen through a view): GELU in the forward GEMM, its backward in the
    gradient's GEMM, with eager's bits for the output and the gradients
    that do not go through a bias sum."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    g = torch.Generator().manual_seed(1)
    leaves = [torch.randn(*s, generator=g) for s in ((2, 7, 16), (48, 16), (48,), (16, 48), (16,))]

    def step(fn):
        ts = [t.to("loom").requires_grad_() for t in leaves]
        out = fn(*ts, approximate)
        (out * out).sum().backward()
        return [out.detach().cpu()] + [t.grad.cpu() for t in ts]

    from torch_loom._inductor import config

    torch._dynamo.reset()
    counters.clear()
    with config.patch(gemm_epilogues=True):
        got, codes = run_and_get_code(lambda: step(torch.compile(_gelu_mlp)))
    assert [c.count("torch.ops.loom.mm_epilogue.default(") for c in codes] == [1, 1], codes
    want = step(_gelu_mlp)
    for name, i in (("out", 0), ("x.grad", 1), ("w1.grad", 2), ("w2.grad", 4)):
        torch.testing.assert_close(got[i], want[i], rtol=0, atol=0, msg=name)
    for i in (3, 5):  # bias gradients: Inductor's sum against the library's
        torch.testing.assert_close(got[i], want[i], rtol=1e-5, atol=1e-4)


# ---- ordering with the stream --------------------------------------------------

def _chain(x, w):
    h = torch.relu(x @ w) * 2 + 1       # extern matmul -> generated pointwise
    return (h @ w).sum(dim=1)           # extern matmul -> generated reduction


def test_generated_kernels_wait_for_pending_loom_work():
    """The graph's input comes out of a long matmul still queued on the
    stream, and the graph alternates extern and generated kernels: every
    generated kernel must see what the work before it wrote."""
    compiled = torch.compile(_chain)
    w = torch.randn(48, 48, device="loom") / 8
    big = torch.randn(1024, 1024, device="loom")
    compiled(torch.randn(48, 48, device="loom"), w)  # compile first
    for trial in range(3):
        torch.loom.synchronize()
        # x is ready only after the 1024^3 matmul: the compiled graph is
        # called while that is still running.
        x = (big @ big)[:48, :48] * 1e-3 + trial
        got = compiled(x, w)
        torch.testing.assert_close(got.cpu(), _chain(x, w).cpu(), rtol=1e-5, atol=1e-4)


# ---- dynamic shapes, streams, random -------------------------------------------

def test_dynamic_shapes_recompile_at_most_twice():
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = GPT().to("loom").eval()
    compiled = torch.compile(model, dynamic=True)
    idx = torch.randint(0, 32, (2, 24), device="loom")
    before = counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for t in (5, 8, 11, 16, 23):
            torch.testing.assert_close(compiled(idx[:, :t]), model(idx[:, :t]), rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] - before <= 2


def test_stream_contexts_behave_as_in_eager():
    def step(x, side):
        current = torch.accelerator.current_stream()
        y = torch.sin(x) @ x
        with torch.loom.stream(side):
            side.wait_stream(current)
            z = torch.relu(y) + 1
        current.wait_stream(side)
        return (z * y).sum(dim=0)

    compiled = torch.compile(step)
    side = torch.loom.Stream()
    x = torch.randn(32, 32, device="loom")
    before = torch.loom.current_stream()
    torch.testing.assert_close(compiled(x, side).cpu(), step(x, side).cpu(), rtol=1e-5, atol=1e-5)
    # The context is left as eager code leaves it: the caller back on its stream.
    assert torch.loom.current_stream() == before
    # A compiled graph called under a stream context runs on that stream.
    plain = torch.compile(lambda a: (torch.sin(a) @ a).relu().sum(dim=1))
    expected = (torch.sin(x) @ x).relu().sum(dim=1).cpu()
    with torch.loom.stream(side):
        got = plain(x)
    side.synchronize()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_dropout_draws_what_eager_draws():
    def f(x, scale):
        return F.dropout(x, p=0.4, training=True) * scale

    compiled = torch.compile(f)
    x = torch.randn(64, 33, device="loom")
    scale = torch.tensor(3.0)  # a CPU scalar, which eager code mixes with loom tensors
    torch.loom.manual_seed(7)
    eager = f(x, scale).cpu()
    torch.loom.manual_seed(7)
    got = compiled(x, scale).cpu()
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    assert 0.3 < (got == 0).float().mean().item() < 0.5


def test_random_fallback_is_for_loom_graphs_only():
    """loom graphs draw on loom's generator (the op stays whole); a CPU graph
    compiled in the same process keeps Inductor's own random lowering and the
    global flag is never changed."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    def f(x):
        return F.dropout(x, p=0.4, training=True) * 2

    extern = "torch.ops.aten.native_dropout.default("
    _, loom_code = run_and_get_code(torch.compile(f), torch.randn(64, 33, device="loom"))
    torch._dynamo.reset()
    _, cpu_code = run_and_get_code(torch.compile(f), torch.randn(64, 33))
    assert extern in loom_code[0]
    assert extern not in cpu_code[0] and "cpp_fused" in cpu_code[0]
    assert inductor_config.fallback_random is False


@pytest.mark.parametrize("mode", ["max-autotune-no-cudagraphs", "reduce-overhead"])
def test_modes(mode):
    compiled = torch.compile(_chain, mode=mode)
    x, w = torch.randn(16, 16, device="loom"), torch.randn(16, 16, device="loom")
    torch.testing.assert_close(compiled(x, w).cpu(), _chain(x, w).cpu(), rtol=1e-5, atol=1e-5)


_THREADS_CODE = """
import hashlib, torch
import torch.nn.functional as F
def f(x, w, idx):
    h = F.layer_norm(x @ w, (96,)) * torch.sigmoid(x[:, :96])
    rows = torch.zeros(7, 96, device=x.device).index_add(0, idx, h)  # sums into shared rows
    return torch.softmax(h, dim=-1).sum(dim=0), h.sum(), (h * h).mean(dim=1), rows
g = torch.Generator().manual_seed(0)
x, w = torch.randn(300, 128, generator=g), torch.randn(128, 96, generator=g)
idx = torch.randint(0, 7, (300,), generator=g)
outs = torch.compile(f)(x.to("loom"), w.to("loom"), idx.to("loom"))
digest = hashlib.sha256(b"".join(o.cpu().numpy().tobytes() for o in outs)).hexdigest()
"""


def test_results_do_not_depend_on_the_thread_count(py):
    """Generated kernels split only independent outputs across loom's
    workers: the same bytes with one thread as with several."""
    here = {}
    exec(_THREADS_CODE, here)
    threads = torch.loom.get_device_properties(0).num_threads
    other = py(_THREADS_CODE + "print(digest)\n",
               env={"LOOM_NUM_THREADS": "1" if threads > 1 else "3"}).stdout.strip()
    assert other == here["digest"]


# ---- registration --------------------------------------------------------------

def test_registration_is_lazy_and_complete(py):
    proc = py("""
        import sys, torch
        assert "torch._dynamo" not in sys.modules and "torch._inductor" not in sys.modules
        assert not any(m.startswith("torch_loom._inductor.") for m in sys.modules)
        f = torch.compile(lambda a: (a @ a).relu().sum(dim=0))
        x = torch.randn(8, 8, device="loom")
        torch.testing.assert_close(f(x), (x @ x).relu().sum(dim=0))

        from torch._dynamo.device_interface import get_interface_for_device
        from torch._inductor.codegen.common import get_device_op_overrides, get_scheduling_for_device
        from torch._inductor.async_compile import caching_device_properties
        iface = get_interface_for_device("loom")
        assert get_interface_for_device("loom:0") is iface
        assert iface.Stream is torch.loom.Stream and iface.Event is torch.loom.Event
        assert isinstance(iface.get_compute_capability(), str)
        props = iface.Worker.get_device_properties()
        assert props.multi_processor_count == torch.loom.get_device_properties(0).num_threads
        assert iface.get_device_properties("loom:0") is props
        caching_device_properties()  # what Inductor does before forking workers
        assert iface.is_available() and iface.device_count() == torch.loom.device_count()
        assert iface.current_stream() == torch.loom.current_stream()
        assert get_scheduling_for_device("loom") is not None
        assert get_device_op_overrides("loom").synchronize() == "torch.loom.synchronize()"
        print("ok")
    """)
    assert proc.stdout.strip().endswith("ok")


def test_memory_the_host_cannot_address_runs_nodes_as_loom_ops(py):
    proc = py("""
        import torch
        import torch.nn.functional as F
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                    torch.nn.LayerNorm(16), torch.nn.Linear(16, 3)).to("loom")
        twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                   torch.nn.LayerNorm(16), torch.nn.Linear(16, 3)).to("loom")
        twin.load_state_dict(model.state_dict())
        compiled = torch.compile(model)
        x, y = torch.randn(6, 8, device="loom"), torch.randint(0, 3, (6,), device="loom")
        for m in (compiled, twin):
            F.cross_entropy(m(x), y).backward()
        torch.testing.assert_close(compiled(x), twin(x))
        for a, b in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(a.grad, b.grad)
        print(torch.loom.get_device_name())
    """, env={"LOOM_DRIVER": "guarded", "LOOM_FALLBACK": "error"})
    assert proc.stdout.startswith("loom guarded")
    assert proc.stderr.count("not host-addressable") == 1, proc.stderr
