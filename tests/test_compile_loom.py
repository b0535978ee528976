"""torch.compile(model, backend="loom"): loom's own compiler (fusion IR, C
emitter, JIT) computes what loom eager computes, with the CPU fallback off.

Each compiled function is tiny; the C modules land in the JIT's disk cache,
so a second run of this file compiles nothing."""

import copy
import logging

import pytest
import torch
import torch.nn.functional as F

from torch_loom import compiler
from torch_loom.compiler import jit

from compile_models import CNN, GPT, MLP
from conftest import run_python

pytestmark = [pytest.mark.skipif(not jit.available(), reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_compile")]


def _compiled_call(fn, *args):
    """(result, counters of this call alone) of fn compiled with loom, after
    a first call that compiles it."""
    compiler.reset_counters()
    compiled = torch.compile(fn, backend="loom")
    compiled(*args)
    torch.loom.synchronize()
    assert compiler.counters()["graphs_fallen_back"] == 0  # its C compiled
    compiler.reset_counters()
    out = compiled(*args)
    return out, compiler.counters()


# ---- pointwise chains -----------------------------------------------------------

def _ten_ops(x, y):
    h = x * y          # 1
    h = h + 1.5        # 2
    h = torch.exp(h)   # 3
    h = h - y          # 4
    h = torch.tanh(h)  # 5
    h = h / (x.abs() + 1)  # 6, 7, 8
    h = torch.sigmoid(h)   # 9
    return torch.relu(h - 0.5)  # 10, 11


def test_chain_of_ten_pointwise_ops_is_one_launch_with_eagers_bits():
    x, y = torch.randn(40, 33, device="loom"), torch.randn(40, 33, device="loom")
    out, c = _compiled_call(_ten_ops, x, y)
    assert c["graph_calls"] == 1
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    # the same float32 operations in the same order, with the library's
    # exp, tanh and sigmoid: the same bits
    assert torch.equal(out.cpu(), _ten_ops(x, y).cpu())


def _library_math(x, y):
    h = F.gelu(x * y) + torch.erf(x) - torch.log1p(y.abs())
    h = torch.sin(h) * torch.cos(x) + torch.sqrt(y.abs() + 1) / torch.rsqrt(x * x + 1)
    h = torch.maximum(h, y) - torch.minimum(x, -h) + torch.pow(x, 2) + torch.pow(y.abs(), 1.7)
    h = torch.where(x > 0, h, torch.expm1(y)) + torch.clamp(x, -0.5, 0.5)
    return F.silu(h) + F.gelu(y, approximate="tanh") + torch.lerp(x, y, 0.3)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "broadcast"])
def test_float32_math_equals_eager_bit_for_bit(layout):
    torch.manual_seed(1)
    x = torch.randn(24, 40, device="loom")
    y = torch.randn(24, 40, device="loom")
    if layout == "transposed":  # strided operands: the kernel walks their strides
        x = torch.randn(40, 24, device="loom").t()
    elif layout == "broadcast":
        y = torch.randn(40, device="loom")
    out, c = _compiled_call(_library_math, x, y)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    assert torch.equal(out.cpu(), _library_math(x, y).cpu())


def test_bfloat16_rounds_like_eager_at_every_op():
    torch.manual_seed(2)
    x = torch.randn(16, 50, device="loom", dtype=torch.bfloat16)
    y = torch.randn(16, 50, device="loom", dtype=torch.bfloat16)
    out, c = _compiled_call(_ten_ops, x, y)
    assert out.dtype == torch.bfloat16 and c["kernel_launches"] == 1
    assert torch.equal(out.cpu(), _ten_ops(x, y).cpu())
    # mixed: bfloat16 promoted against float32, then cast back
    mixed = lambda a, b: ((a * b.float()).exp() + 1).to(torch.bfloat16) * a  # noqa: E731
    out, _ = _compiled_call(mixed, x, y)
    assert torch.equal(out.cpu(), mixed(x, y).cpu())



def _bf16_edges():
    """float32 values whose bfloat16 rounding a truncation gets wrong (ties
    to even both ways, just above and below a tie), and NaN, infinities,
    signed zeros, subnormals and the largest finite floats."""
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x3F80FFFF,
                         0x7F7FFFFF, 0x7F7F8000, 0x00008000, 0x00018000, 0x807FFFFF],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -3.5, 0.5,
                            2.0, -1e-30])
    torch.manual_seed(5)
    return torch.cat([bits, -bits, special, torch.randn(200) * 1e3]).view(-1, 10)


def test_bfloat16_stores_keep_eagers_bits(monkeypatch, caplog):
    """A bfloat16 value is rounded where it is made, so its store into a
    bfloat16 tensor takes the value's upper half as it is; float32 values
    reach a bfloat16 tensor only through a rounding cast. Values a second
    rounding or a truncation would change give eager's bits."""
    x32 = _bf16_edges().to("loom")
    x = (x32 * 1.0).to(torch.bfloat16)
    cases = [
        lambda a, b: torch.relu(a) * 3 - a,                   # bfloat16 ops
        lambda a, b: (b * 3).to(torch.bfloat16),              # a float32 value cast
        lambda a, b: (b + 1).to(torch.bfloat16) - a,          # cast, then bfloat16 op
        lambda a, b: torch.clone(a),                          # a loaded value stored
        lambda a, b: (a.float() * b).sum(1).to(torch.bfloat16),  # a reduction's value
    ]
    monkeypatch.setenv("LOOM_COMPILE_LOG", "code")
    with caplog.at_level(logging.INFO, logger="torch_loom.compiler"):
        for f in cases:
            out, c = _compiled_call(f, x, x32)
            assert c["kernel_launches"] >= 1
            assert out.dtype == torch.bfloat16
            assert torch.equal(out.cpu().view(torch.int16), f(x, x32).cpu().view(torch.int16))
            torch._dynamo.reset()
    stores = [line for line in caplog.text.splitlines() if "] = loom_" in line]
    assert stores and all("loom_cg_bf16_bits(" in line for line in stores)

    def into(a, b):  # a float32 value written into a bfloat16 input
        a.copy_(b * 3)
        return a

    expect = into(x.clone(), x32)
    got = torch.compile(into, backend="loom")(x.clone(), x32)
    assert torch.equal(got.cpu().view(torch.int16), expect.cpu().view(torch.int16))


# ---- GEMM epilogues -----------------------------------------------------------------

def _linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def test_linear_bias_gelu_is_one_gemm_launch_with_a_fused_epilogue():
    torch.manual_seed(4)
    x, w, b = (torch.randn(37, 29, device="loom"), torch.randn(45, 29, device="loom"),
               torch.randn(45, device="loom"))
    out, c = _compiled_call(_linear_gelu, x, w, b)
    # no generated kernel: the bias (addmm's) and the GELU run in the GEMM's
    # output tiles, one library call beside the weight's transposed view
    assert c["kernel_launches"] == 0 and c["epilogue_calls"] == 1
    assert c["library_calls"] == 2
    assert torch.equal(out.cpu(), _linear_gelu(x, w, b).cpu())


def _mlp_block(x, w1, b1, w2, r):
    h = F.gelu(x @ w1.t() + b1, approximate="tanh")  # (a batch of rows: split views)
    return torch.sigmoid(F.silu(h @ w2.t()) + r).to(torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_epilogues_take_bias_residual_activations_and_a_cast(dtype):
    torch.manual_seed(5)
    x = torch.randn(3, 7, 24, device="loom", dtype=dtype)
    w1, b1 = torch.randn(40, 24, device="loom", dtype=dtype), torch.randn(40, device="loom", dtype=dtype)
    w2, r = torch.randn(16, 40, device="loom", dtype=dtype), torch.randn(7, 16, device="loom", dtype=dtype)
    out, c = _compiled_call(_mlp_block, x, w1, b1, w2, r)
    assert c["epilogue_calls"] == 2 and c["kernel_launches"] == 0
    assert torch.equal(out.cpu(), _mlp_block(x, w1, b1, w2, r).cpu())


def test_epilogues_can_be_switched_off(monkeypatch):
    """epilogue.ENABLED = False (for measuring the fusion's worth): the
    GELU runs as a generated kernel after the library's addmm."""
    from torch_loom.compiler import epilogue

    monkeypatch.setattr(epilogue, "ENABLED", False)
    torch.manual_seed(4)
    x, w, b = (torch.randn(37, 29, device="loom"), torch.randn(45, 29, device="loom"),
               torch.randn(45, device="loom"))
    out, c = _compiled_call(_linear_gelu, x, w, b)
    assert c["epilogue_calls"] == 0 and c["kernel_launches"] == 1
    assert torch.equal(out.cpu(), _linear_gelu(x, w, b).cpu())


def _train_step_compiled_and_eager(model, x):
    """One squared-sum backward through `model` compiled with backend='loom'
    and through an eager twin: (out, want, twin, the compiler's counters)."""
    twin = copy.deepcopy(model)
    compiler.reset_counters()
    out = torch.compile(model, backend="loom")(x)
    out.square().sum().backward()
    want = twin(x)
    want.square().sum().backward()
    return out, want, twin, compiler.counters()


def test_training_epilogues_keep_the_product_for_the_backward():
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 5)).to("loom")
    x = torch.randn(2, 8, 12, device="loom")
    out, want, twin, c = _train_step_compiled_and_eager(model, x)
    # forward: linear + GELU (its input saved); backward: the GELU's
    # backward in the GEMM of the gradient
    assert c["epilogue_ops"] == [["gelu"], ["gelu_backward"]]
    assert torch.equal(out.detach().cpu(), want.detach().cpu())
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_relu_gradient_runs_in_the_gemm_of_the_gradient():
    """threshold_backward(mm(dy, w), y, 0), a ReLU's gradient at the
    product computing it, is a step of that GEMM's epilogue: the masked
    gradient written once, eager's bits."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 24), torch.nn.ReLU(),
                                torch.nn.Linear(24, 5)).to("loom")
    x = torch.randn(40, 12, device="loom")
    out, want, twin, c = _train_step_compiled_and_eager(model, x)
    assert sorted(c["epilogue_ops"]) == [["relu"], ["relu"], ["threshold_backward"],
                                         ["threshold_backward"]]
    assert torch.equal(out.detach().cpu(), want.detach().cpu())
    for p, q in zip(model.parameters(), twin.parameters()):
        if p.dim() == 2:  # the products of the same masked gradients
            assert torch.equal(p.grad.cpu(), q.grad.cpu())
        else:  # a bias's column sums, in another order than the library's
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6)


# ---- reductions ----------------------------------------------------------------

def _softmax_like(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def test_softmax_pattern_fuses_into_one_kernel():
    x = torch.randn(20, 37, device="loom")
    out, c = _compiled_call(_softmax_like, x)
    assert c["kernel_launches"] == 1 and c["library_calls"] == 0
    torch.testing.assert_close(out.cpu(), torch.softmax(x.cpu(), -1), rtol=1e-6, atol=1e-7)


def _reductions(x):
    var, mean = torch.var_mean(x, dim=(0, 2), correction=1)
    return (x.sum(-1), x.mean(dim=(1, 2), keepdim=True), x.amax(0), x.amin(dim=(0, 1)),
            var, mean, torch.var(x * 2 + 1, dim=1, keepdim=True), (x * x).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_over_inner_and_outer_dims(dtype):
    torch.manual_seed(3)
    x = (torch.randn(6, 10, 12, device="loom") + 0.5).to(dtype)
    out, c = _compiled_call(_reductions, x)
    assert c["library_calls"] == 0
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for got, want in zip(out, _reductions(x)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want.cpu(), **tol)


def _small_independent(x1, x2, x3, big):
    return x1 + 1, x2 * 3, torch.exp(x3), big + 1


def test_small_independent_pointwise_ops_share_one_launch():
    """Small pointwise ops that read no kernel's result join the latest
    small kernel of their dims (a batch norm's running statistics, step
    counters, the updates of an optimizer's biases): one launch, not one
    each; a large one keeps its own."""
    xs = [torch.randn(32, device="loom") for _ in range(3)]
    big = torch.randn(100000, device="loom")
    out, c = _compiled_call(_small_independent, *xs, big)
    assert c["kernel_launches"] == 2
    for a, b in zip(out, _small_independent(*xs, big)):
        assert torch.equal(a.cpu(), b.cpu())


def _running_stats(rm, rv, m, v, y):
    out = y * 2  # reads y before the in-place add below writes it
    rm.mul_(0.9).add_(m, alpha=0.1)
    rv.mul_(0.9).add_(v, alpha=0.1)
    y.add_(1)
    return out


def test_small_in_place_updates_share_a_launch_with_eagers_order():
    torch.manual_seed(3)
    args = [torch.randn(48, device="loom") for _ in range(5)]
    mine = [a.clone() for a in args]
    compiler.reset_counters()
    torch.compile(_running_stats, backend="loom")(*[a.clone() for a in args])  # compiles
    c0 = compiler.counters()["kernel_launches"]
    out = torch.compile(_running_stats, backend="loom")(*mine)
    assert compiler.counters()["kernel_launches"] - c0 == 1
    expected = _running_stats(*args)
    assert torch.equal(out.cpu(), expected.cpu())
    for a, b in zip(mine, args):
        assert torch.equal(a.cpu(), b.cpu())


def test_zero_dim_kernels_compile():
    out, c = _compiled_call(lambda a, b: (a * 2 + b, (a + 1).sum()), torch.tensor(3.0, device="loom"),
                            torch.tensor(0.5, device="loom"))
    assert c["kernel_launches"] >= 1
    assert out[0].item() == 6.5 and out[1].item() == 4.0


def test_column_sums_read_rows_along_memory_with_eagers_bits():
    """A sum over the rows of a row-major tensor (a bias gradient) runs in
    blocks of outputs that read each row along memory, each output taking
    its elements in index order as the library's column sums do: eager's
    bits, in blocks narrower and wider than a chunk, and through outputs
    that are not adjacent in memory."""
    torch.manual_seed(8)
    f = lambda x: (torch.relu(x) * 2 - 1).sum(0)  # noqa: E731
    for x in (torch.randn(300, 70, device="loom"), torch.randn(64, 600, device="loom"),
              torch.randn(300, 140, device="loom")[:, ::2]):
        torch._dynamo.reset()
        column, c = _compiled_call(f, x)
        assert c["kernel_launches"] == 1
        assert torch.equal(column.cpu(), f(x).cpu())
        torch._dynamo.reset()
        row, _ = _compiled_call(f, x.t().contiguous().t())  # each column contiguous
        torch.testing.assert_close(column.cpu(), row.cpu(), rtol=1e-6, atol=1e-5)


def test_column_sums_launch_chunks_of_whole_row_runs(monkeypatch, caplog):
    """A column-form reduction's launch covers at least 128 outputs per
    chunk (a 512-byte run of each float32 row), where a row-form
    reduction of the same size takes DEFAULT_GRAIN elements per chunk."""
    monkeypatch.setenv("LOOM_COMPILE_LOG", "code")
    f = lambda x: torch.relu(x).sum(0)  # noqa: E731
    with caplog.at_level(logging.INFO, logger="torch_loom.compiler"):
        torch.compile(f, backend="loom")(torch.randn(256, 1024, device="loom"))
        torch._dynamo.reset()
        torch.compile(f, backend="loom")(torch.randn(1024, 256, device="loom").t())
    launches = [line for line in caplog.text.splitlines() if "launch(" in line]
    assert len(launches) == 2
    assert "range=1024, grain=128)" in launches[0]  # columns: rows 4 KiB apart
    assert "range=1024, grain=64)" in launches[1]   # rows: 16384 // 256 per chunk


def _space_of(caplog):
    """The iteration spaces the fusion log reports for the compiled kernels."""
    return [line.split("space ")[1].split(":")[0] for line in caplog.text.splitlines()
            if ": " in line and " ops, " in line and "space " in line]


def _cl(*shape):
    return torch.randn(*shape, device="loom").contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("layout", ["channels_last", "per_channel", "mixed", "permuted_3d"])
def test_pointwise_kernels_run_in_their_outputs_memory_order(layout, monkeypatch, caplog):
    """A pointwise kernel's dims follow the memory order of what it stores
    (largest stride outermost): over channels-last tensors it runs along
    the channels (one flat run), with eager's bits and strides."""
    monkeypatch.setenv("LOOM_COMPILE_LOG", "fusion")
    torch.manual_seed(3)
    if layout == "permuted_3d":
        x = torch.randn(5, 7, 6, device="loom").permute(2, 0, 1)  # (6, 5, 7), strides (1, 42, 6)
        y = torch.randn(5, 7, 6, device="loom").permute(2, 0, 1)
        space = "[5, 7, 6]"
    else:
        x = _cl(2, 6, 5, 7)
        y = {"channels_last": _cl(2, 6, 5, 7), "per_channel": torch.randn(6, 1, 1, device="loom"),
             "mixed": _cl(2, 6, 5, 7).contiguous()}[layout]
        space = "[2, 5, 7, 6]"

    def f(x, y):
        return torch.relu(x * y + 1.5) - torch.sigmoid(y)

    want = f(x, y)
    with caplog.at_level(logging.INFO, logger="torch_loom.compiler"):
        out, c = _compiled_call(f, x, y)
    assert c["kernel_launches"] == 1
    assert _space_of(caplog) == [space]
    assert out.stride() == want.stride()
    assert torch.equal(out.cpu(), want.cpu())


# ---- coverage, in-place updates, fallbacks ------------------------------------------

def test_op_the_lowering_lacks_runs_as_a_library_op():
    def f(x):
        return torch.cumsum(torch.relu(x) * 2, dim=0) + 1  # cumsum: no lowering

    x = torch.randn(9, 7, device="loom")
    out, c = _compiled_call(f, x)
    assert c["library_calls"] == 1 and c["kernel_launches"] == 2
    torch.testing.assert_close(out.cpu(), f(x).cpu())


def test_graph_constants_and_empty_tensors():
    scale = torch.randn(5, 6, device="loom")

    def f(x):
        return (x.t() + 1) * torch.tensor(3.0) + scale.t(), (x * 2).sum(0)

    x = torch.randn(5, 6, device="loom")
    out, c = _compiled_call(f, x)
    assert c["library_calls"] == 0
    for got, want in zip(out, f(x)):
        assert torch.equal(got.cpu(), want.cpu()) and got.stride() == want.stride()
    g = lambda x: ((x * 2).sum(0), torch.exp(x.t()) + 1)  # noqa: E731
    empty = torch.randn(0, 6, device="loom")  # no elements: library ops
    for got, want in zip(torch.compile(g, backend="loom")(empty), g(empty)):
        assert got.shape == want.shape and torch.equal(got.cpu(), want.cpu())


def test_in_place_updates_write_inputs_after_every_read():
    def f(x, y):
        z = x.t() * 2  # reads x transposed: must see x before the update
        x.add_(y).mul_(0.5)
        return z

    x, y = torch.randn(8, 8, device="loom"), torch.randn(8, 8, device="loom")
    want_x, want_z = x.clone(), None
    want_z = f(want_x, y)
    compiled = torch.compile(f, backend="loom")
    got_z = compiled(x, y)
    assert torch.equal(got_z.cpu(), want_z.cpu())
    assert torch.equal(x.cpu(), want_x.cpu())


def test_without_a_c_compiler_graphs_run_on_library_kernels(monkeypatch):
    monkeypatch.setattr(jit, "available", lambda: False)
    compiler.reset_counters()
    x, y = torch.randn(5, 6, device="loom"), torch.randn(5, 6, device="loom")
    out = torch.compile(_ten_ops, backend="loom")(x, y)
    c = compiler.counters()
    assert c["graphs_fallen_back"] == 1 and c["kernels_generated"] == 0
    torch.testing.assert_close(out.cpu(), _ten_ops(x, y).cpu())


def test_changing_sizes_compile_once_per_shape_kind():
    """A graph with symbolic sizes (the second size Dynamo sees) gets a
    program per size, all on one C module: its kernels read their sizes."""
    compiler.reset_counters()
    f = torch.compile(lambda a: torch.tanh(a * 2).sum(-1), backend="loom")
    for n in (5, 7, 9, 12):
        a = torch.randn(4, n, device="loom")
        torch.testing.assert_close(f(a).cpu(), torch.tanh(a * 2).sum(-1).cpu())
    c = compiler.counters()
    assert c["graphs_compiled"] == 2 and c["graphs_dynamic"] == 1 and c["graphs_fallen_back"] == 0
    assert c["specializations"] == 3
    # the static graph's module serves the dynamic one's sizes
    assert c["modules_compiled"] + c["modules_cached"] == 1 and c["modules_resident"] == 3


def test_growing_sequence_lengths_compile_once_per_shape_kind():
    torch.manual_seed(7)
    model = GPT().to("loom")
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="loom", dynamic=True)
    compiler.reset_counters()
    for t in (4, 5, 9):
        idx = torch.randint(0, 32, (2, t), device="loom")
        out, want = compiled(idx), twin(idx)
        torch.testing.assert_close(out.cpu(), want.cpu(), rtol=1e-5, atol=1e-5)
        out.square().mean().backward()
        want.square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5)
    c = compiler.counters()
    # a forward and a backward graph with symbolic lengths, one C module each
    assert c["graphs_dynamic"] == 2 and c["graphs_compiled"] == 2 and c["graphs_fallen_back"] == 0
    assert c["specializations"] == 6
    assert c["compiler_invocations"] <= 2 and c["modules_compiled"] + c["modules_cached"] <= 2


def test_compile_log_shows_fusion_code_and_cache(monkeypatch, caplog):
    monkeypatch.setenv("LOOM_COMPILE_LOG", "fusion,code,cache")
    x = torch.randn(4, 9, device="loom")
    with caplog.at_level(logging.INFO, logger="torch_loom.compiler"):
        torch.compile(_softmax_like, backend="loom")(x)
    text = caplog.text
    assert "fusion]" in text and "reduce_max" in text and "reduction over [9]" in text
    assert "code]" in text and "loom_kernel_args" in text and "loom_expf_arith" in text
    assert "cache]" in text and "module" in text


def test_counters_and_a_second_compile_in_process():
    compiler.reset_counters()
    x, y = torch.randn(3, 4, device="loom"), torch.randn(3, 4, device="loom")
    torch.compile(_ten_ops, backend="loom")(x, y)
    first = compiler.counters()
    assert first["graphs_compiled"] == 1 and first["kernels_generated"] == 1
    assert first["fused_ops"] == [11] and first["compile_seconds"] > 0
    assert [(p["kernels"], p["launches"], p["library_calls"], p["calls"])
            for p in first["programs"]][-1] == (1, 1, 0, 1)
    torch._dynamo.reset()
    torch.compile(_ten_ops, backend="loom")(x, y)  # same graph: the same module, no compiler
    second = compiler.counters()
    assert second["modules_resident"] == first["modules_resident"] + 1
    assert second["compiler_invocations"] == first["compiler_invocations"]


def _row_work(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    var, mean = torch.var_mean(x, dim=0)
    return e / e.sum(-1, keepdim=True), var, mean, torch.tanh(x * 3).sum(), (x * 2 + 1).exp()


def _row_digests():
    import hashlib
    torch.manual_seed(5)
    x = torch.randn(300, 257, device="loom")
    outs = torch.compile(_row_work, backend="loom")(x)
    return [hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()[:16] for t in outs]


def test_results_do_not_depend_on_the_thread_count():
    import inspect
    code = "import torch\n" + inspect.getsource(_row_work) + inspect.getsource(_row_digests)
    one = run_python(code + "print('DIGESTS', _row_digests())\n",
                     env={"LOOM_NUM_THREADS": "1"}).stdout.split("DIGESTS")[1].strip()
    assert one == str(_row_digests())


def test_registered_lazily_and_cached_across_processes(tmp_path):
    code = """
        import sys, torch
        assert "torch._dynamo" not in sys.modules, "import torch imported Dynamo"
        from torch_loom import compiler
        f = torch.compile(lambda a: torch.tanh(a * 3) + a.exp(), backend="loom")
        a = torch.linspace(-2, 2, 50, device="loom")
        assert torch.equal(f(a).cpu(), (torch.tanh(a * 3) + a.exp()).cpu())
        c = compiler.counters()
        print("RESULT", c["compiler_invocations"], c["modules_compiled"], c["modules_cached"])
    """
    env = {"LOOM_CACHE_DIR": str(tmp_path / "cache"), "LOOM_FALLBACK": "error"}
    runs = [run_python(code, env=env).stdout.split("RESULT")[1].split() for _ in range(2)]
    assert runs[0][1] == "1"  # compiled (and the compiler asked its version)
    assert runs[1] == ["0", "0", "1"]  # the second process runs no compiler at all


# ---- training steps ------------------------------------------------------------------

def _train(model, batch, make_opt, compiled, steps=3, compile_step=False):
    """Losses and final parameters (and buffers) of `steps` training steps
    on loom, on the same batch (so that the loss falls)."""
    model = copy.deepcopy(model).to("loom")
    opt = make_opt(model.parameters())
    run = torch.compile(model, backend="loom") if compiled else model
    step = torch.compile(opt.step, backend="loom") if compile_step else opt.step
    x, y = batch[0].to("loom"), batch[1].to("loom")
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        out = run(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        step()
        losses.append(loss.item())
    state = {n: t.detach().cpu() for n, t in model.state_dict().items()}
    return losses, state


def _check_training(model, batch, make_opt, compile_step=False, rtol=1e-5, atol=1e-6):
    eager_losses, eager_state = _train(model, batch, make_opt, False)
    compiler.reset_counters()
    losses, state = _train(model, batch, make_opt, True, compile_step=compile_step)
    c = compiler.counters()
    assert c["graphs_compiled"] >= 2 and c["kernel_launches"] > 0
    assert c["graphs_fallen_back"] == 0  # every graph's C compiled
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=rtol, atol=atol)
    assert losses[-1] < losses[0]
    for name, t in state.items():
        torch.testing.assert_close(t, eager_state[name], rtol=rtol, atol=atol, msg=name)
    return c


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def test_mlp_training_matches_eager():
    torch.manual_seed(0)
    _check_training(MLP(), (torch.randn(16, 12), torch.randint(0, 5, (16,))), _sgd)


def test_cnn_training_with_batch_norm_and_pooling_matches_eager():
    torch.manual_seed(0)
    c = _check_training(CNN(), (torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))), _sgd)
    # batch norm runs on the library's kernels (running statistics included)
    assert c["library_calls"] > 0


def test_gpt_training_with_sdpa_layer_norm_gelu_and_compiled_adamw_matches_eager():
    torch.manual_seed(0)
    batch = (torch.randint(0, 32, (2, 12)), torch.randint(0, 32, (2, 12)))
    # eps: the key bias's gradient is rounding noise (softmax ignores a
    # shift shared by all keys), which Adam's default eps would blow up.
    adamw = lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-4)  # noqa: E731
    c = _check_training(GPT(), batch, adamw, compile_step=True, rtol=1e-4, atol=1e-5)
    # AdamW's update of each parameter (and its two moments) fuses, and the
    # updates of the (small) parameters of one shape share one kernel
    shapes = {tuple(s for s in p.shape if s != 1) for p in GPT().parameters()}
    step = [p for p in c["programs"] if p["tag"].startswith("inference")][-1]
    assert step["kernels"] == step["launches"] == len(shapes)
    # (an update of a parameter and its two moments is at least ten ops)
    assert max(c["fused_ops"]) >= 10 * sum(p.shape == (16,) for p in GPT().parameters())
