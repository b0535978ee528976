"""Weight normalization (torch._weight_norm: the fused _weight_norm_interface
for dim 0 and the last dim, the composite for the others) and the CTC loss
(_ctc_loss and its backward, reached through F.ctc_loss) on loom against
the CPU: forward and backward, dtypes, target layouts, reductions,
impossible alignments, random shapes, bad input, thread-count independence,
and a small wav2vec2-like model trained a few steps."""
import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from nn_compare import DTYPES, close, grads, pair

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

A = torch.ops.aten


def g_shape(v_shape, dim):
    """The shape nn.utils.weight_norm gives g: v's rank, 1 except along dim."""
    return tuple(s if d == dim else 1 for d, s in enumerate(v_shape))


# ---- weight norm -------------------------------------------------------------------


# (v shape, dim): dim 0 and the last dim take the fused kernels; the column
# cases with many rows span several row blocks of the partial sums, and rows
# longer than 256 elements span several staged pieces.
FUSED = [((6, 4, 5), 0), ((6, 4, 5), 2), ((7,), 0), ((3, 300), 1), ((300, 3), 0),
         ((5, 700), 0), ((5, 700), 1), ((200, 3, 100), 2), ((9, 1, 1), 0), ((1, 33), 1),
         ((2, 3, 4, 5), 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", FUSED)
def test_weight_norm_fused_matches_cpu(dtype, shape, dim):
    torch.manual_seed(0)
    vc, vd = pair(torch.randn(shape).to(dtype))
    gc, gd = pair(torch.randn(g_shape(shape, dim)).to(dtype))
    wc, nc = A._weight_norm_interface(vc, gc, dim)
    wd, nd = A._weight_norm_interface(vd, gd, dim)
    assert wd.device.type == "loom" and wd.dtype == wc.dtype and wd.shape == wc.shape
    # norms keep g's shape, in float for 16-bit dtypes
    assert nd.dtype == nc.dtype and nd.shape == nc.shape
    close(wd, wc.detach(), dtype)
    close(nd, nc.detach(), nc.dtype if dtype in (torch.float32, torch.float64) else torch.float32)
    # the same through torch._weight_norm, with autograd's fused backward
    yc, yd = torch._weight_norm(vc, gc, dim), torch._weight_norm(vd, gd, dim)
    close(yd, yc.detach(), dtype)
    go = torch.randn(shape).to(dtype)
    (gvc, ggc), (gvd, ggd) = grads(yc, (vc, gc), go), grads(yd, (vd, gd), go.to("loom"))
    close(gvd, gvc, dtype, scale=2)
    close(ggd, ggc, dtype, scale=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_backward_op_matches_cpu(dtype, dim):
    torch.manual_seed(1)
    shape = (8, 5, 6)
    v, g, gw = torch.randn(shape, dtype=dtype), torch.randn(g_shape(shape, dim), dtype=dtype), \
        torch.randn(shape, dtype=dtype)
    _, norms = A._weight_norm_interface(v, g, dim)
    rc = A._weight_norm_interface_backward(gw, v, g, norms, dim)
    rd = A._weight_norm_interface_backward(gw.to("loom"), v.to("loom"), g.to("loom"),
                                           norms.to("loom"), dim)
    for a, b in zip(rd, rc):
        assert a.shape == b.shape and a.dtype == b.dtype
        close(a, b, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,dim", [((6, 4, 5), 1), ((2, 3, 4, 5), 2)])
def test_weight_norm_middle_dim_takes_the_composite(dtype, shape, dim):
    torch.manual_seed(2)
    vc, vd = pair(torch.randn(shape).to(dtype))
    gc, gd = pair(torch.randn(g_shape(shape, dim)).to(dtype))
    yc, yd = torch._weight_norm(vc, gc, dim), torch._weight_norm(vd, gd, dim)
    close(yd, yc.detach(), dtype)
    go = torch.randn(shape).to(dtype)
    for a, b in zip(grads(yd, (vd, gd), go.to("loom")), grads(yc, (vc, gc), go)):
        close(a, b, dtype)


def test_weight_norm_random_shapes():
    gen = torch.Generator().manual_seed(3)
    for _ in range(12):
        rank = int(torch.randint(1, 5, (1,), generator=gen))
        shape = tuple(int(s) for s in torch.randint(1, 40, (rank,), generator=gen))
        dim = 0 if int(torch.randint(0, 2, (1,), generator=gen)) == 0 else rank - 1
        dtype = DTYPES[int(torch.randint(0, len(DTYPES), (1,), generator=gen))]
        vc, vd = pair(torch.randn(shape, generator=gen).to(dtype))
        gc, gd = pair(torch.randn(g_shape(shape, dim), generator=gen).to(dtype))
        yc, yd = torch._weight_norm(vc, gc, dim), torch._weight_norm(vd, gd, dim)
        close(yd, yc.detach(), dtype)
        go = torch.randn(shape, generator=gen).to(dtype)
        for a, b in zip(grads(yd, (vd, gd), go.to("loom")), grads(yc, (vc, gc), go)):
            close(a, b, dtype, scale=2)


def test_weight_norm_noncontiguous_and_empty():
    torch.manual_seed(4)
    big = torch.randn(10, 12, 8)
    v = big[::2, :, 1:7].transpose(1, 2)  # (5, 6, 12), not contiguous
    g = torch.randn(5, 1, 1)
    # the CPU kernel reads v's memory as if contiguous (torch._weight_norm
    # makes it so); loom honours the strides
    wc, nc = A._weight_norm_interface(v.contiguous(), g, 0)
    wd, nd = A._weight_norm_interface(big.to("loom")[::2, :, 1:7].transpose(1, 2),
                                      g.to("loom"), 0)
    close(wd, wc, torch.float32)
    close(nd, nc, torch.float32)
    # empty v: zero norms (the CPU kernel of torch 2.13 divides by zero here)
    for shape, dim in [((0, 3), 0), ((4, 0), 0), ((4, 0), 1), ((0, 3), 1)]:
        v, g = torch.randn(shape), torch.randn(g_shape(shape, dim))
        wd, nd = A._weight_norm_interface(v.to("loom"), g.to("loom"), dim)
        assert wd.shape == shape and nd.shape == g.shape
        assert torch.equal(nd.cpu(), torch.zeros(g.shape))
        gv, gg = A._weight_norm_interface_backward(wd, v.to("loom"), g.to("loom"), nd, dim)
        assert gv.shape == shape and torch.equal(gg.cpu(), torch.zeros(g.shape))


def test_weight_norm_zero_norm_gives_what_the_cpu_gives():
    v = torch.zeros(3, 4)
    v[1] = 1.0
    g = torch.ones(3, 1)
    wc, nc = A._weight_norm_interface(v, g, 0)
    wd, nd = A._weight_norm_interface(v.to("loom"), g.to("loom"), 0)
    torch.testing.assert_close(wd.cpu(), wc, equal_nan=True)
    torch.testing.assert_close(nd.cpu(), nc)


def test_weight_norm_double_backward():
    # create_graph takes the differentiable backward, built of plain ops
    torch.manual_seed(5)
    for dim in (0, 2):
        vc, vd = pair(torch.randn(4, 3, 5, dtype=torch.float64))
        gc, gd = pair(torch.randn(g_shape((4, 3, 5), dim), dtype=torch.float64))
        out = []
        for v, g in ((vc, gc), (vd, gd)):
            y = torch._weight_norm(v, g, dim)
            gv, gg = torch.autograd.grad((y * y.detach().sin()).sum(), (v, g), create_graph=True)
            out.append(torch.autograd.grad((gv * gv).sum() + gg.sum(), (v, g)))
        for a, b in zip(out[1], out[0]):
            close(a, b, torch.float64)


@pytest.mark.parametrize("style", ["parametrization", "hook"])
@pytest.mark.parametrize("dim", [0, 2, 1])
def test_weight_norm_modules(style, dim):
    torch.manual_seed(6)
    conv = torch.nn.Conv1d(8, 6, 5, padding=2, groups=2)
    cd = copy.deepcopy(conv).to("loom")
    for m in (conv, cd):  # the hook form's modules cannot be deep-copied
        if style == "parametrization":
            torch.nn.utils.parametrizations.weight_norm(m, dim=dim)
        else:
            with pytest.warns(FutureWarning):
                torch.nn.utils.weight_norm(m, dim=dim)
    x = torch.randn(3, 8, 17)
    yc, yd = conv(x), cd(x.to("loom"))
    close(yd, yc.detach(), torch.float32)
    yc.square().sum().backward()
    yd.square().sum().backward()
    for (name, a), (_, b) in zip(cd.named_parameters(), conv.named_parameters()):
        close(a.grad, b.grad, torch.float32, scale=4)


def test_weight_norm_bad_input():
    v, g = torch.randn(4, 3, 5, device="loom"), torch.randn(4, 1, 1, device="loom")
    with pytest.raises(RuntimeError, match="_weight_norm_interface: fused kernels can only be "
                                           "applied for first or last dim"):
        A._weight_norm_interface(v, g, 1)
    with pytest.raises(RuntimeError, match="_weight_norm_interface: expected g to have v's dtype"):
        A._weight_norm_interface(v, g.double(), 0)
    with pytest.raises(RuntimeError, match="one element per index of dim 2"):
        A._weight_norm_interface(v, g, 2)
    with pytest.raises(NotImplementedError, match="_weight_norm_interface"):
        A._weight_norm_interface(v.long(), g.long(), 0)
    with pytest.raises(RuntimeError, match="expected g on loom"):
        A._weight_norm_interface(v, g.cpu(), 0)
    _, norms = A._weight_norm_interface(v, g, 0)
    with pytest.raises(RuntimeError, match="_weight_norm_interface_backward: expected grad_w of "
                                           "v's shape"):
        A._weight_norm_interface_backward(v[:2], v, g, norms, 0)
    with pytest.raises(RuntimeError, match="saved_norms"):
        A._weight_norm_interface_backward(v, v, g, norms[:2], 0)


# ---- CTC loss ------------------------------------------------------------------------


def ctc_case(T, N, C, S, in_lens, tgt_lens, dtype, seed=0, concat=False, blank=0, repeat=None):
    """log_probs [T, N, C] (log-softmaxed), targets avoiding blank, padded
    [N, S] or concatenated; `repeat` (a label) fills the first two places of
    every target, so that they need a blank between them."""
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(T, N, C, generator=g, dtype=dtype).log_softmax(2)
    labels = [c for c in range(C) if c != blank]
    tg = torch.tensor(labels)[torch.randint(0, len(labels), (N, S), generator=g)]
    if repeat is not None:
        tg[:, :2] = repeat
    if concat:
        tg = torch.cat([tg[b, :tgt_lens[b]] for b in range(N)])
    return lp, tg, list(in_lens), list(tgt_lens)


def assert_same(actual, expected, dtype):
    """Equal within the dtype's tolerance, inf and NaN where the CPU has them."""
    tol = dict(rtol=1e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)


def alpha_valid(log_alpha, in_lens, tgt_lens):
    """The entries of log_alpha the CPU writes: t < input length, s < 2L + 1
    (it leaves the rest uninitialized, loom -inf)."""
    mask = torch.zeros(log_alpha.shape, dtype=torch.bool)
    for b, (t, l) in enumerate(zip(in_lens, tgt_lens)):
        mask[b, :t, :2 * l + 1] = True
        mask[b, 0, :] = True  # the CPU fills the first row with -inf
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("concat", [False, True])
def test_ctc_loss_raw_ops_match_cpu(dtype, concat):
    # lengths 0, inputs shorter than their targets need (inf), repeated labels
    lp, tg, il, tl = ctc_case(15, 6, 7, 5, [15, 12, 9, 0, 0, 3], [5, 3, 0, 2, 0, 3], dtype,
                              concat=concat, repeat=3)
    nc, ac = A._ctc_loss(lp, tg, il, tl, 0, False)
    nd, ad = A._ctc_loss(lp.to("loom"), tg.to("loom"), il, tl, 0, False)
    assert nd.shape == nc.shape and ad.shape == ac.shape and ad.dtype == ac.dtype
    assert_same(nd, nc, dtype)
    assert torch.isinf(nc).sum() >= 2
    mask = alpha_valid(ac, il, tl)
    assert_same(ad.cpu()[mask], ac[mask], dtype)
    assert (ad.cpu()[~mask] == float("-inf")).all()
    grad = torch.randn(6, dtype=dtype)
    for zero_infinity in (True, False):
        gc = A._ctc_loss_backward(grad, lp, tg, il, tl, nc, ac, 0, zero_infinity)
        gd = A._ctc_loss_backward(grad.to("loom"), lp.to("loom"), tg.to("loom"), il, tl, nd, ad,
                                  0, zero_infinity)
        assert gd.shape == gc.shape and gd.is_contiguous()
        assert_same(gd, gc, dtype)
        assert gd.isnan().any() != zero_infinity  # inf losses give NaN unless zeroed
    # the tensor-length overloads
    ild, tld = torch.tensor(il, device="loom"), torch.tensor(tl, dtype=torch.int32)
    nt, at = A._ctc_loss.Tensor(lp.to("loom"), tg.to("loom"), ild, tld, 0, False)
    gt = A._ctc_loss_backward.Tensor(grad.to("loom"), lp.to("loom"), tg.to("loom"), ild, tld,
                                     nd, ad, 0, False)
    for a, b in ((nt, nd), (at, ad), (gt, gd)):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("layout", ["padded", "concat", "padded-int32"])
@pytest.mark.parametrize("lengths", ["tensor", "list"])
def test_ctc_loss_functional_matches_cpu(dtype, reduction, zero_infinity, layout, lengths):
    # the third sample cannot align (3 frames for 3 labels with a repeat)
    lp, tg, il, tl = ctc_case(20, 4, 6, 7, [20, 17, 3, 11], [7, 4, 3, 0], dtype, seed=7,
                              concat=layout == "concat", blank=2, repeat=4)
    if layout == "padded-int32":
        tg = tg.int()
    ilc, tlc = (torch.tensor(il), torch.tensor(tl)) if lengths == "tensor" else (il, tl)
    ild, tld = (ilc.to("loom"), tlc.to("loom")) if lengths == "tensor" else (il, tl)
    lpc, lpd = pair(lp)
    kw = dict(blank=2, reduction=reduction, zero_infinity=zero_infinity)
    lc = F.ctc_loss(lpc, tg, ilc, tlc, **kw)
    ld = F.ctc_loss(lpd, tg.to("loom"), ild, tld, **kw)
    assert ld.device.type == "loom" and ld.shape == lc.shape
    assert_same(ld, lc.detach(), dtype)
    if not zero_infinity and reduction != "none":
        assert torch.isinf(lc)
    go = torch.rand(lc.shape, dtype=dtype) + 0.5
    (gc,), (gd,) = grads(lc, lpc, go), grads(ld, lpd, go.to("loom"))
    assert_same(gd, gc, dtype)


def test_ctc_loss_gradient_through_log_softmax_and_transpose():
    # what wav2vec2 does: logits [N, T, C] -> log_softmax -> transpose(0, 1)
    torch.manual_seed(8)
    logits_c, logits_d = pair(torch.randn(3, 25, 9))
    tg = torch.randint(1, 9, (3, 6))
    il, tl = torch.tensor([25, 20, 14]), torch.tensor([6, 5, 2])
    out = []
    for logits, dev in ((logits_c, "cpu"), (logits_d, "loom")):
        lp = F.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
        loss = F.ctc_loss(lp, tg.to(dev), il, tl, blank=0, reduction="mean", zero_infinity=True)
        out.append((loss, torch.autograd.grad(loss, logits)[0]))
    assert_same(out[1][0], out[0][0].detach(), torch.float32)
    assert_same(out[1][1], out[0][1], torch.float32)


def test_ctc_loss_unbatched():
    lp, tg, il, tl = ctc_case(10, 1, 5, 4, [10], [4], torch.float32, seed=9)
    lp, tg = lp[:, 0], tg[0]
    lpc, lpd = pair(lp)
    lc = F.ctc_loss(lpc, tg, torch.tensor(10), torch.tensor(4), reduction="none")
    ld = F.ctc_loss(lpd, tg.to("loom"), torch.tensor(10), torch.tensor(4), reduction="none")
    assert ld.shape == lc.shape == ()
    assert_same(ld, lc.detach(), torch.float32)
    (gc,), (gd,) = grads(lc, lpc, None), grads(ld, lpd, None)
    assert_same(gd, gc, torch.float32)


def test_ctc_loss_noncontiguous_inputs():
    g = torch.Generator().manual_seed(10)
    big = torch.randn(9, 30, 14, generator=g).log_softmax(2)  # [N', T', C']
    lpc = big[::2, ::2, :].transpose(0, 1)  # [15, 5, 14], strided in every dim
    lpd = big.to("loom")[::2, ::2, :].transpose(0, 1)
    tbig = torch.randint(1, 14, (10, 8), generator=g)
    tgc, tgd = tbig[::2, ::2], tbig.to("loom")[::2, ::2]  # [5, 4]
    il, tl = [15, 14, 10, 9, 1], [4, 3, 4, 1, 1]
    nc, ac = A._ctc_loss(lpc, tgc, il, tl, 0, False)
    nd, ad = A._ctc_loss(lpd, tgd, il, tl, 0, False)
    assert_same(nd, nc, torch.float32)
    grad = torch.randn(10)
    gc = A._ctc_loss_backward(grad[::2], lpc, tgc, il, tl, nc, ac, 0, False)
    gd = A._ctc_loss_backward(grad.to("loom")[::2], lpd, tgd, il, tl, nd, ad, 0, False)
    assert_same(gd, gc, torch.float32)


def test_ctc_loss_random_shapes():
    gen = torch.Generator().manual_seed(11)
    for i in range(15):
        T, N, C = (int(torch.randint(1, 40, (1,), generator=gen)),
                   int(torch.randint(1, 6, (1,), generator=gen)),
                   int(torch.randint(2, 12, (1,), generator=gen)))
        S = int(torch.randint(0, 12, (1,), generator=gen))
        il = torch.randint(0, T + 1, (N,), generator=gen).tolist()
        tl = torch.randint(0, S + 1, (N,), generator=gen).tolist()
        blank = int(torch.randint(0, C, (1,), generator=gen))
        dtype = torch.float64 if i % 3 == 0 else torch.float32
        lp, tg, il, tl = ctc_case(T, N, C, S, il, tl, dtype, seed=100 + i,
                                  concat=i % 2 == 1, blank=blank)
        for zero_infinity in (False, True):
            lpc, lpd = pair(lp)
            kw = dict(blank=blank, reduction="sum", zero_infinity=zero_infinity)
            lc = F.ctc_loss(lpc, tg, il, tl, **kw)
            ld = F.ctc_loss(lpd, tg.to("loom"), il, tl, **kw)
            assert_same(ld, lc.detach(), dtype)
            (gc,), (gd,) = grads(lc, lpc, None), grads(ld, lpd, None)
            assert_same(gd, gc, dtype)


def test_ctc_loss_bad_input_raises_what_the_cpu_raises():
    lp, tg, il, tl = ctc_case(6, 2, 5, 3, [6, 5], [3, 2], torch.float32)
    bad = {
        "blank": lambda d: A._ctc_loss(lp.to(d), tg.to(d), il, tl, 5, False),
        "input length": lambda d: A._ctc_loss(lp.to(d), tg.to(d), [7, 5], tl, 0, False),
        "negative input length": lambda d: A._ctc_loss(lp.to(d), tg.to(d), [-1, 5], tl, 0, False),
        "negative target length": lambda d: A._ctc_loss(lp.to(d), tg.to(d), il, [-1, 2], 0, False),
        "target length": lambda d: A._ctc_loss(lp.to(d), tg.to(d), il, [4, 2], 0, False),
        "batch": lambda d: A._ctc_loss(lp.to(d), tg.to(d), [6], [3], 0, False),
        "targets dtype": lambda d: A._ctc_loss(lp.to(d), tg.float().to(d), il, tl, 0, False),
        "log_probs dim": lambda d: A._ctc_loss(lp[0].to(d), tg.to(d), il, tl, 0, False),
        "concat size": lambda d: A._ctc_loss(lp.to(d), tg.reshape(-1).to(d), il, tl, 0, False),
        "lengths dtype": lambda d: F.ctc_loss(lp.to(d), tg.to(d), torch.tensor([6.0, 5.0]),
                                              torch.tensor(tl)),
        "log_probs dtype": lambda d: A._ctc_loss(lp.half().to(d), tg.to(d), il, tl, 0, False),
    }
    for name, fn in bad.items():
        with pytest.raises(Exception) as cpu_error:
            fn("cpu")
        message = str(cpu_error.value).splitlines()[0]
        if name == "log_probs dtype":  # the CPU names its kernel, loom the op
            message = "not implemented for 'Half'"
        if name == "targets dtype":  # the type's name carries the device
            message = message.split(" but got")[0]
        with pytest.raises(cpu_error.type) as loom_error:
            fn("loom")
        assert message in str(loom_error.value), (name, message, str(loom_error.value))


def test_ctc_loss_backward_bad_input():
    lp, tg, il, tl = ctc_case(6, 2, 5, 3, [6, 5], [3, 2], torch.float32)
    lp, tg = lp.to("loom"), tg.to("loom")
    nll, alpha = A._ctc_loss(lp, tg, il, tl, 0, False)
    grad = torch.ones(2, device="loom")
    with pytest.raises(RuntimeError, match="_ctc_loss_backward: expected log_alpha of shape"):
        A._ctc_loss_backward(grad, lp, tg, il, tl, nll, alpha[:, :, :3], 0, False)
    with pytest.raises(RuntimeError, match=r"_ctc_loss_backward: expected grad of shape \[2\]"):
        A._ctc_loss_backward(grad[:1], lp, tg, il, tl, nll, alpha, 0, False)
    with pytest.raises(RuntimeError, match="expected neg_log_likelihood to have dtype"):
        A._ctc_loss_backward(grad, lp, tg, il, tl, nll.double(), alpha, 0, False)
    with pytest.raises(RuntimeError, match="expected targets on loom"):
        A._ctc_loss_backward(grad, lp, tg.cpu(), il, tl, nll, alpha, 0, False)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 6"):
        A._ctc_loss_backward(grad, lp, tg, [7, 5], tl, nll, alpha, 0, False)


@pytest.mark.parametrize("bad", [5, -1])
@pytest.mark.parametrize("backward", [False, True])
def test_ctc_loss_target_out_of_range_raises_asynchronously(bad, backward):
    lp, tg, il, tl = ctc_case(6, 2, 5, 3, [6, 5], [3, 2], torch.float32)
    lp, good = lp.to("loom"), tg.to("loom")
    nll, alpha = A._ctc_loss(lp, good, il, tl, 0, False)
    torch.loom.synchronize()
    tg[1, 1] = bad
    tg = tg.to("loom")
    with pytest.raises(IndexError, match=rf"_ctc_loss\w*: target {bad} at position 1 of sample 1 "
                                         r"is out of bounds for 5 classes"):
        if backward:
            A._ctc_loss_backward(torch.ones(2, device="loom"), lp, tg, il, tl, nll, alpha, 0,
                                 False)
        else:
            A._ctc_loss(lp, tg, il, tl, 0, False)
        torch.loom.synchronize()
    # beyond a sample's target length the padding is never read
    tg2 = good.clone()
    tg2[1, 2] = 99
    nd, _ = A._ctc_loss(lp, tg2, il, tl, 0, False)
    assert torch.equal(nd.cpu(), nll.cpu())


def test_ctc_loss_empty_log_probs():
    for T, N in ((0, 3), (5, 0)):
        lp = torch.randn(T, N, 4).log_softmax(2)
        tg = torch.zeros(N, 0, dtype=torch.long)
        for d in ("cpu", "loom"):
            with pytest.raises(RuntimeError, match="log_probs tensor must not be empty"):
                A._ctc_loss(lp.to(d), tg.to(d), [0] * N, [0] * N, 0, False)
        # the backward of an empty batch is empty, as on the CPU
        args = (torch.ones(N), lp, tg, [0] * N, [0] * N, torch.zeros(N), torch.zeros(N, T, 1), 0,
                False)
        gc = A._ctc_loss_backward(*args)
        gd = A._ctc_loss_backward(*(a.to("loom") if isinstance(a, torch.Tensor) else a
                                    for a in args))
        assert gd.shape == gc.shape == (T, N, 4)


# ---- thread-count independence -----------------------------------------------------

_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, torch, torch.nn.functional as F
    torch.manual_seed(0)
    h = hashlib.sha256()
    def add(t):
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for dtype in (torch.float32, torch.bfloat16):
        for shape, dim in (((64, 48, 32), 2), ((64, 48, 32), 0), ((3000, 40), 1)):
            v = torch.randn(shape).to(dtype).to("loom").requires_grad_()
            g = torch.randn([s if d == dim else 1 for d, s in enumerate(shape)]).to(dtype)
            g = g.to("loom").requires_grad_()
            w = torch._weight_norm(v, g, dim)
            add(w)
            for t in torch.autograd.grad(w, (v, g), torch.randn(shape).to(dtype).to("loom")):
                add(t)
    lp = torch.randn(60, 16, 20).log_softmax(2).to("loom").requires_grad_()
    tg = torch.randint(1, 20, (16, 15)).to("loom")
    il = torch.randint(30, 61, (16,))
    tl = torch.randint(1, 16, (16,))
    loss = F.ctc_loss(lp, tg, il, tl, reduction="none")
    add(loss)
    add(torch.autograd.grad(loss.sum(), lp)[0])
    print(h.hexdigest())
""")


def test_bitwise_identical_across_thread_counts():
    digests = []
    for threads in ("1", "2", "3"):
        env = dict(os.environ, LOOM_NUM_THREADS=threads, LOOM_FALLBACK="error")
        r = subprocess.run([sys.executable, "-c", _DETERMINISM_SCRIPT], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip().splitlines()[-1])
    assert len(set(digests)) == 1, digests


# ---- a wav2vec2-like model -------------------------------------------------------------


class TinyCTCModel(torch.nn.Module):
    """wav2vec2's shape in miniature: a feature convolution, a grouped
    positional convolution under the weight_norm parametrization (dim 2,
    as wav2vec2 registers it), layer norm, a linear CTC head."""

    def __init__(self, hidden=16, vocab=9):
        super().__init__()
        self.feature = torch.nn.Conv1d(1, hidden, 10, stride=5)
        pos = torch.nn.Conv1d(hidden, hidden, 7, padding=3, groups=4)
        self.pos = torch.nn.utils.parametrizations.weight_norm(pos, name="weight", dim=2)
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, wav):
        x = F.gelu(self.feature(wav.unsqueeze(1)))
        x = x + F.gelu(self.pos(x))
        return self.head(self.norm(x.transpose(1, 2)))  # [N, T, vocab]


def ctc_train(model, device, batches, steps=3):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for wav, labels, label_lengths in batches[:steps]:
        opt.zero_grad(set_to_none=True)
        logits = model(wav.to(device))
        lp = F.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
        in_lens = torch.full((wav.shape[0],), lp.shape[0], dtype=torch.long)
        in_lens[-1] -= 3
        loss = F.ctc_loss(lp, labels.to(device), in_lens, label_lengths, blank=0,
                          reduction="mean", zero_infinity=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_wav2vec2_like_model_trains_as_on_cpu():
    torch.manual_seed(12)
    model = TinyCTCModel()
    g = torch.Generator().manual_seed(13)
    batches = [(torch.randn(3, 200, generator=g), torch.randint(1, 9, (3, 8), generator=g),
                torch.tensor([8, 5, 3])) for _ in range(3)]
    lc, mc = ctc_train(copy.deepcopy(model), "cpu", batches)
    ld, md = ctc_train(copy.deepcopy(model), "loom", batches)
    torch.testing.assert_close(torch.tensor(ld), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    assert ld[-1] < ld[0]
    names = [n for n, _ in md.named_parameters()]
    assert "pos.parametrizations.weight.original0" in names  # g
    assert "pos.parametrizations.weight.original1" in names  # v
    moved = False
    for (n, a), (_, b), (_, p0) in zip(md.named_parameters(), mc.named_parameters(),
                                       model.named_parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5, msg=n)
        moved |= not torch.equal(b.detach(), p0.detach())
    assert moved
