"""scaled_dot_product_attention on loom against the CPU: float dtypes,
causal and masked, the tiled, fused bf16 (AMX) and decoding kernels, NaN
and infinite rows, and which op the dispatcher picks."""
import pytest
import torch
import torch.nn.functional as F
from nn_compare import DTYPES, close, grads, pair

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


def sdpa_agrees(cpu, dev, dtype, grad=True, mask=None, **kw):
    """scaled_dot_product_attention of (q, k, v) leaves on the CPU and on
    loom (`mask` moved there too): the outputs are close, and with `grad`
    the three gradients of a random output gradient."""
    oc = F.scaled_dot_product_attention(*cpu, attn_mask=mask, **kw)
    od = F.scaled_dot_product_attention(
        *dev, attn_mask=None if mask is None else mask.to("loom"), **kw)
    close(od, oc.detach(), dtype, scale=2.0)
    if grad:
        g = torch.randn(oc.shape).to(dtype)
        for a, b in zip(grads(od, list(dev), g.to("loom")), grads(oc, list(cpu), g)):
            close(a, b, dtype, scale=4.0)




@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("shape", [((2, 3, 5, 8), (2, 3, 7, 8), 6), ((4, 9, 16), (4, 9, 16), 16),
                                   ((1, 2, 70, 16), (1, 2, 90, 16), 16),  # several tiles
                                   ((1, 2, 9, 256), (1, 2, 70, 256), 200),  # the widest tiled heads
                                   ((1, 1, 5, 300), (1, 1, 6, 300), 300)])  # past them: rows
def test_sdpa(dtype, causal, mask_kind, shape):
    torch.manual_seed(14)
    qs, ks, ev = shape
    vs = ks[:-1] + (ev,)
    qc, qd = pair(torch.randn(qs).to(dtype))
    kc, kd = pair(torch.randn(ks).to(dtype))
    vc, vd = pair(torch.randn(vs).to(dtype))
    L, S = qs[-2], ks[-2]
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(L, S) > 0.3
        mask[:, 0] = True  # every query sees at least one key
    elif mask_kind == "float":
        mask = torch.randn(L, S).to(dtype)
    md = None if mask is None else mask.to("loom")
    assert torch._fused_sdp_choice(qd, kd, vd, md, 0.0, causal) == 4  # overrideable
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), dtype, mask=mask, is_causal=causal and mask is None)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, -0.3])
@pytest.mark.parametrize("dims", [(16, 24), (64, 96)])
def test_sdpa_bf16_on_amx(causal, scale, dims):
    # bf16 without a mask runs fused on AMX tiles where the CPU has them:
    # 600 queries are 9 full items and a partial one, 4096 keys 16 key
    # blocks; causal items stop at their last query. Head dims that are not
    # multiples of 32 are zero-padded to the tiles' steps. A negative scale
    # must not turn hidden keys into visible ones.
    torch.manual_seed(17)
    e, ev = dims
    qc, qd = pair(torch.randn(1, 2, 600, e).bfloat16())
    kc, kd = pair(torch.randn(1, 2, 4096, e).bfloat16())
    vc, vd = pair(torch.randn(1, 2, 4096, ev).bfloat16())
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, is_causal=causal, scale=scale)


def bf16_qkv(shape):
    """Random bf16 q (BH, L, E), k (BH, S, E), v (BH, S, Ev), each as a
    (CPU, loom) pair of leaves, for shape (BH, L, S, E, Ev)."""
    bh, L, S, e, ev = shape
    return (pair(torch.randn(bh, n, d).bfloat16()) for n, d in ((L, e), (S, e), (S, ev)))


@pytest.mark.parametrize("shape", [(3, 37, 50, 32, 64), (1, 1, 1, 32, 32), (2, 70, 33, 128, 32),
                                   (2, 5, 700, 64, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_fused_edges(shape, causal):
    # partial query and key blocks, one query, more queries than keys
    # (causal rows past the keys see them all), wide heads; a few queries
    # (one item per head, which packs its own key blocks) over several key
    # blocks
    torch.manual_seed(18)
    (qc, qd), (kc, kd), (vc, vd) = bf16_qkv(shape)
    sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, grad=False, is_causal=causal)


def test_sdpa_bf16_head_dims_read_only_their_columns():
    # head dims of 24 are padded to the tiles' 32 with zeros, never with the
    # next columns of a row: here those hold NaN, which a padded product
    # (0 * NaN) would spread into every result
    torch.manual_seed(19)
    full = [torch.randn(2, 300, 32).bfloat16() for _ in range(3)]
    for t in full:
        t[..., 24:] = float("nan")
    qc, kc, vc = (t[..., :24] for t in full)
    od = F.scaled_dot_product_attention(*(t.to("loom")[..., :24] for t in full))
    close(od, F.scaled_dot_product_attention(qc, kc, vc), torch.bfloat16, scale=2.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_sdpa_nan_rows(dtype):
    # a NaN in a query's scores makes its row NaN, as on the CPU, and so
    # does a +inf score; the other rows are untouched (the blocked kernels
    # too: fp32, and bf16 where the CPU has no AMX)
    torch.manual_seed(22)
    q, k, v = (torch.randn(1, 40, 32).to(dtype) for _ in range(3))
    q[0, 5, 3] = float("nan")
    k[0, 7, 0] = float("inf")
    ref = F.scaled_dot_product_attention(q, k, v)
    out = F.scaled_dot_product_attention(q.to("loom"), k.to("loom"), v.to("loom")).cpu()
    assert torch.equal(out.isnan(), ref.isnan())
    torch.testing.assert_close(out.nan_to_num(), ref.nan_to_num(), rtol=2e-2, atol=2e-2)
    # The gradients are NaN where the CPU's are: the NaN row weighs NaN on
    # every key, so all of dK and dV, and its own row of dQ.
    k[0, 7, 0] = 0.0
    inputs = [tuple(t.to(dev).detach().requires_grad_() for t in (q, k, v)) for dev in ("cpu", "loom")]
    for qkv in inputs:
        out = F.scaled_dot_product_attention(*qkv)
        out.backward(torch.ones_like(out))
    for r, l in zip(*inputs):
        assert torch.equal(l.grad.cpu().isnan(), r.grad.isnan())
        torch.testing.assert_close(l.grad.cpu().nan_to_num(), r.grad.nan_to_num(), rtol=2e-2,
                                   atol=2e-2)


def test_sdpa_hidden_infinite_values_add_nothing():
    # A key hidden from a query adds nothing to its row, even where its value
    # (the output) or its key (the query gradient) is infinite: rows 64..99
    # share a tile with key 100 but cannot see it, and keep the bits they
    # have with that key zero.
    torch.manual_seed(23)
    q, k, v = (torch.randn(1, 2, 150, 16) for _ in range(3))

    def run(key, value):
        qd, kd, vd = (t.to("loom").requires_grad_() for t in (q, key, value))
        out = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        out[:, :, :100].sum().backward()
        return out.detach().cpu()[:, :, :100], qd.grad.cpu()[:, :, :100]

    zero_k, zero_v, inf_k, inf_v = k.clone(), v.clone(), k.clone(), v.clone()
    zero_k[:, :, 100] = zero_v[:, :, 100] = 0.0
    inf_k[:, :, 100] = inf_v[:, :, 100] = float("inf")
    out, dq = run(zero_k, zero_v)
    assert bool(out.isfinite().all()) and bool(dq.isfinite().all())
    assert torch.equal(run(zero_k, inf_v)[0], out)
    assert torch.equal(run(inf_k, zero_v)[1], dq)


@pytest.mark.parametrize("shape", [(8, 1, 4096, 64, 64), (3, 3, 1000, 24, 40), (2, 4, 17, 256, 256),
                                   (1, 2, 16384, 16, 200), (1, 1, 16385, 32, 32), (2, 4, 1, 8, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_decoding(shape, causal):
    # Up to 4 queries over up to 16384 keys (one more key: the fused tiles)
    # read each key and value row once; odd head dims, a negative scale, and
    # the gradients through the log-sum-exp it leaves.
    torch.manual_seed(20)
    bh, L, S, e, ev = shape
    (qc, qd), (kc, kd), (vc, vd) = bf16_qkv(shape)
    for scale in (None, -0.3):
        sdpa_agrees((qc, kc, vc), (qd, kd, vd), torch.bfloat16, grad=scale is not None,
                    is_causal=causal, scale=scale)
    # the log-sum-exp the backward reads, against float64
    lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        qd.detach()[None], kd.detach()[None], vd.detach()[None], is_causal=causal)[1]
    s64 = qc.detach().double() @ kc.detach().double().transpose(-1, -2) / e ** 0.5
    if causal:
        s64 = s64.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.cpu()[0].double(), torch.logsumexp(s64, -1), rtol=1e-5,
                               atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_bf16_decoding_nan_rows_and_columns(causal):
    # A NaN score makes its query's row NaN, an infinite key every row whose
    # score with it is +inf or NaN; columns past the head dims (NaN here)
    # are never read. (Causal rows hide key 7, which the CPU kernel still
    # adds into their scores: no infinite key there.)
    torch.manual_seed(21)
    full = [torch.randn(3, n, 32).bfloat16() for n in (4, 300, 300)]
    for t in full:
        t[..., 24:] = float("nan")
    q, k, v = (t[..., :24].clone() for t in full)
    q[0, 2, 3] = float("nan")
    if not causal:
        k[1, 7, 0] = float("inf")
    for t, c in zip(full, (q, k, v)):
        t[..., :24] = c
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out = F.scaled_dot_product_attention(*(t.to("loom")[..., :24] for t in full),
                                         is_causal=causal).cpu()
    assert torch.equal(out.isnan(), ref.isnan())
    assert bool(out.isnan().any())
    torch.testing.assert_close(out.nan_to_num(), ref.nan_to_num(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_skips_the_tiles_its_mask_hides(dtype):
    # A KV cache's mask: query i, at position 100 + i, sees slots 0..100 + i
    # of 300, so the last key tile is hidden from every query, and a query
    # block's first rows miss tiles its later rows see; slots 64..127, a
    # whole tile, are hidden from all. Skipping the hidden tiles gives the
    # bits of a mask that hides them by a large finite bias, whose tiles are
    # computed.
    torch.manual_seed(16)
    q, k, v = (torch.randn(1, 2, n, 16).to(dtype) for n in (150, 300, 300))
    mask = torch.arange(300)[None] <= torch.arange(150)[:, None] + 100
    mask[:, 64:128] = False
    bias = torch.zeros(150, 300).to(dtype).masked_fill(~mask, -1e30)
    qd, kd, vd = (t.to("loom") for t in (q, k, v))
    skipped = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask.to("loom"))
    computed = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=bias.to("loom"))
    assert torch.equal(skipped.cpu(), computed.cpu())
    close(skipped, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), dtype, scale=2.0)


def test_sdpa_native_op_and_fallback_choices():
    q = torch.randn(2, 2, 4, 8, device="loom")
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q)
    assert out[0].shape == (2, 2, 4, 8) and out[1].shape == (2, 2, 4)
    ref = F.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu())
    torch.testing.assert_close(out[0].cpu(), ref, rtol=1e-5, atol=1e-5)
    # dropout and grouped heads go to the math path
    assert torch._fused_sdp_choice(q, q, q, None, 0.5, False) == 0
    k = torch.randn(2, 1, 4, 8, device="loom")
    assert torch._fused_sdp_choice(q, k, k, None, 0.0, False, enable_gqa=True) == 0
