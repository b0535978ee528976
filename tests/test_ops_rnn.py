"""Recurrent networks on loom: nn.RNN, nn.LSTM, nn.GRU and their cells train
exactly like on the CPU with the fallback raising (the fused LSTM/GRU cell
kernels, and every other op these paths reach, are native); the fused cell
ops themselves against their formulas, in every float dtype; bad input."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

pytestmark = [pytest.mark.usefixtures("no_fallback"),
              # the CPU's reference LSTM says it leaves oneDNN for projections
              pytest.mark.filterwarnings("ignore:LSTM with projections")]

# float32 through a few layers and time steps and three optimizer steps:
# the CPU and loom round differently (their GEMMs sum in other orders, the
# CPU's LSTM runs through oneDNN), and the differences grow with depth;
# these sizes stay within 1e-6.
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)


def close(actual, expected, tol, msg=""):
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), **tol, msg=msg)


# ---- training against the CPU ---------------------------------------------------


def states(h):
    """The final hidden state(s) as a tuple: (h,) or (h, c)."""
    return h if isinstance(h, tuple) else (h,)


def initial_states(module, batch, dtype):
    """Random (h0,) or (h0, c0) for `module`, as leaves requiring grad."""
    d = 2 if module.bidirectional else 1
    layers = module.num_layers * d
    hidden = module.hidden_size
    out = getattr(module, "proj_size", 0) or hidden
    torch.manual_seed(5)
    if isinstance(module, nn.LSTM):
        return (torch.randn(layers, batch, out, dtype=dtype),
                torch.randn(layers, batch, hidden, dtype=dtype))
    return (torch.randn(layers, batch, out, dtype=dtype),)


def run_training(module, device, xs, h0, opt_name, lengths=None, eval_mode=False):
    """Three steps of SGD or Adam; what each step saw and the parameters after."""
    module = module.to(device)
    module.train(not eval_mode)
    params = list(module.parameters())
    opt = (torch.optim.SGD(params, lr=0.1, momentum=0.9) if opt_name == "sgd"
           else torch.optim.Adam(params, lr=1e-2))
    steps = []
    for x in xs:
        opt.zero_grad()
        x = x.to(device)
        hx = None
        if h0 is not None:
            hx = tuple(h.detach().to(device).requires_grad_() for h in h0)
        inp = x
        if lengths is not None:
            inp = pack_padded_sequence(x, lengths, batch_first=module.batch_first,
                                       enforce_sorted=False)
        arg = None if hx is None else (hx if len(hx) == 2 else hx[0])
        out, h = module(inp, arg)
        if lengths is not None:
            out, out_lengths = pad_packed_sequence(out, batch_first=module.batch_first)
            assert out_lengths.tolist() == lengths.tolist()
        target = torch.linspace(-1, 1, out.numel(), dtype=out.dtype,
                                device=device).reshape(out.shape)
        loss = (out - target).square().mean() + sum(s.square().sum() for s in states(h)) * 0.1
        loss.backward()
        steps.append(dict(loss=loss.detach().cpu(), out=out.detach().cpu(),
                          h=[s.detach().cpu() for s in states(h)],
                          grads=[p.grad.detach().cpu() for p in params],
                          hx_grads=[] if hx is None else [s.grad.detach().cpu() for s in hx]))
        opt.step()
    return steps, [p.detach().cpu() for p in params]


def compare_training(make, xs, h0=None, opt_name="sgd", lengths=None, eval_mode=False,
                     tol=F32):
    torch.manual_seed(0)
    model = make()
    cpu_steps, cpu_params = run_training(copy.deepcopy(model), "cpu", xs, h0, opt_name,
                                         lengths, eval_mode)
    loom_steps, loom_params = run_training(copy.deepcopy(model), "loom", xs, h0, opt_name,
                                           lengths, eval_mode)
    names = [n for n, _ in model.named_parameters()]
    for i, (c, d) in enumerate(zip(cpu_steps, loom_steps)):
        close(d["loss"], c["loss"], tol, f"step {i} loss")
        close(d["out"], c["out"], tol, f"step {i} output")
        for k, (a, b) in enumerate(zip(d["h"], c["h"])):
            close(a, b, tol, f"step {i} final state {k}")
        for n, a, b in zip(names, d["grads"], c["grads"]):
            close(a, b, tol, f"step {i} grad of {n}")
        for k, (a, b) in enumerate(zip(d["hx_grads"], c["hx_grads"])):
            close(a, b, tol, f"step {i} grad of initial state {k}")
    for n, a, b in zip(names, loom_params, cpu_params):
        close(a, b, tol, f"{n} after the steps")


def batches(shape, dtype=torch.float32, n=3):
    torch.manual_seed(1)
    return [torch.randn(*shape, dtype=dtype) for _ in range(n)]


# (name, module factory, batch_first, initial state given, optimizer)
CONFIGS = [
    ("rnn_tanh_2layer_bidir_hx", lambda: nn.RNN(4, 8, 2, bidirectional=True), False, True, "sgd"),
    ("rnn_relu_batch_first", lambda: nn.RNN(4, 8, nonlinearity="relu", batch_first=True),
     True, False, "adam"),
    ("lstm", lambda: nn.LSTM(4, 8), False, False, "sgd"),
    ("lstm_2layer_bidir_batch_first_hx",
     lambda: nn.LSTM(4, 8, 2, bidirectional=True, batch_first=True), True, True, "adam"),
    ("lstm_proj_2layer_bidir_hx", lambda: nn.LSTM(4, 8, 2, bidirectional=True, proj_size=3),
     False, True, "sgd"),
    ("lstm_no_bias", lambda: nn.LSTM(4, 8, 2, bias=False), False, True, "adam"),
    ("gru", lambda: nn.GRU(4, 8), False, False, "adam"),
    ("gru_2layer_bidir_hx", lambda: nn.GRU(4, 8, 2, bidirectional=True), False, True, "sgd"),
    ("gru_no_bias_batch_first", lambda: nn.GRU(4, 8, bias=False, batch_first=True),
     True, True, "sgd"),
]


@pytest.mark.parametrize("name,make,batch_first,given,opt_name", CONFIGS,
                         ids=[c[0] for c in CONFIGS])
def test_rnn_training_matches_cpu(name, make, batch_first, given, opt_name):
    seq, batch = 5, 3
    xs = batches((batch, seq, 4) if batch_first else (seq, batch, 4))
    h0 = initial_states(make(), batch, torch.float32) if given else None
    compare_training(make, xs, h0, opt_name)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "lstm_proj", "gru"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_packed_sequences_match_cpu(kind, batch_first):
    make = {"rnn": lambda: nn.RNN(4, 6, 2, bidirectional=True, batch_first=batch_first),
            "lstm": lambda: nn.LSTM(4, 6, 2, bidirectional=True, batch_first=batch_first),
            "lstm_proj": lambda: nn.LSTM(4, 6, 2, bidirectional=True, proj_size=2,
                                         batch_first=batch_first),
            "gru": lambda: nn.GRU(4, 6, 2, bidirectional=True, batch_first=batch_first)}[kind]
    seq, batch = 6, 4
    xs = batches((batch, seq, 4) if batch_first else (seq, batch, 4))
    lengths = torch.tensor([3, 6, 1, 4])  # unsorted, and one of full length
    h0 = initial_states(make(), batch, torch.float32) if kind != "gru" else None
    compare_training(make, xs, h0, "adam", lengths=lengths)


@pytest.mark.parametrize("kind", [nn.RNN, nn.LSTM, nn.GRU])
def test_dropout_in_eval_mode_matches_cpu(kind):
    # dropout between layers is off in eval mode: the same computation
    make = lambda: kind(4, 6, 3, dropout=0.5, bidirectional=True)
    compare_training(make, batches((5, 2, 4)), opt_name="sgd", eval_mode=True)


@pytest.mark.parametrize("kind", [nn.RNN, nn.LSTM, nn.GRU])
def test_dropout_one_in_train_mode_matches_cpu(kind):
    # p = 1 drops every input of the upper layers on both devices, no RNG
    # involved: the dropout path of training, compared exactly
    make = lambda: kind(4, 6, 2, dropout=1.0)
    compare_training(make, batches((5, 2, 4)), opt_name="sgd")


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_dropout_in_train_mode(kind):
    # loom's RNG is not the CPU's: check what does not depend on the draws
    torch.manual_seed(0)
    m = kind(4, 6, 2, dropout=0.5).to("loom")
    x = torch.randn(5, 3, 4, device="loom")

    def once(seed):
        torch.loom.manual_seed(seed)
        m.zero_grad()
        out, _ = m(x)
        out.square().sum().backward()
        return out.detach().cpu(), [p.grad.cpu() for p in m.parameters()]

    out1, g1 = once(3)
    out2, g2 = once(3)
    out3, _ = once(4)
    assert torch.equal(out1, out2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert not torch.equal(out1, out3)
    m.eval()
    with torch.no_grad():
        out_eval, _ = m(x)
    assert not torch.equal(out1, out_eval.cpu())
    assert all(torch.isfinite(g).all() for g in g1)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_float64_training_matches_cpu(kind):
    make = lambda: kind(4, 8, 2, bidirectional=True).double()
    xs = batches((5, 3, 4), torch.float64)
    h0 = initial_states(make(), 3, torch.float64)
    compare_training(make, xs, h0, "adam", tol=F64)


def test_output_of_first_step_only():
    # later time steps get no gradient at all (undefined grad_hy and grad_cy)
    torch.manual_seed(0)
    m = nn.LSTM(3, 5)
    x = torch.randn(4, 2, 3)
    d = copy.deepcopy(m).to("loom")
    out_c, _ = m(x)
    out_d, _ = d(x.to("loom"))
    out_c[0].sum().backward()
    out_d[0].sum().backward()
    for (n, a), b in zip(d.named_parameters(), m.parameters()):
        close(a.grad, b.grad, F32, n)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_double_backward_matches_cpu(kind):
    # create_graph takes the differentiable (composite) cell backward, whose
    # own backward runs through the ops it is made of
    torch.manual_seed(0)
    m = kind(4, 6, 2)
    x = torch.randn(5, 3, 4)
    res = []
    for mod, device in ((copy.deepcopy(m), "cpu"), (copy.deepcopy(m).to("loom"), "loom")):
        inp = x.to(device).requires_grad_()
        out, _ = mod(inp)
        g, = torch.autograd.grad(out.sin().sum(), inp, create_graph=True)
        penalty = g.square().sum()
        penalty.backward()
        res.append((penalty, [p.grad for p in mod.parameters()]))
    (pc, gc), (pd, gd) = res
    close(pd, pc, F32)
    for a, b in zip(gd, gc):
        close(a, b, F32)


def test_inference_mode():
    torch.manual_seed(0)
    m = nn.LSTM(4, 6, 2, bidirectional=True)
    x = torch.randn(5, 3, 4)
    d = copy.deepcopy(m).to("loom")
    with torch.inference_mode():
        out_c, (h_c, c_c) = m(x)
        out_d, (h_d, c_d) = d(x.to("loom"))
    for a, b in ((out_d, out_c), (h_d, h_c), (c_d, c_c)):
        close(a, b, F32)


# ---- the cells --------------------------------------------------------------------


CELLS = [("lstm_cell", lambda: nn.LSTMCell(4, 7)),
         ("lstm_cell_no_bias", lambda: nn.LSTMCell(4, 7, bias=False)),
         ("gru_cell", lambda: nn.GRUCell(4, 7)),
         ("gru_cell_no_bias", lambda: nn.GRUCell(4, 7, bias=False)),
         ("rnn_cell_tanh", lambda: nn.RNNCell(4, 7)),
         ("rnn_cell_relu", lambda: nn.RNNCell(4, 7, nonlinearity="relu"))]


def run_cell(cell, device, xs, state0, opt_name):
    cell = cell.to(device)
    params = list(cell.parameters())
    opt = (torch.optim.SGD(params, lr=0.1, momentum=0.9) if opt_name == "sgd"
           else torch.optim.Adam(params, lr=1e-2))
    seen = []
    for x in xs:
        opt.zero_grad()
        state = None if state0 is None else tuple(s.to(device) for s in state0)
        if state is not None and not isinstance(cell, nn.LSTMCell):
            state = state[0]
        outs = []
        for t in range(x.shape[0]):  # unrolled over time
            state = cell(x[t].to(device), state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        loss = torch.stack(outs).sin().sum()
        loss.backward()
        seen.append((loss.detach().cpu(), [o.detach().cpu() for o in outs],
                     [p.grad.detach().cpu() for p in params]))
        opt.step()
    return seen, [p.detach().cpu() for p in params]


@pytest.mark.parametrize("given", [False, True], ids=["no_state", "state"])
@pytest.mark.parametrize("name,make", CELLS, ids=[c[0] for c in CELLS])
def test_cell_training_matches_cpu(name, make, given):
    torch.manual_seed(0)
    cell = make()
    xs = batches((4, 3, 4))
    state0 = None
    if given:
        torch.manual_seed(2)
        state0 = (torch.randn(3, 7), torch.randn(3, 7))
    opt_name = "adam" if given else "sgd"
    c_seen, c_params = run_cell(copy.deepcopy(cell), "cpu", xs, state0, opt_name)
    d_seen, d_params = run_cell(copy.deepcopy(cell), "loom", xs, state0, opt_name)
    for (cl, co, cg), (dl, do, dg) in zip(c_seen, d_seen):
        close(dl, cl, F32)
        for a, b in zip(do, co):
            close(a, b, F32)
        for a, b in zip(dg, cg):
            close(a, b, F32)
    for a, b in zip(d_params, c_params):
        close(a, b, F32)


@pytest.mark.parametrize("kind", [nn.LSTMCell, nn.GRUCell])
def test_unbatched_cell(kind):
    torch.manual_seed(0)
    cell = kind(4, 5)
    x = torch.randn(4)
    d = copy.deepcopy(cell).to("loom")
    out_c = cell(x)
    out_d = d(x.to("loom"))
    for a, b in zip(states(out_d), states(out_c)):
        assert a.shape == (5,)
        close(a, b, F32)


# ---- reduced precision -------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, dict(rtol=4e-2, atol=4e-2)),
                                       (torch.float16, dict(rtol=5e-3, atol=5e-3))],
                         ids=["bfloat16", "float16"])
@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell])
def test_reduced_precision_forward(kind, dtype, tol):
    # against float32 on the same rounded weights and inputs: each cell
    # rounds its results once, the matmuls in between round their outputs
    torch.manual_seed(0)
    cell = kind in (nn.LSTMCell, nn.GRUCell)
    m = kind(4, 8) if cell else kind(4, 8, 2, bidirectional=True)
    low = copy.deepcopy(m).to(dtype)
    ref = copy.deepcopy(low).float()
    x = torch.randn(3, 4) if cell else torch.randn(5, 3, 4)
    x = x.to(dtype)
    out_ref = ref(x.float())
    out = low.to("loom")(x.to("loom"))
    flat = lambda o: list(states(o)) if cell else [o[0], *states(o[1])]
    for a, b in zip(flat(out), flat(out_ref)):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float().cpu(), b.detach(), **tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_reduced_precision_backward(kind, dtype):
    torch.manual_seed(0)
    m = kind(4, 8)
    low = copy.deepcopy(m).to(dtype)
    ref = copy.deepcopy(low).float()
    x = torch.randn(5, 3, 4).to(dtype)
    ref(x.float())[0].sum().backward()
    d = low.to("loom")
    d(x.to("loom"))[0].sum().backward()
    for a, b in zip(d.parameters(), ref.parameters()):
        assert a.grad.dtype == dtype
        scale = b.grad.abs().max().item() + 1
        torch.testing.assert_close(a.grad.float().cpu(), b.grad, rtol=5e-2, atol=5e-2 * scale)


# ---- the fused cell ops ----------------------------------------------------------------

ops = torch.ops.aten
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
OP_TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float64: F64,
          torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
          torch.float16: dict(rtol=2e-3, atol=2e-3)}


def lstm_formula(ig, hg, cx, ib, hb):
    g = ig + hg + (0 if ib is None else ib + hb)
    i, f, c, o = g.chunk(4, 1)
    i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
    cy = f * cx + i * c
    return o * cy.tanh(), cy, torch.cat([i, f, c, o], 1)


def gru_formula(ig, hg, hx, ib, hb):
    if ib is not None:
        ig, hg = ig + ib, hg + hb
    ir, iz, in_ = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def operands(factor, dtype, bias, transposed=False):
    torch.manual_seed(3)
    b, h = 3, 5
    ig = torch.randn(b, factor * h, dtype=torch.float64)
    if transposed:  # a strided view, as a matmul's output may be
        ig = torch.randn(factor * h, b, dtype=torch.float64).t()
    hg = torch.randn(b, factor * h, dtype=torch.float64)
    st = torch.randn(b, h, dtype=torch.float64)
    ib = torch.randn(factor * h, dtype=torch.float64) if bias else None
    hb = torch.randn(factor * h, dtype=torch.float64) if bias else None
    cast = lambda t: None if t is None else t.to(dtype)
    return [cast(t) for t in (ig, hg, st, ib, hb)]


def to_loom(ts):
    return [None if t is None else t.to("loom") for t in ts]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_op(dtype, bias):
    args = operands(4, dtype, bias, transposed=True)
    hy, cy, ws = ops._thnn_fused_lstm_cell(*to_loom(args))
    ref = lstm_formula(*[None if t is None else t.double() for t in args])
    for got, want in zip((hy, cy, ws), ref):
        assert got.dtype == dtype and got.is_contiguous()
        close(got.double(), want.to(dtype).double(), OP_TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_op(dtype, bias):
    args = operands(3, dtype, bias, transposed=True)
    hy, ws = ops._thnn_fused_gru_cell(*to_loom(args))
    ref_hy, ref_ws = gru_formula(*[None if t is None else t.double() for t in args])
    assert ws.shape == (3, 25) and ws.dtype == dtype
    close(hy.double(), ref_hy.to(dtype).double(), OP_TOL[dtype])
    close(ws.double(), ref_ws.to(dtype).double(), OP_TOL[dtype])


@pytest.mark.parametrize("grads", ["both", "hy", "cy"])
def test_fused_lstm_cell_backward_op(grads):
    # against autograd through the formula, in float64
    args = operands(4, torch.float64, True)
    leaves = [t.clone().requires_grad_() for t in args]
    hy, cy, _ = lstm_formula(*leaves)
    torch.manual_seed(4)
    ghy = torch.randn_like(hy) if grads != "cy" else None
    gcy = torch.randn_like(cy) if grads != "hy" else None
    outs = [o for o, g in ((hy, ghy), (cy, gcy)) if g is not None]
    want = torch.autograd.grad(outs, leaves, [g for g in (ghy, gcy) if g is not None])
    l_hy, l_cy, l_ws = ops._thnn_fused_lstm_cell(*to_loom(args))
    with torch.no_grad():  # the non-create_graph path autograd takes
        g_gates, g_cx, g_bias = ops._thnn_fused_lstm_cell_backward_impl(
            *to_loom([ghy, gcy, args[2]]), l_cy, l_ws, True)
        five = ops._thnn_fused_lstm_cell_backward(*to_loom([ghy, gcy, args[2]]), l_cy, l_ws,
                                                  False)
    close(g_gates, want[0], F64)
    close(g_gates, want[1], F64)
    close(g_cx, want[2], F64)
    close(g_bias, want[3], F64)
    close(g_bias, want[4], F64)
    # the composite five-gradient form over it
    close(five[0], want[0], F64)
    assert five[3] is None and five[4] is None


def test_fused_lstm_cell_backward_without_gradients():
    args = to_loom(operands(4, torch.float32, True))
    _, cy, ws = ops._thnn_fused_lstm_cell(*args)
    assert ops._thnn_fused_lstm_cell_backward_impl(None, None, args[2], cy, ws, True) == (
        None, None, None)


def test_fused_gru_cell_backward_op():
    args = operands(3, torch.float64, True)
    leaves = [t.clone().requires_grad_() for t in args]
    hy, _ = gru_formula(*leaves)
    ghy = torch.randn_like(hy)
    want = torch.autograd.grad(hy, leaves, ghy)
    _, ws = ops._thnn_fused_gru_cell(*to_loom(args))
    got = ops._thnn_fused_gru_cell_backward(ghy.to("loom"), ws, True)
    for g, w in zip(got, want):
        close(g, w, F64)
    no_bias = ops._thnn_fused_gru_cell_backward(ghy.to("loom"), ws, False)
    assert no_bias[3] is None and no_bias[4] is None
    close(no_bias[2], want[2], F64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bias_gradient_is_the_batch_sum(dtype):
    # of the gate gradients as stored, in batch order, the same each time
    torch.manual_seed(6)
    b, h = 37, 9
    args = to_loom([torch.randn(b, 4 * h, dtype=dtype), torch.randn(b, 4 * h, dtype=dtype),
                    torch.randn(b, h, dtype=dtype), torch.randn(4 * h, dtype=dtype),
                    torch.randn(4 * h, dtype=dtype)])
    _, cy, ws = ops._thnn_fused_lstm_cell(*args)
    ghy = torch.randn(b, h, dtype=dtype, device="loom")
    with torch.no_grad():
        g_gates, _, g_bias = ops._thnn_fused_lstm_cell_backward_impl(ghy, None, args[2], cy,
                                                                     ws, True)
        again = ops._thnn_fused_lstm_cell_backward_impl(ghy, None, args[2], cy, ws, True)[2]
    # a double sum of 37 values of at most 24 bits is exact, then rounded once
    want = g_gates.cpu().double().sum(0).to(dtype)
    if dtype == torch.float64:
        close(g_bias, want, F64)
    else:
        assert torch.equal(g_bias.cpu(), want)
    assert torch.equal(again.cpu(), g_bias.cpu())


def test_empty_batch():
    args = to_loom([torch.randn(0, 8), torch.randn(0, 8), torch.randn(0, 2),
                    torch.randn(8), torch.randn(8)])
    hy, cy, ws = ops._thnn_fused_lstm_cell(*args)
    assert hy.shape == (0, 2) and ws.shape == (0, 8)
    with torch.no_grad():
        g = ops._thnn_fused_lstm_cell_backward_impl(hy, None, args[2], cy, ws, True)
    assert g[2].shape == (8,) and torch.equal(g[2].cpu(), torch.zeros(8))
    args = to_loom([torch.randn(0, 6), torch.randn(0, 6), torch.randn(0, 2),
                    torch.randn(6), torch.randn(6)])
    hy, ws = ops._thnn_fused_gru_cell(*args)
    assert hy.shape == (0, 2) and ws.shape == (0, 10)
    g = ops._thnn_fused_gru_cell_backward(hy, ws, True)
    assert [t.shape for t in g] == [(0, 6), (0, 6), (0, 2), (6,), (6,)]
    assert torch.equal(g[3].cpu(), torch.zeros(6)) and torch.equal(g[4].cpu(), torch.zeros(6))


# ---- bad input ------------------------------------------------------------------------


def lstm_args(**change):
    a = dict(input_gates=torch.randn(3, 8), hidden_gates=torch.randn(3, 8),
             cx=torch.randn(3, 2), input_bias=torch.randn(8), hidden_bias=torch.randn(8))
    a.update(change)
    return [None if v is None else v.to("loom") for v in a.values()]


@pytest.mark.parametrize("change,match", [
    (dict(input_gates=torch.randn(8)), "input_gates to be 2-D"),
    (dict(hidden_gates=torch.randn(3, 4)), "hidden_gates of the size"),
    (dict(input_gates=torch.randn(3, 6), hidden_gates=torch.randn(3, 6)),
     "not a multiple of 4"),
    (dict(cx=torch.randn(3, 3)), r"cx of size \[3, 2\]"),
    (dict(cx=torch.randn(2, 3)), r"cx of size \[3, 2\]"),
    (dict(hidden_bias=None), "given together"),
    (dict(input_bias=torch.randn(4), hidden_bias=torch.randn(4)), r"input_bias of size \[8\]"),
    (dict(hidden_bias=torch.randn(2, 4)), r"hidden_bias of size \[8\]"),
    (dict(cx=torch.randn(3, 2, dtype=torch.float64)), "cx to have dtype Float"),
], ids=["gates_1d", "gate_sizes", "width", "cx_cols", "cx_rows", "one_bias", "bias_size",
        "bias_2d", "dtype"])
def test_fused_lstm_cell_bad_input(change, match):
    with pytest.raises(RuntimeError, match=f"_thnn_fused_lstm_cell: .*{match}"):
        ops._thnn_fused_lstm_cell(*lstm_args(**change))


def test_fused_cells_reject_integer_and_cpu_operands():
    with pytest.raises(NotImplementedError, match="_thnn_fused_gru_cell.*Long"):
        ops._thnn_fused_gru_cell(*to_loom([torch.ones(2, 6, dtype=torch.long)] * 2 +
                                          [torch.ones(2, 2, dtype=torch.long)]))
    a = lstm_args()
    a[2] = a[2].cpu()
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell: expected cx on loom"):
        ops._thnn_fused_lstm_cell(*a)


def test_fused_gru_cell_bad_input():
    good = [torch.randn(3, 6), torch.randn(3, 6), torch.randn(3, 2)]
    with pytest.raises(RuntimeError, match=r"_thnn_fused_gru_cell: expected hx of size \[3, 2\]"):
        ops._thnn_fused_gru_cell(*to_loom(good[:2] + [torch.randn(3, 4)]))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell: .*not a multiple of 3"):
        ops._thnn_fused_gru_cell(*to_loom([torch.randn(3, 4), torch.randn(3, 4),
                                           torch.randn(3, 1)]))


def test_fused_backward_bad_input():
    args = to_loom(operands(4, torch.float32, True))
    _, cy, ws = ops._thnn_fused_lstm_cell(*args)
    with pytest.raises(RuntimeError,
                       match=r"_thnn_fused_lstm_cell_backward_impl: expected workspace of size \[3, 20\]"):
        ops._thnn_fused_lstm_cell_backward_impl(cy, None, args[2], cy, ws[:, :8], True)
    with pytest.raises(RuntimeError,
                       match=r"_thnn_fused_lstm_cell_backward_impl: expected grad_cy of size"):
        ops._thnn_fused_lstm_cell_backward_impl(cy, cy[:2], args[2], cy, ws, True)
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell_backward_impl: .*grad_hy to be 2-D"):
        ops._thnn_fused_lstm_cell_backward_impl(cy[0], None, args[2], cy, ws, True)
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell_backward_impl: .*dtype Float"):
        ops._thnn_fused_lstm_cell_backward_impl(cy.double(), None, args[2], cy, ws, True)
    g = to_loom(operands(3, torch.float32, True))
    _, gws = ops._thnn_fused_gru_cell(*g)
    with pytest.raises(RuntimeError,
                       match=r"_thnn_fused_gru_cell_backward: expected workspace of size \[3, 20\]"):
        ops._thnn_fused_gru_cell_backward(torch.randn(3, 4, device="loom"), gws, True)
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell_backward: .*grad_hy to be 2-D"):
        ops._thnn_fused_gru_cell_backward(torch.randn(5, device="loom"), gws, True)


def test_lstm_module_bad_input_size():
    m = nn.LSTM(4, 8).to("loom")
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(torch.randn(3, 2, 5, device="loom"))
