"""torch_loom.tile: kernels in Triton's language, compiled through loom's
JIT and run in the interpreter; the shipped examples in eager, under
torch.compile (Inductor and backend="loom"), with autograd and opcheck.
Small shapes: compiles land in the JIT's disk cache."""

import pytest
import torch
import torch.nn.functional as F

import torch_loom  # noqa: F401
import torch_loom.tile as tl
from torch_loom.tile.examples import flash_attention as fa_ex
from torch_loom.tile.examples import layer_norm as ln_ex
from torch_loom.tile.examples import matmul as mm_ex
from torch_loom.tile.examples import softmax as sm_ex
from torch_loom.tile.examples import vector_add as add_ex


@pytest.fixture(params=["compiled", "interpreted"])
def mode(request, monkeypatch):
    if request.param == "interpreted":
        monkeypatch.setenv("LOOM_TILE_INTERPRET", "1")
    else:
        monkeypatch.delenv("LOOM_TILE_INTERPRET", raising=False)
    return request.param


def loom(t):
    return t.to("loom")


def test_vector_add(mode):
    x, y = torch.randn(3000), torch.randn(3000)
    out = add_ex.add(loom(x), loom(y))
    torch.testing.assert_close(out.cpu(), x + y, rtol=0, atol=0)


def test_softmax(mode):
    x = torch.randn(9, 100) * 3
    torch.testing.assert_close(sm_ex.softmax(loom(x)).cpu(), torch.softmax(x, -1))
    h = x.to(torch.float16)
    torch.testing.assert_close(sm_ex.softmax(loom(h)).cpu(), torch.softmax(h.float(), -1).half(),
                               atol=1e-3, rtol=1e-3)
    x[1, 5] = float("nan")  # a NaN spreads over its row; a row of -inf is 0/0
    x[2] = float("-inf")
    torch.testing.assert_close(sm_ex.softmax(loom(x)).cpu(), torch.softmax(x, -1), equal_nan=True)


def test_layer_norm_forward_and_autograd(mode):
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    gy = torch.randn(6, 40)
    xl, wl, bl = (loom(t).requires_grad_() for t in (x, w, b))
    y = ln_ex.layer_norm(xl, wl, bl, 1e-5)
    (y * loom(gy)).sum().backward()
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    ref = F.layer_norm(xc, (40,), wc, bc, 1e-5)
    (ref * gy).sum().backward()
    torch.testing.assert_close(y.detach().cpu(), ref.detach())
    for got, want in ((xl.grad, xc.grad), (wl.grad, wc.grad), (bl.grad, bc.grad)):
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("activation", ["none", "leaky_relu"])
def test_matmul_epilogue(mode, activation):
    a, b = torch.randn(70, 50), torch.randn(50, 90)
    ref = a.double() @ b.double()
    if activation == "leaky_relu":
        ref = F.leaky_relu(ref, 0.01)
    torch.testing.assert_close(mm_ex.matmul(loom(a), loom(b), activation).cpu().double(), ref,
                               atol=1e-4, rtol=1e-4)


def test_matmul_float16():
    a, b = torch.randn(64, 96).half(), torch.randn(96, 33).half()
    out = mm_ex.matmul(loom(a), loom(b), "relu").cpu()
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, torch.relu(a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)


def test_matmul_transposed_operand_strides():
    a, b = torch.randn(40, 30), torch.randn(50, 30)
    out = mm_ex.matmul(loom(a), loom(b).t(), "none").cpu()
    torch.testing.assert_close(out, a @ b.t(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [70, 300])  # the small and the large blocks, a partial last block
def test_flash_attention(mode, causal, n):
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    out = fa_ex.attention(loom(q), loom(k), loom(v), causal).cpu()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["inductor", "loom"])
def test_examples_are_one_node_under_compile(backend):
    torch._dynamo.reset()
    seen = []

    def recording(gm, inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        if backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, inputs)
        from torch_loom.compiler.backend import loom_backend
        return loom_backend(gm, inputs)

    def f(x, a, b, w, bias, q):
        s = sm_ex.softmax(x * 2)
        m = mm_ex.matmul(a, b, "relu")
        n = ln_ex.layer_norm(x, w, bias)
        return s + 1, m, n, add_ex.add(x, x), fa_ex.attention(q, q, q)

    x, a, b, w, bias = torch.randn(5, 24), torch.randn(20, 16), torch.randn(16, 24), torch.randn(24), torch.randn(24)
    q = torch.randn(1, 1, 9, 16)
    got = torch.compile(f, backend=recording, fullgraph=True)(*map(loom, (x, a, b, w, bias, q)))
    want = (torch.softmax(x * 2, -1) + 1, torch.relu(a @ b), F.layer_norm(x, (24,), w, bias), x + x,
            F.scaled_dot_product_attention(q, q, q))
    for g_, w_ in zip(got, want):
        torch.testing.assert_close(g_.cpu(), w_, atol=1e-4, rtol=1e-4)
    targets = [t for graph in seen for t in graph]
    for op in (torch.ops.loom_tile.softmax.default, torch.ops.loom_tile.matmul.default,
               torch.ops.loom_tile.layer_norm_fwd.default, torch.ops.loom_tile.add.default,
               torch.ops.loom_tile.attention.default):
        assert targets.count(op) == 1, targets


def test_layer_norm_autograd_under_compile():
    torch._dynamo.reset()
    x, w, b = torch.randn(4, 16), torch.randn(16), torch.randn(16)
    xl, wl, bl = (loom(t).requires_grad_() for t in (x, w, b))
    f = torch.compile(lambda x, w, b: (ln_ex.layer_norm(x, w, b) ** 2).sum(), backend="loom")
    f(xl, wl, bl).backward()
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    (F.layer_norm(xc, (16,), wc, bc) ** 2).sum().backward()
    for got, want in ((xl.grad, xc.grad), (wl.grad, wc.grad), (bl.grad, bc.grad)):
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


def test_opcheck_examples():
    x, y = loom(torch.randn(5, 7)), loom(torch.randn(5, 7))
    w, b = loom(torch.randn(7)), loom(torch.randn(7))
    checks = [(torch.ops.loom_tile.add.default, (x, y)),
              (torch.ops.loom_tile.softmax.default, (x,)),
              (torch.ops.loom_tile.layer_norm_fwd.default, (x.requires_grad_(), w.requires_grad_(),
                                                            b.requires_grad_(), 1e-5)),
              (torch.ops.loom_tile.matmul.default, (loom(torch.randn(6, 5)), loom(torch.randn(5, 4)), "gelu")),
              (torch.ops.loom_tile.attention.default, tuple(loom(torch.randn(1, 2, 5, 16)) for _ in range(3)))]
    # opcheck's autograd_registration check supports only CPU/CUDA/XPU
    # tensors (PyTorch 2.13: "NYI devices other than CPU/CUDA/XPU"); the
    # others run: schema, fake tensors, AOT dispatch with dynamic shapes.
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args in checks:
        torch.library.opcheck(op, args, test_utils=utils)


def test_kernel_features(mode):
    """2-d blocks with broadcasting, a loop carrying a block and a pointer,
    a runtime if, reductions along both axes, argmax, where, casts,
    static_range and a called @jit helper."""

    @tl.jit
    def twice(v):
        return v * 2

    @tl.jit
    def k(X, Out, Idx, Rows, M, N: tl.constexpr, BM: tl.constexpr, flag):
        pid = tl.program_id(0)
        rows = tl.arange(0, BM)
        cols = tl.arange(0, N)
        ptrs = X + rows[:, None] * N + cols[None, :]
        acc = tl.zeros((BM, N), dtype=tl.float32)
        for r in range(0, M, BM):
            mask = (r + rows)[:, None] < M
            acc += tl.load(ptrs, mask=mask, other=0.0)
            ptrs += BM * N
        col_sum = tl.sum(acc, axis=0)
        if flag > 0:
            col_sum = twice(col_sum)
        for i in tl.static_range(2):
            col_sum = col_sum + i
        tl.store(Out + pid * N + cols, col_sum)
        tl.store(Idx + pid, tl.argmax(col_sum, axis=0))
        row_max = tl.max(acc, axis=1)
        tl.store(Rows + rows, tl.where(row_max > 0, row_max, -row_max).to(tl.float16))

    M, N, BM = 13, 16, 4
    x = torch.randn(M, N)
    out, idx = torch.empty(1, N), torch.empty(1, dtype=torch.int32)
    rows = torch.empty(BM, dtype=torch.float16)
    out_l, idx_l, rows_l = loom(out), loom(idx), loom(rows)
    k[(1,)](loom(x), out_l, idx_l, rows_l, M, N=N, BM=BM, flag=3)
    want = x.sum(0) * 2 + 1
    torch.testing.assert_close(out_l.cpu()[0], want, atol=1e-5, rtol=1e-5)
    assert idx_l.cpu().item() == int(want.argmax())
    blocks = torch.zeros(BM, N)
    for r in range(0, M, BM):
        part = x[r:r + BM]
        blocks[:part.shape[0]] += part
    torch.testing.assert_close(rows_l.cpu(), blocks.max(1).values.abs().half())


def test_specialisation_and_cache():
    @tl.jit
    def scale(X, Y, n, s, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(Y + offs, tl.load(X + offs, mask=m) * s, mask=m)

    x = loom(torch.arange(10.0))
    y = torch.empty_like(x)
    for s in (2.0, 3.0):
        scale[(1,)](x, y, 10, s, BLOCK=16)
        torch.testing.assert_close(y.cpu(), torch.arange(10.0) * s)
    assert len(scale._cache) == 1  # a float is a run-time argument
    scale[(1,)](x[1:], y[1:], 9, 2.0, BLOCK=16)  # not 16-byte aligned: its own specialisation
    assert len(scale._cache) == 2
    xh = x.half()
    yh = torch.empty_like(xh)
    scale[lambda meta: (tl.cdiv(10, meta["BLOCK"]),)](xh, yh, 10, 0.5, BLOCK=4)
    torch.testing.assert_close(yh.cpu(), (torch.arange(10.0) * 0.5).half())
    assert "(float)" in scale.source(x, y, 10, 2.0, BLOCK=16)


def test_trace_errors_name_the_line():
    @tl.jit
    def bad_shapes(X, BLOCK: tl.constexpr):
        a = tl.arange(0, BLOCK)
        b = tl.arange(0, 2 * BLOCK)
        tl.store(X + a, a + b)  # the line the error names

    @tl.jit
    def bad_construct(X):
        while True:
            pass

    x = loom(torch.zeros(8))
    with pytest.raises(tl.TileCompileError, match=r"test_tile\.py:\d+: .*\n +tl\.store\(X \+ a, a \+ b\)"):
        bad_shapes[(1,)](x, BLOCK=4)
    with pytest.raises(tl.TileCompileError, match="while loops are not supported"):
        bad_construct[(1,)](x)


def test_interpreter_catches_bad_memory(monkeypatch, capsys):
    monkeypatch.setenv("LOOM_TILE_INTERPRET", "1")

    @tl.jit
    def oob(X, Y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(X + offs)  # reads past the end
        tl.store(Y + offs, v)

    @tl.jit
    def undefined_lanes(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(X + offs, mask=offs < n)
        print("program", tl.program_id(0), "loaded", v.shape)
        tl.store(Y + offs, v)

    x = loom(torch.ones(6))
    with pytest.raises(IndexError, match=r"X at element offset 6 .*test_tile\.py:\d+: v = tl\.load\(X \+ offs\)"):
        oob[(1,)](x, loom(torch.empty(8)), BLOCK=8)
    y = loom(torch.zeros(8))
    undefined_lanes[(1,)](loom(torch.ones(8)), y, 5, BLOCK=8)
    out = y.cpu()
    assert torch.equal(out[:5], torch.ones(5)) and out[5:].isnan().all()
    assert "program" in capsys.readouterr().out


def test_bad_arguments():
    from torch_loom.tile.examples.vector_add import add_kernel
    with pytest.raises(TypeError, match="missing argument 'n_elements'"):
        add_kernel[(1,)](loom(torch.ones(4)), loom(torch.ones(4)), loom(torch.ones(4)), BLOCK_SIZE=4)
    with pytest.raises(RuntimeError, match="expected a tensor on loom"):
        add_kernel[(1,)](torch.ones(4), loom(torch.ones(4)), loom(torch.ones(4)), 4, BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="loom_tile::matmul: shapes"):
        mm_ex.matmul(loom(torch.ones(2, 3)), loom(torch.ones(2, 3)))


_THREADS_CODE = """
import hashlib, torch, torch_loom
from torch_loom.tile.examples import flash_attention, layer_norm, matmul, softmax
g = torch.Generator().manual_seed(0)
x = torch.randn(67, 300, generator=g).to("loom")
w, b = (torch.randn(300, generator=g).to("loom") for _ in range(2))
q, k, v = (torch.randn(1, 2, 300, 16, generator=g).to("loom") for _ in range(3))
outs = [softmax.softmax(x), layer_norm.layer_norm(x, w, w), layer_norm.layer_norm(x, w, b),
        matmul.matmul(x, x.t(), "gelu"), flash_attention.attention(q, k, v, True)]
digest = hashlib.sha256(b"".join(o.cpu().numpy().tobytes() for o in outs)).hexdigest()
"""


def test_results_do_not_depend_on_the_thread_count():
    """Programs are independent and chunked by a fixed split: one worker
    gives the bytes of several."""
    from conftest import run_python
    here = {}
    exec(_THREADS_CODE, here)
    threads = torch.loom.get_device_properties(0).num_threads
    other = run_python(_THREADS_CODE + "print(digest)\n",
                       env={"LOOM_NUM_THREADS": "1" if threads > 1 else "3"}).stdout.strip()
    assert other == here["digest"]


def test_generated_c_does_not_depend_on_string_hashing():
    """A kernel's C (its name, so the JIT's disk cache key) is the same in
    every process: the values a loop carries (flash attention's m, l and
    acc) are declared in source order, not in the order of a set of names."""
    from conftest import run_python
    code = """
import hashlib, torch, torch_loom
from torch_loom.tile.examples import flash_attention as fa
q = torch.randn(1, 1, 64, 32, device="loom")
fa.attention(q, q, q, True)
src = next(iter(fa.attention_fwd_kernel._cache.values())).source
print("SRC", hashlib.sha256(src.encode()).hexdigest())
"""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:  # two string-hash seeds that ordered a set apart
        runs = pool.map(lambda seed: run_python(code, env={"PYTHONHASHSEED": seed}), ("0", "1"))
        got = {r.stdout.split("SRC")[-1].strip() for r in runs}
    assert len(got) == 1, got


def test_math_and_integer_semantics(mode):
    @tl.jit
    def k(X, Y, I, OutF, OutI, OutB, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(X + offs, mask=m, other=1.0)
        y = tl.load(Y + offs, mask=m, other=1.0)
        i = tl.load(I + offs, mask=m, other=1)
        res = (tl.exp(x), tl.log(tl.abs(x) + 1), tl.sqrt(tl.abs(x)), tl.rsqrt(tl.abs(y) + 1),
               tl.sigmoid(x), tl.maximum(x, y), tl.minimum(x, y), tl.fma(x, y, 1.0),
               tl.where(x > y, x, y * 2))
        for j in tl.static_range(9):
            tl.store(OutF + j * BLOCK + offs, res[j], mask=m)
        ires = (i // 3, i % 3, tl.cdiv(i, 4), i * 7 - 2, (i << 1) | 1)
        for j in tl.static_range(5):
            tl.store(OutI + j * BLOCK + offs, ires[j], mask=m)
        tl.store(OutB + offs, (x * 2).to(tl.bfloat16), mask=m)

    n, B = 20, 32
    x, y = torch.randn(n), torch.randn(n)
    i = torch.randint(-20, 20, (n,), dtype=torch.int32)
    of, oi = loom(torch.zeros(9, B)), loom(torch.zeros(5, B, dtype=torch.int32))
    ob = loom(torch.zeros(B, dtype=torch.bfloat16))
    k[(1,)](loom(x), loom(y), loom(i), of, oi, ob, n, BLOCK=B)
    want_f = [x.exp(), (x.abs() + 1).log(), x.abs().sqrt(), (y.abs() + 1).rsqrt(), x.sigmoid(),
              torch.maximum(x, y), torch.minimum(x, y), x * y + 1, torch.where(x > y, x, y * 2)]
    for got, want in zip(of.cpu(), want_f):
        torch.testing.assert_close(got[:n], want, atol=1e-6, rtol=1e-5)
    trunc = torch.div(i, 3, rounding_mode="trunc")
    want_i = [trunc, i - 3 * trunc, torch.div(i + 3, 4, rounding_mode="trunc"), i * 7 - 2, (i << 1) | 1]
    for got, want in zip(oi.cpu(), want_i):
        assert torch.equal(got[:n], want.int())
    assert torch.equal(ob.cpu()[:n], (x * 2).bfloat16())


def test_full_rows_softmax_and_layer_norm(mode):
    """Rows exactly one block long: the masks hold everywhere, so the
    compiled kernels read and write without them."""
    x = torch.randn(7, 128) * 3
    torch.testing.assert_close(sm_ex.softmax(loom(x)).cpu(), torch.softmax(x, -1))
    x, w, b = torch.randn(5, 64), torch.randn(64), torch.randn(64)
    torch.testing.assert_close(ln_ex.layer_norm(loom(x), loom(w), loom(b)).cpu(),
                               F.layer_norm(x, (64,), w, b), atol=1e-5, rtol=1e-5)


def test_where_on_a_load_mask(mode):
    """tl.where(mask, a, b) on the mask of a load: where the masks hold over
    the whole block the compiled kernel takes a; elsewhere the lanes left
    out take b, and a where() on another condition still chooses."""

    @tl.jit
    def k(X, Out, n, k, R: tl.constexpr, C: tl.constexpr):
        rows = tl.arange(0, R)
        cols = tl.arange(0, C)
        m = cols < n
        x = tl.load(X + rows[:, None] * C + cols[None, :], mask=m[None, :], other=0.0)
        y = tl.where(m[None, :], x * 2.0, 7.0)
        y = tl.where(cols[None, :] < k, y, y - 100.0)
        x0 = tl.load(X + cols, mask=m, other=1.0)
        tl.store(Out + rows[:, None] * C + cols[None, :], y + tl.sum(tl.where(m, x0, 0.0), axis=0))

    x = torch.randn(4, 64)
    for n, kk in ((64, 64), (64, 40), (50, 64), (50, 20)):
        out = loom(torch.zeros(4, 64))
        k[(1,)](loom(x), out, n, kk, R=4, C=64)
        cols = torch.arange(64)
        want = torch.where(cols < n, x * 2, torch.tensor(7.0))
        want = torch.where(cols < kk, want, want - 100) + x[0, :n].sum()
        torch.testing.assert_close(out.cpu(), want)


def test_loads_see_memory_before_stores_into_it(mode):
    """A kernel storing into memory it also read: loads keep the values from
    before the stores, whether the output is the input tensor itself or
    another view of its storage (then no load is read in place)."""

    @tl.jit
    def reverse(X, Y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        tl.store(Y + (BLOCK - 1 - offs), x * 2)

    x = torch.randn(64)
    xl = loom(x)
    reverse[(1,)](xl, xl, BLOCK=64)
    assert torch.equal(xl.cpu(), x.flip(0) * 2)
    base = loom(torch.cat([x, x]))
    reverse[(1,)](base[:64], base[32:96], BLOCK=64)
    want = torch.cat([x[:32], x.flip(0) * 2, x[32:]])
    assert torch.equal(base.cpu(), want)


def test_reductions_same_bits_fused_or_stored():
    """Sums, maxima and minima over a block computed in the loop that makes
    it (lazy) equal, bit for bit, the same reductions over a stored array
    (a loop-carried block), NaN rows included."""

    @tl.jit
    def k(X, Out, C: tl.constexpr):
        rows = tl.arange(0, 4)
        cols = tl.arange(0, C)
        x = tl.load(X + rows[:, None] * C + cols[None, :])
        acc = tl.zeros((4, C), tl.float32)
        for i in range(0, 1):
            acc += x
        fused = (tl.sum(x * 1.0, axis=1), tl.max(x * 1.0, axis=1), tl.min(x * 1.0, axis=1), tl.sum(x * 1.0))
        stored = (tl.sum(acc, axis=1), tl.max(acc, axis=1), tl.min(acc, axis=1), tl.sum(acc))
        for j in tl.static_range(3):
            tl.store(Out + j * 4 + rows, fused[j])
            tl.store(Out + 16 + j * 4 + rows, stored[j])
        tl.store(Out + 12, fused[3])
        tl.store(Out + 28, stored[3])

    for c in (16, 64):
        x = torch.randn(4, c) * 100
        x[2, 5] = float("nan")
        out = loom(torch.zeros(32))
        k[(1,)](loom(x), out, C=c)
        got = out.cpu()
        assert torch.equal(got[:16].view(torch.int32), got[16:].view(torch.int32))
        torch.testing.assert_close(got[:12].view(3, 4), torch.stack([x.sum(1), x.amax(1), x.amin(1)]),
                                   equal_nan=True, rtol=1e-5, atol=1e-3)


def test_where_guards_integer_division(mode):
    """tl.where(d != 0, x // d, 0): the division is not computed for the
    lanes the condition leaves out (no trap on a zero divisor)."""

    @tl.jit
    def k(X, D, Out, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        d = tl.load(D + offs)
        tl.store(Out + offs, tl.where(d != 0, x // d, -1))

    x = torch.randint(-50, 50, (32,), dtype=torch.int32)
    d = torch.randint(-3, 4, (32,), dtype=torch.int32)
    d[::5] = 0
    out = loom(torch.zeros(32, dtype=torch.int32))
    k[(1,)](loom(x), loom(d), out, BLOCK=32)
    safe = torch.where(d != 0, d, torch.ones_like(d))
    assert torch.equal(out.cpu(), torch.where(d != 0, torch.div(x, safe, rounding_mode="trunc"), -1).int())


def test_store_written_in_reduction_pass(monkeypatch):
    """A stored value computed from a block that a row loop makes while
    reducing it (softmax's exp and its sum): the loop writes the block to
    the output and the store scales it there in place (the library's
    softmax passes). The same bits as through the program's stack, with
    masks, several rows per program, the block read again after the store,
    and the output being the input."""
    from torch_loom.tile import lower

    def kernel(X, Y, Z, n, R: tl.constexpr, C: tl.constexpr, AGAIN: tl.constexpr):
        rows = tl.program_id(0) * R + tl.arange(0, R)
        cols = tl.arange(0, C)
        m = cols[None, :] < n
        x = tl.load(X + rows[:, None] * n + cols[None, :], mask=m, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        s = tl.sum(e, axis=1)
        tl.store(Y + rows[:, None] * n + cols[None, :], e / s[:, None], mask=m)
        if AGAIN:
            tl.store(Z + rows[:, None] * n + cols[None, :], e * 2.0, mask=m)

    def run(redirect, x, again, r, c, n, inplace=False):
        k = tl.jit(kernel)
        keep = lower._through_row_loop
        if not redirect:
            monkeypatch.setattr(lower, "_through_row_loop", lambda *a: False)
        xl = loom(x)
        y = xl if inplace else torch.empty_like(xl)
        z = torch.zeros_like(xl)
        k[(x.shape[0] // r,)](xl, y, z, n, R=r, C=c, AGAIN=again)
        src = k.source(xl, y, z, n, R=r, C=c, AGAIN=again)
        monkeypatch.setattr(lower, "_through_row_loop", keep)
        return y.cpu(), z.cpu(), src

    for r, c, n, again in ((1, 64, 50, False), (4, 32, 20, True), (2, 64, 64, True)):
        x = torch.randn(8, n) * 3
        x[3, 1] = float("nan")
        y1, z1, src = run(True, x, again, r, c, n)
        y0, z0, _ = run(False, x, again, r, c, n)
        body = src[src.index("static void loom_tile_program"):]
        assert "= (float)((p1[" in body  # the in-place pass over the output
        assert ("memcpy(" in body) == again  # the stack array only where read again
        assert torch.equal(y1.view(torch.int32), y0.view(torch.int32))
        assert torch.equal(z1.view(torch.int32), z0.view(torch.int32))
        torch.testing.assert_close(y1, torch.softmax(x, -1), equal_nan=True)
        yi, _, _ = run(True, x, again, r, c, n, inplace=True)
        assert torch.equal(yi.view(torch.int32), y0.view(torch.int32))
